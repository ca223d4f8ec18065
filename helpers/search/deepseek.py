"""The default online backend of Happy-LLM §8.3.2: DeepSeek web search, asked for *evidence*, not an answer.

How the ``deepseek-search`` package (PyPI 0.2.0) calls DeepSeek, reproduced with the standard
library: the Anthropic-compatible Messages API at ``https://api.deepseek.com/anthropic``
(``POST /v1/messages``, ``Authorization: Bearer <key>``, ``anthropic-version``), one user message
with the query, the server-side tool ``{"type": "web_search_20260209", "name": "web_search",
"max_uses": N}`` forced with ``tool_choice``, and ``pause_turn`` answers continued (at most 3
times) by sending the assistant content back.

"Evidence mode" is Happy-LLM §8.3.2's twist: the system prompt asks for numbered evidence blocks

    [1] Source: <page title> | <url>
    Evidence: <the passage, quoted>

which are split into ``SearchItem``s, so the policy reads evidence, not DeepSeek's conclusion.
When the model does not follow the format, the search-result citations are used instead.
The key is ``DEEPSEEK_API_KEY`` in ``.env``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import urlparse

from helpers.search.format import MAX_CONTENT_CHARS, cut
from helpers.search.http import (BadResponse, Deadline, OnlineSearchClient, RateLimiter, RetryPolicy, check_key,
                                 env_value, http_call)
from helpers.search.types import SEARCH_TOPK, SearchItem, SearchResult

DEEPSEEK_BASE_URL = "https://api.deepseek.com/anthropic"
DEFAULT_MODEL = "deepseek-v4-flash"
WEB_SEARCH_TOOL_TYPE = "web_search_20260209"
MAX_CONTINUATIONS = 3
EVIDENCE_SYSTEM_PROMPT = (
    "You are a search engine. Use web_search, then reply ONLY with numbered evidence blocks, one per "
    "useful source, best first, at most {n}:\n"
    "[1] Source: <page title> | <url>\n"
    "Evidence: <a short passage copied from that source that bears on the query>\n"
    "Do not answer the question yourself and add nothing else."
)
_BLOCK = re.compile(r"\[(\d+)\]\s*Source:\s*(?P<source>[^\n]*)\n\s*Evidence:\s*(?P<evidence>.*?)"
                    r"(?=\n\s*\[\d+\]\s*Source:|\Z)", re.S)
_URL = re.compile(r"https?://[^\s|)>\]]+")


def split_evidence(text: str, max_chars: int = MAX_CONTENT_CHARS) -> list[SearchItem]:
    """Numbered ``[n] Source: … Evidence: …`` blocks as items (others ignored)."""
    items = []
    for match in _BLOCK.finditer(text or ""):
        source = match["source"].strip()
        evidence = " ".join(match["evidence"].split())
        if not evidence:
            continue
        url_match = _URL.search(source)
        url = url_match.group(0).rstrip(".,;") if url_match else None
        title = _URL.sub("", source).strip(" |-–—:<>()[]") or (urlparse(url).netloc if url else "") or "Untitled"
        items.append(SearchItem(title=title, content=cut(evidence, max_chars), source="DeepSeek web search", url=url))
    return items


def citations_as_items(content: list, max_chars: int = MAX_CONTENT_CHARS) -> list[SearchItem]:
    """Fallback: the cited passages of text blocks (title, url, cited_text), first use of a URL."""
    items, seen = [], set()
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text":
            continue
        for citation in block.get("citations") or []:
            if not isinstance(citation, dict):
                continue
            url, text = citation.get("url"), str(citation.get("cited_text") or "").strip()
            if not text or url in seen:
                continue
            seen.add(url)
            items.append(SearchItem(title=str(citation.get("title") or url or "Untitled"),
                                    content=cut(text, max_chars), source="DeepSeek web search", url=url))
    return items


class DeepSeekSearchClient(OnlineSearchClient):
    name = "deepseek"
    retry_statuses = frozenset({429, 500, 502, 503, 504, 529})  # 529: overloaded (Anthropic API)

    def __init__(self, api_key: str, *, base_url: str = DEEPSEEK_BASE_URL, model: str = DEFAULT_MODEL,
                 topk: int = SEARCH_TOPK, max_uses: int = 3, max_tokens: int = 2048, timeout: float | None = 60.0,
                 retry: RetryPolicy | None = None, limiter: RateLimiter | None = None,
                 max_chars: int = MAX_CONTENT_CHARS):
        super().__init__(timeout=timeout, retry=retry, limiter=limiter)
        if not api_key:
            raise ValueError("no DeepSeek key: set DEEPSEEK_API_KEY in .env")
        self._api_key = check_key(api_key, "DEEPSEEK_API_KEY")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.topk = topk
        self.max_uses = max_uses
        self.max_tokens = max_tokens
        self.max_chars = max_chars

    @classmethod
    def from_env(cls, env_path: str | Path | None = None, **kwargs) -> "DeepSeekSearchClient":
        return cls(env_value("DEEPSEEK_API_KEY", env_path) or "", **kwargs)

    def __repr__(self) -> str:
        return f"DeepSeekSearchClient(base_url={self.base_url!r}, model={self.model!r})"

    def _secrets(self) -> list[str]:
        return [self._api_key]

    def _request(self, query: str, started: float, deadline: Deadline) -> SearchResult:
        messages = [{"role": "user", "content": query}]
        params = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": EVIDENCE_SYSTEM_PROMPT.format(n=self.topk),
            "messages": messages,
            "tools": [{"type": WEB_SEARCH_TOOL_TYPE, "name": "web_search", "max_uses": self.max_uses}],
            "tool_choice": {"type": "tool", "name": "web_search"},
        }
        headers = {"Authorization": f"Bearer {self._api_key}", "anthropic-version": "2023-06-01"}
        for _ in range(MAX_CONTINUATIONS + 1):
            response = http_call(f"{self.base_url}/v1/messages", method="POST", json_body=params,
                                 headers=headers, deadline=deadline)
            payload = response.json()
            if not isinstance(payload, dict) or not isinstance(payload.get("content"), list):
                raise BadResponse("answer has no 'content' list")
            if payload.get("stop_reason") != "pause_turn":
                break
            # the server-side search paused: send its turn back so it can finish
            messages.append({"role": "assistant", "content": payload["content"]})
            params.pop("tool_choice", None)
        content = payload["content"]
        text = "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
        items = split_evidence(text, self.max_chars) or citations_as_items(content, self.max_chars)
        return SearchResult(ok=True, items=items[: self.topk], latency=time.perf_counter() - started,
                            status=response.status)
