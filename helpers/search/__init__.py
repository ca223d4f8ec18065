"""Search backends as the agent's environment: every backend returns one SearchResult."""

from helpers.search.types import SearchClient, SearchItem, SearchResult, SearchStats

__all__ = ["SearchClient", "SearchItem", "SearchResult", "SearchStats"]
