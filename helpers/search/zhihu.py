"""The Zhihu backend of Happy-LLM §8.3.2: Zhihu's developer global-search API (needs keys).

``GET https://developer.zhihu.com/api/v1/content/global_search?Query=...&Count=3&SearchDB=all``
with ``Authorization: Bearer <key>`` and ``X-Request-Timestamp``; items come from
``Data.Items[]``. Keys are read from ``ZHIHU_SEARCH_KEYS`` in ``.env`` (comma or newline
separated) and used round-robin; a key answered 429 is dropped for the rest of the run and the
request moves on to the next key (counted in ``stats.failovers``).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from helpers.search.format import MAX_CONTENT_CHARS, cut
from helpers.search.http import (BadResponse, Deadline, OnlineSearchClient, RateLimiter, RetryPolicy, check_key,
                                 env_value, http_call)
from helpers.search.types import SEARCH_TOPK, SearchItem, SearchResult

ZHIHU_SEARCH_ENDPOINT = "https://developer.zhihu.com/api/v1/content/global_search"


def parse_keys(raw: str | None) -> list[str]:
    keys: list[str] = []
    for key in re.split(r"[,\n]", raw or ""):
        key = key.strip()
        if key and key not in keys:
            keys.append(key)
    return keys


def parse_items(payload, max_chars: int = MAX_CONTENT_CHARS) -> list[SearchItem]:
    if not isinstance(payload, dict):
        raise BadResponse("answer is not a JSON object")
    code = payload.get("Code", 0)
    if code not in (0, "0", None):
        raise BadResponse(f"API error code {code}: {str(payload.get('Message', ''))[:200]}")
    data = payload.get("Data") or {}
    items = data.get("Items") if isinstance(data, dict) else None
    if items is None:
        items = []
    if not isinstance(items, list) or any(not isinstance(i, dict) for i in items):
        raise BadResponse("'Data.Items' is not a list of objects")
    out = []
    for item in items:
        content = str(item.get("ContentText") or "").strip()
        if not content:
            continue
        kind, author = str(item.get("ContentType") or "").strip(), str(item.get("AuthorName") or "").strip()
        source = "Zhihu" + (f" {kind}" if kind else "") + (f" by {author}" if author else "")
        out.append(SearchItem(title=str(item.get("Title") or "Untitled").strip(), content=cut(content, max_chars),
                              source=source, url=str(item.get("Url") or "").strip() or None))
    return out


class ZhihuSearchClient(OnlineSearchClient):
    name = "zhihu"
    # a 429 drops the key and fails over at once; only server errors are retried with backoff
    retry_statuses = frozenset({500, 502, 503, 504})

    def __init__(self, keys: list[str], *, endpoint: str = ZHIHU_SEARCH_ENDPOINT, topk: int = SEARCH_TOPK,
                 timeout: float | None = 15.0, retry: RetryPolicy | None = None,
                 limiter: RateLimiter | None = None, max_chars: int = MAX_CONTENT_CHARS):
        super().__init__(timeout=timeout, retry=retry, limiter=limiter)
        if not keys:
            raise ValueError("no Zhihu keys: set ZHIHU_SEARCH_KEYS in .env (comma or newline separated)")
        self._keys = [check_key(key, "ZHIHU_SEARCH_KEYS", f" at position {i + 1} of {len(keys)}")
                      for i, key in enumerate(keys)]
        self._dropped: list[str] = []
        self._next = 0
        self._keys_lock = threading.Lock()
        self._current = threading.local()
        self.endpoint = endpoint
        self.topk = topk
        self.max_chars = max_chars

    @classmethod
    def from_env(cls, env_path: str | Path | None = None, **kwargs) -> "ZhihuSearchClient":
        return cls(parse_keys(env_value("ZHIHU_SEARCH_KEYS", env_path)), **kwargs)

    @property
    def active_keys(self) -> int:
        with self._keys_lock:
            return len(self._keys)

    def __repr__(self) -> str:
        return f"ZhihuSearchClient(endpoint={self.endpoint!r}, keys={self.active_keys} active)"

    def _secrets(self) -> list[str]:
        return self._keys + self._dropped

    def _take_key(self) -> str | None:
        with self._keys_lock:
            if not self._keys:
                return None
            key = self._keys[self._next % len(self._keys)]
            self._next += 1
            return key

    def _on_rate_limited(self) -> bool:
        key = getattr(self._current, "key", None)
        with self._keys_lock:
            if key in self._keys:
                self._keys.remove(key)
                self._dropped.append(key)
            return bool(self._keys)

    def _request(self, query: str, started: float, deadline: Deadline) -> SearchResult:
        key = self._take_key()
        if key is None:
            raise BadResponse("every Zhihu key was rate limited (HTTP 429) in this run")
        self._current.key = key
        response = http_call(
            self.endpoint,
            params={"Query": query, "Count": self.topk, "SearchDB": "all"},
            headers={"Authorization": f"Bearer {key}", "X-Request-Timestamp": str(int(time.time()))},
            deadline=deadline,
        )
        items = parse_items(response.json(), self.max_chars)
        return SearchResult(ok=True, items=items, latency=time.perf_counter() - started, status=response.status)
