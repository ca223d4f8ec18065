"""The keyless online backend of Happy-LLM §8.3.2: full-text search of English Wikipedia (MediaWiki Action API).

One request searches (``generator=search``) and returns, for the top three pages, the plain-text
intro cut to 1,200 characters and the page URL. Results are ordered by the search rank
(``index``). All clients share one start-rate limiter (about 200 requests a minute, well within
Wikimedia's etiquette for a descriptive User-Agent).
"""

from __future__ import annotations

import time

from helpers.search.http import (USER_AGENT, BadResponse, Deadline, OnlineSearchClient, RateLimiter, RetryPolicy, clean_query,
                                 http_call, redact, with_params)
from helpers.search.types import SEARCH_TOPK, SearchItem, SearchResult

WIKIPEDIA_SEARCH_ENDPOINT = "https://en.wikipedia.org/w/api.php"
WIKIPEDIA_USER_AGENT = USER_AGENT
SHARED_LIMITER = RateLimiter(per_minute=200)


def search_params(query: str, limit: int = 3, exchars: int = 1200) -> dict:
    return {
        "action": "query",
        "format": "json",
        "formatversion": 2,
        "generator": "search",
        "gsrsearch": query,
        "gsrlimit": limit,
        "prop": "extracts|info",
        "explaintext": 1,
        "exintro": 1,
        "exchars": exchars,
        "inprop": "url",
        "redirects": 1,
        "utf8": 1,
    }


def parse_pages(payload) -> list[SearchItem]:
    """Pages of a formatversion=2 answer as items, in search order, skipping empty extracts."""
    if not isinstance(payload, dict):
        raise BadResponse("answer is not a JSON object")
    if "error" in payload:
        raise BadResponse(f"API error: {payload['error'].get('info', payload['error']) if isinstance(payload['error'], dict) else payload['error']}")
    pages = (payload.get("query") or {}).get("pages", [])
    if not isinstance(pages, list):
        raise BadResponse("'pages' is not a list")
    if any(not isinstance(page, dict) for page in pages):
        raise BadResponse("a page is not an object")
    ordered = sorted(pages, key=lambda page: int(page.get("index", 1_000_000)))
    return [
        SearchItem(title=str(page.get("title") or "Untitled").strip(),
                   content=str(page.get("extract") or "").strip(),
                   source="Wikipedia", url=str(page.get("fullurl") or "").strip() or None)
        for page in ordered if str(page.get("extract") or "").strip()
    ]


class WikipediaSearchClient(OnlineSearchClient):
    name = "wikipedia"

    def __init__(self, *, endpoint: str = WIKIPEDIA_SEARCH_ENDPOINT, topk: int = SEARCH_TOPK, exchars: int = 1200,
                 timeout: float | None = 15.0, retry: RetryPolicy | None = None,
                 limiter: RateLimiter | None = SHARED_LIMITER):
        super().__init__(timeout=timeout, retry=retry, limiter=limiter)
        self.endpoint = endpoint
        self.topk = topk
        self.exchars = exchars

    def __repr__(self) -> str:
        return f"WikipediaSearchClient(endpoint={self.endpoint!r}, topk={self.topk})"

    def _prepare(self, query: str) -> tuple[str, dict[str, str]]:
        """The one place the request is built: the GET URL (endpoint + encoded parameters) and headers.

        Both ``search`` (through ``_request``) and ``request_url`` use it, so they cannot drift apart.
        Anything secret would belong in the headers, never in the URL (Wikipedia needs no key).
        """
        url = with_params(self.endpoint, search_params(query, self.topk, self.exchars))
        return url, {"User-Agent": WIKIPEDIA_USER_AGENT}

    def request_url(self, query: str) -> str:
        """The exact URL ``search(query)`` requests (query stripped as ``search`` does); sends nothing.

        Only the URL: headers are left out, and any secret of the client is masked as ``***``.
        Raises ValueError for a blank query, for which ``search`` sends no request at all.
        """
        query = clean_query(query)
        if not query:
            raise ValueError("empty query: search() sends no request for it")
        url, _headers = self._prepare(query)
        return redact(url, self._secrets())

    def _request(self, query: str, started: float, deadline: Deadline) -> SearchResult:
        url, headers = self._prepare(query)
        response = http_call(url, headers=headers, deadline=deadline)
        items = parse_pages(response.json())
        return SearchResult(ok=True, items=items, latency=time.perf_counter() - started, status=response.status)
