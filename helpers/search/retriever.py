"""A backend for any server with the Search-R1 retriever API (this course's or a FlashRAG e5 one).

Search-R1 users start ``search_r1/search/retrieval_server.py`` (e5 over wiki-18) on port 8000;
point this client at it: ``create_search_client("retriever", url="http://127.0.0.1:8000/retrieve")``.
The URL can also come from ``SEARCH_R1_RETRIEVER_URL`` in ``.env``.
"""

from __future__ import annotations

import time

from helpers.search.format import MAX_CONTENT_CHARS, cut
from helpers.search.http import BadResponse, Deadline, OnlineSearchClient, RetryPolicy, env_value, http_call
from helpers.search.types import SEARCH_TOPK, SearchItem, SearchResult

DEFAULT_URL = "http://127.0.0.1:8000/retrieve"


def _document_to_item(doc, max_chars: int) -> SearchItem:
    if not isinstance(doc, dict):
        raise BadResponse("document is not an object")
    contents = doc.get("contents")
    if contents is None:  # some FlashRAG corpora use title/text fields
        title, text = str(doc.get("title") or ""), str(doc.get("text") or "")
    else:
        head, sep, tail = str(contents).partition("\n")
        title, text = (head.strip().strip('"'), tail.strip()) if sep else ("", head.strip())
    source = "Search-R1 retriever" + (f" ({doc['id']})" if doc.get("id") is not None else "")
    return SearchItem(title=title or "Untitled", content=cut(text, max_chars), source=source, url=None)


class RetrieverSearchClient(OnlineSearchClient):
    name = "retriever"

    def __init__(self, url: str | None = None, *, topk: int = SEARCH_TOPK, timeout: float | None = 10.0,
                 max_chars: int = MAX_CONTENT_CHARS, retry: RetryPolicy | None = None, env_path=None):
        super().__init__(timeout=timeout, retry=retry or RetryPolicy(max_retries=1, backoff=0.5))
        self.url = url or env_value("SEARCH_R1_RETRIEVER_URL", env_path) or DEFAULT_URL
        self.topk = topk
        self.max_chars = max_chars

    def __repr__(self) -> str:
        return f"RetrieverSearchClient(url={self.url!r}, topk={self.topk})"

    def _request(self, query: str, started: float, deadline: Deadline) -> SearchResult:
        response = http_call(self.url, method="POST", deadline=deadline,
                             json_body={"queries": [query], "topk": self.topk, "return_scores": True})
        payload = response.json()
        # {"result": [[...]]} from retrieval_server.py; some forks return the bare list
        result = payload.get("result") if isinstance(payload, dict) else payload
        if not isinstance(result, list) or len(result) != 1 or not isinstance(result[0], list):
            raise BadResponse("expected {'result': [[documents]]} with one list per query")
        items = []
        for entry in result[0][: self.topk]:
            doc = entry.get("document", entry) if isinstance(entry, dict) else entry
            items.append(_document_to_item(doc, self.max_chars))
        return SearchResult(ok=True, items=items, latency=time.perf_counter() - started, status=response.status)
