"""Small helpers for the HTML-string views: everything goes through `esc`."""

from __future__ import annotations

import html
import math


def esc(value: object) -> str:
    """Escape any value for use in HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt(value: object, digits: int = 2) -> str:
    """A number with a sign for advantages; '—' for missing values."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            return "—"
        return f"{value:+.{digits}f}" if isinstance(value, float) else str(value)
    return esc(value)


def plural(count: int, one: str, many: str) -> str:
    """'1 micro-batch', '3 micro-batches'."""
    return f"{count} {one if count == 1 else many}"


def shorten(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def advantage_colour(advantage: float, scale: float = 1.0) -> str:
    """Green for positive, red for negative, grey for zero; stronger with |A|."""
    if not advantage:
        return "rgba(150,150,150,0.35)"
    alpha = 0.25 + 0.6 * min(1.0, abs(advantage) / (scale or 1.0))
    return f"rgba(46,160,67,{alpha:.2f})" if advantage > 0 else f"rgba(218,54,51,{alpha:.2f})"
