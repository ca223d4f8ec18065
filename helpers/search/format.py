"""Search results as the evidence text the model reads (the observation).

Layout of Happy-LLM §8.3.2:

    [1] Title: ...
        Content: ...
        Source: ...
        URL: ...

Lines whose field is empty are left out so the model does not pay tokens for "URL: None".
"""

from __future__ import annotations

from helpers.search.types import SearchItem, SearchResult

NO_RESULTS = "No results found. Try a different, shorter query."
MAX_CONTENT_CHARS = 1200  # Happy-LLM §8.3.2's exchars=1200


def cut(text: str, limit: int = MAX_CONTENT_CHARS) -> str:
    """At most `limit` characters, cut at a word boundary with an ellipsis (like exchars)."""
    text = str(text).strip()
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space > limit // 2:
        head = head[:space]
    return head.rstrip() + "…"


def _one_line(text: str | None) -> str:
    return " ".join(str(text or "").split())


def format_item(index: int, item: SearchItem) -> str:
    """One numbered evidence block; `index` is 1-based as the model sees it."""
    lines = [f"[{index}] Title: {_one_line(item.title) or 'Untitled'}"]
    lines.append(f"    Content: {_one_line(item.content)}")
    if _one_line(item.source):
        lines.append(f"    Source: {_one_line(item.source)}")
    if _one_line(item.url):
        lines.append(f"    URL: {_one_line(item.url)}")
    return "\n".join(lines)


def format_results(result: SearchResult, max_items: int | None = None) -> str:
    """The whole observation for one search call, error and empty cases included."""
    if not result.ok:
        return f"Search failed: {_one_line(result.error) or 'unknown error'}. You may retry with another query or answer now."
    items = result.items if max_items is None else result.items[:max_items]
    if not items:
        return NO_RESULTS
    return "\n\n".join(format_item(i, item) for i, item in enumerate(items, start=1))
