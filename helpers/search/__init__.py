"""Search backends as the agent's environment: every backend returns one SearchResult.

    client = create_search_client("local")          # offline BM25, the default
    result = client.search("first nobel prize in physics")
    print(format_results(result))                   # the observation the model reads

Backends: ``local`` (offline index), ``retriever`` (any Search-R1 / FlashRAG retrieval server),
``wikipedia`` (MediaWiki Action API), ``deepseek`` (DeepSeek web search, evidence mode) and
``zhihu`` (Zhihu global search). ``search()`` never raises: failures come back as
``SearchResult(ok=False, error=...)`` and are counted in ``client.stats``.
"""

from __future__ import annotations

from pathlib import Path

from helpers.search.format import format_item, format_results
from helpers.search.types import SEARCH_TOPK, SearchClient, SearchItem, SearchResult, SearchStats

BACKENDS = ("local", "retriever", "wikipedia", "deepseek", "zhihu")
# Online services answer in seconds; the local index in milliseconds.
DEFAULT_TIMEOUTS = {"local": None, "retriever": 10.0, "wikipedia": 15.0, "deepseek": 60.0, "zhihu": 15.0}


def resolve_search_timeout(backend: str, timeout: float | None) -> float | None:
    if timeout is not None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        return float(timeout)
    return DEFAULT_TIMEOUTS.get(backend)


def check_search_topk(topk) -> None:
    """A clear error for a number of passages a search cannot return."""
    if not isinstance(topk, int) or isinstance(topk, bool) or topk < 1:
        raise ValueError(f"search_topk is the number of passages a search returns (>= 1), got {topk!r}")


def check_client_topk(search_client, topk: int) -> None:
    """A search client handed to training or evaluation must return the passages its config records:
    a run whose config says k while its searches return another number would misreport what it
    learned from. A client that states no `topk` (a test double, a remote service) is taken as is."""
    stated = getattr(search_client, "topk", None)
    if isinstance(stated, int) and not isinstance(stated, bool) and stated != topk:
        raise ValueError(f"the search client returns {stated} passages a search but the config says "
                         f"search_topk={topk}: pass a client made with topk={topk}, or set search_topk={stated}")


def create_search_client(backend: str = "local", env_path: str | Path | None = None, *,
                         timeout: float | None = None, topk: int = SEARCH_TOPK, **kwargs) -> SearchClient:
    """One client per backend name; extra keyword arguments go to that backend's class."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown search backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    resolved = resolve_search_timeout(backend, timeout)
    if backend == "local":
        from helpers.search.local import LocalSearchClient

        return LocalSearchClient(topk=topk, **kwargs)
    if backend == "retriever":
        from helpers.search.retriever import RetrieverSearchClient

        return RetrieverSearchClient(topk=topk, timeout=resolved, **kwargs)
    if backend == "wikipedia":
        from helpers.search.wikipedia import WikipediaSearchClient

        return WikipediaSearchClient(topk=topk, timeout=resolved, **kwargs)
    if backend == "deepseek":
        from helpers.search.deepseek import DeepSeekSearchClient

        return DeepSeekSearchClient.from_env(env_path, topk=topk, timeout=resolved, **kwargs)
    from helpers.search.zhihu import ZhihuSearchClient

    return ZhihuSearchClient.from_env(env_path, topk=topk, timeout=resolved, **kwargs)


__all__ = [
    "BACKENDS",
    "SEARCH_TOPK",
    "SearchClient",
    "SearchItem",
    "SearchResult",
    "SearchStats",
    "check_client_topk",
    "check_search_topk",
    "create_search_client",
    "format_item",
    "format_results",
    "resolve_search_timeout",
]
