"""The one shape every search backend returns, so the rollout never sees HTTP."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

# passages one search returns, in training and evaluation alike and in every backend; every recorded run
# read 3 (more passages need a larger rollout.max_tool_response_tokens, or the observation is cut)
SEARCH_TOPK = 3


@dataclass(frozen=True)
class SearchItem:
    title: str
    content: str
    source: str | None = None
    url: str | None = None
    # the corpus passage id when the backend knows it (the local index does); never shown to the model
    passage_id: str | None = None


@dataclass(frozen=True)
class SearchResult:
    ok: bool
    items: list[SearchItem]
    latency: float
    status: int | None = None
    error: str | None = None


@dataclass
class SearchStats:
    """Per-backend counters; thread-safe because searches run in a pool."""

    requests: int = 0
    successes: int = 0
    timeouts: int = 0
    rate_limited: int = 0  # HTTP 429
    errors: int = 0
    results: int = 0
    retries: int = 0  # extra attempts after a 429 / 5xx
    failovers: int = 0  # switches to another API key after a 429 (zhihu)
    total_latency: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, result: SearchResult, *, timeout: bool = False, rate_limited: int = 0,
               retries: int = 0, failovers: int = 0) -> None:
        """One search() call: `rate_limited` counts every 429 answer seen while serving it."""
        with self._lock:
            self.requests += 1
            self.total_latency += result.latency
            self.rate_limited += rate_limited
            self.retries += retries
            self.failovers += failovers
            if result.ok:
                self.successes += 1
                self.results += len(result.items)
            elif timeout:
                self.timeouts += 1
            else:
                self.errors += 1

    @property
    def mean_latency(self) -> float:
        return self.total_latency / self.requests if self.requests else 0.0

    def as_dict(self) -> dict[str, float]:
        with self._lock:
            return {
                "requests": self.requests,
                "successes": self.successes,
                "timeouts": self.timeouts,
                "rate_limited": self.rate_limited,
                "errors": self.errors,
                "results": self.results,
                "retries": self.retries,
                "failovers": self.failovers,
                "mean_latency": self.mean_latency,
            }


class SearchClient(Protocol):
    name: str
    stats: SearchStats

    def search(self, query: str) -> SearchResult:
        """Never raises: failures come back as SearchResult(ok=False, error=...)."""
        ...
