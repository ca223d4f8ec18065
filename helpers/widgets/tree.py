"""The rollout tree of one GRPO group: a shared root (the question) and one branch per trajectory.

Data shape (plain dicts, see `helpers.widgets.adapters.tree_data`):

    {"question": str, "answers": [str, ...],
     "row_prefix": "τ",      (optional; "q" where each row is a question of its own)
     "advantages": True,     (optional; False where each row is its own group of one: no advantage)
     "leaves": [{"index": int, "reward": float, "advantage": float,
                 "exact_match": bool, "valid_format": bool,
                 "source": "sampled" | "teacher-forced",  (optional; given turns are labelled)
                 "question": str, "answers": [str, ...],  (optional; a row's own question and gold)
                 "turns": [{"kind": "tool" | "answer" | "invalid", "text": str,
                            "query": str | None, "tokens": int,
                            "observation": str | None, "observation_tokens": int | None,
                            "cut": bool, "error": str | None}, ...]}, ...]}

An invalid turn carries the parser's error (why it is not a call or an answer); the views show it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

from helpers.widgets._html import advantage_colour, esc, fmt, shorten

_HERE = Path(__file__).parent

TURN_KINDS = ("tool", "answer", "invalid")
# Where a branch's assistant turns come from: sampled from the policy, or given (teacher-forced).
LEAF_SOURCES = ("sampled", "teacher-forced")


def normalise_tree(data: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults and coerce types so the view can trust every field (strings stay raw)."""
    if not isinstance(data, dict) or "leaves" not in data:
        raise ValueError("tree data must be a dict with 'question' and 'leaves'; build it with helpers.widgets.tree_data(group)")
    leaves = []
    for position, leaf in enumerate(data.get("leaves") or []):
        turns = []
        for turn in leaf.get("turns") or []:
            kind = str(turn.get("kind") or "answer")
            if kind not in TURN_KINDS:
                raise ValueError(f"turn kind must be one of {TURN_KINDS}, got {kind!r}")
            observation = turn.get("observation")
            turns.append(
                {
                    "kind": kind,
                    "text": str(turn.get("text") or ""),
                    "query": None if turn.get("query") is None else str(turn["query"]),
                    "tokens": int(turn.get("tokens") or 0),
                    "observation": None if observation is None else str(observation),
                    "observation_tokens": None if turn.get("observation_tokens") is None else int(turn["observation_tokens"]),
                    "cut": bool(turn.get("cut", False)),
                    "error": None if turn.get("error") is None else str(turn["error"]),
                }
            )
        source = str(leaf.get("source") or "sampled")
        if source not in LEAF_SOURCES:
            raise ValueError(f"leaf source must be one of {LEAF_SOURCES}, got {source!r}")
        leaves.append(
            {
                "index": int(leaf.get("index", position)),
                "source": source,
                "reward": float(leaf.get("reward", 0.0)),
                "advantage": float(leaf.get("advantage", 0.0)),
                "exact_match": bool(leaf.get("exact_match", False)),
                "valid_format": bool(leaf.get("valid_format", False)),
                "end_reason": str(leaf.get("end_reason") or ""),
                "question": str(leaf.get("question") or ""),
                "answers": [str(answer) for answer in leaf.get("answers") or []],
                "turns": turns,
            }
        )
    for leaf in leaves:
        leaf["gold"] = _gold_text(leaf["answers"]) if leaf["question"] else ""
    answers = [str(answer) for answer in data.get("answers") or []]
    return {
        "question": str(data.get("question") or ""),
        "answers": answers,
        "gold": _gold_text(answers, leaves),  # the line the views show under the question
        "row_prefix": str(data.get("row_prefix") or "τ"),
        "advantages": bool(data.get("advantages", True)),
        "leaves": leaves,
    }


def _gold_text(answers: list[str], leaves: list[dict[str, Any]] | None = None) -> str:
    """The root's (or a row's) reference answers; rows with their own questions carry their own."""
    if answers:
        return "gold: " + " | ".join(answers)
    if leaves and all(leaf["question"] for leaf in leaves):
        return "each row is its own question, with its own gold answer"
    return "no reference answer"


