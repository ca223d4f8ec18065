"""The token strip: every token of one trajectory, coloured by role and advantage.

Data shape: a list of rows, one per token of the full sequence (prompt, then each assistant
turn and observation in order):

    {"id": int, "text": str, "role": "prompt" | "assistant" | "observation",
     "logprob": float | None, "advantage": float, "mask": 0 | 1}

`mask` is 1 exactly where the token was sampled by the policy (it is trained on), 0 where it
came from the prompt or the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

from helpers.widgets._html import advantage_colour, esc

_HERE = Path(__file__).parent
ROLES = ("prompt", "assistant", "observation")
ROLE_COLOURS = {"prompt": "rgba(150,150,150,0.25)", "observation": "rgba(42,127,143,0.22)"}


def normalise_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for position, row in enumerate(rows):
        role = str(row.get("role") or "prompt")
        if role not in ROLES:
            raise ValueError(f"token role must be one of {ROLES}, got {role!r} at position {position}")
        logprob = row.get("logprob")
        out.append(
            {
                "position": position,
                "id": int(row.get("id", row.get("token_id", -1))),
                "text": str(row.get("text") or ""),
                "role": role,
                "logprob": None if logprob is None else float(logprob),
                "advantage": float(row.get("advantage") or 0.0),
                "mask": int(row.get("mask", 1 if role == "assistant" else 0)),
            }
        )
    return out


def strip_summary(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Counts per role and the positions that carry an advantage (what the mask exercise asks)."""
    rows = normalise_rows(rows)
    counts = {role: sum(1 for row in rows if row["role"] == role) for role in ROLES}
    counts["tokens"] = len(rows)
    counts["trained"] = sum(row["mask"] for row in rows)
    counts["with_advantage"] = sum(1 for row in rows if row["advantage"] != 0.0)
    return counts


def token_strip_html(rows: list[dict[str, Any]]) -> str:
    spans = []
    for row in normalise_rows(rows):
        colour = advantage_colour(row["advantage"]) if row["role"] == "assistant" else ROLE_COLOURS[row["role"]]
        tip = f"id {row['id']} · {row['role']} · logprob {row['logprob']} · advantage {row['advantage']:+.2f} · mask {row['mask']}"
        spans.append(f'<span class="srt-tok srt-tok-{row["role"]}" style="background:{colour}" title="{esc(tip)}">{esc(row["text"])}</span>')
    return f'<div class="srt-strip"><div class="srt-strip-tokens">{"".join(spans)}</div></div>'


class TokenStrip(anywidget.AnyWidget):
    """Hover or click a token to see id, text, old logprob, advantage and mask; `active` is its position."""

    _esm = _HERE / "tokens.js"
    _css = _HERE / "widgets.css"
    rows = traitlets.List().tag(sync=True)
    active = traitlets.Int(-1).tag(sync=True)

    def __init__(self, rows: list[dict[str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows = normalise_rows(rows or [])

    def update(self, rows: list[dict[str, Any]]) -> None:
        self.active = -1
        self.rows = normalise_rows(rows)

    @property
    def summary(self) -> dict[str, int]:
        return strip_summary(self.rows)

    def to_html(self) -> str:
        return token_strip_html(self.rows)