def turn_label(turn: dict[str, Any]) -> str:
    """One line per turn, the same words the JS view shows."""
    if turn["kind"] == "tool":
        size = turn.get("observation_tokens")
        size_text = "no observation" if size is None else f"observation {size} tok"
        return f"search: {turn.get('query') or ''} → {size_text}{' (cut)' if turn.get('cut') else ''}"
    if turn["kind"] == "invalid":
        why = f" ({turn['error']})" if turn.get("error") else ""
        return f"invalid{why}: {shorten(turn['text'], 60)}"
    return f"answer: {shorten(turn['text'], 60)}"


def tree_html(data: dict[str, Any], selected: int | None = None) -> str:
    """A static HTML rendering (for exported notebooks and tests); every string is escaped."""
    tree = normalise_tree(data)
    rows = []
    for leaf in tree["leaves"]:
        chips = "".join(
            f'<span class="srt-turn srt-{esc(turn["kind"])}" title="{esc(turn["text"])}">{esc(turn_label(turn))}</span>'
            for turn in leaf["turns"]
        )
        forced = leaf["source"] == "teacher-forced"
        badge = ' <span class="srt-forced-badge">teacher-forced</span>' if forced else ""
        own = (f' <span class="srt-leaf-question">{esc(shorten(leaf["question"], 60))}</span>' if leaf["question"] else "")
        own += f' <i class="srt-leaf-gold">{esc(leaf["gold"])}</i>' if leaf["gold"] else ""
        score = f'reward {leaf["reward"]:+.2f}' + (f' · A {fmt(leaf["advantage"])}' if tree["advantages"] else "")
        rows.append(
            f'<div class="srt-leaf{" srt-forced" if forced else ""}" data-index="{leaf["index"]}" '
            f'data-source="{esc(leaf["source"])}" style="border-left:4px solid {advantage_colour(leaf["advantage"])}">'
            f'<b>{esc(tree["row_prefix"])}{leaf["index"]}</b>{badge}{own} {chips} <span class="srt-score">{score}</span></div>'
        )
    details = ""
    if selected is not None:
        chosen = [leaf for leaf in tree["leaves"] if leaf["index"] == selected]
        for leaf in chosen:
            parts = []
            for number, turn in enumerate(leaf["turns"], start=1):
                why = f", {esc(turn['error'])}" if turn["error"] else ""
                parts.append(f"<h5>turn {number} ({esc(turn['kind'])}{why}, {turn['tokens']} tokens)</h5><pre>{esc(turn['text'])}</pre>")
                if turn["observation"] is not None:
                    parts.append(f"<h6>observation{' (cut)' if turn['cut'] else ''}</h6><pre>{esc(turn['observation'])}</pre>")
            ended = f"<p>ended by: {esc(leaf['end_reason'])}</p>" if leaf["end_reason"] else ""
            details = f'<div class="srt-details">{ended}{"".join(parts)}</div>'
    gold = tree["gold"]
    return (
        f'<div class="srt-tree"><div class="srt-root"><b>question</b> {esc(tree["question"])}'
        f' <i>{esc(gold)}</i></div>{"".join(rows)}{details}</div>'
    )


class TrajectoryTree(anywidget.AnyWidget):
    """Click a leaf to open its turns; `selected` is the clicked trajectory's index (-1: none)."""

    _esm = _HERE / "tree.js"
    _css = _HERE / "widgets.css"
    data = traitlets.Dict().tag(sync=True)
    selected = traitlets.Int(-1).tag(sync=True)

    def __init__(self, data: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.update(data or {"question": "", "answers": [], "leaves": []})

    def update(self, data: dict[str, Any]) -> None:
        self.data = normalise_tree(data)
        if self.selected not in {leaf["index"] for leaf in self.data["leaves"]}:
            self.selected = -1

    def to_html(self) -> str:
        return tree_html(self.data, None if self.selected < 0 else self.selected)
