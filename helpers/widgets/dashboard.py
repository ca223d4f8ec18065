"""The live training dashboard: pass `dashboard.on_step` as train()'s on_step callback.

Each call appends one step's metrics dict and redraws small line charts (inline SVG built from
numbers only) plus a stacked bar of where the step's time went.
"""

from __future__ import annotations

import math
from typing import Any

import ipywidgets as widgets

from helpers.widgets._html import esc

# Each panel shows the first key present in the metrics (names differ between runs and engines).
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward_mean", "reward")),
    ("exact match", ("exact_match", "em", "exact_match_rate")),
    ("format rate", ("valid_format_rate", "format_rate", "valid_format")),
    ("search calls", ("search_calls_mean", "search_calls")),
    ("KL sampler‖trainer", ("kl_sampler_trainer_k3", "kl_sampler_trainer_k1", "kl")),
    ("degenerate groups", ("degenerate_group_share", "degenerate_groups")),
    ("loss", ("loss", "train_loss", "sft_loss")),
)
TIME_PREFIX = "time_"
STAGE_COLOURS = ("#4a6fa5", "#2a7f8f", "#e5a100", "#9b59b6", "#888")


def pick(metrics: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def sparkline(values: list[float | None], width: int = 150, height: int = 40) -> str:
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if not points:
        return f'<svg width="{width}" height="{height}"></svg>'
    low = min(v for _, v in points)
    high = max(v for _, v in points)
    span = (high - low) or 1.0
    steps = max(len(values) - 1, 1)
    coords = " ".join(
        f"{4 + (width - 8) * i / steps:.1f},{height - 4 - (height - 8) * (v - low) / span:.1f}" for i, v in points
    )
    last_x, last_y = coords.split(" ")[-1].split(",")
    return (
        f'<svg width="{width}" height="{height}"><polyline fill="none" stroke="#4a6fa5" stroke-width="2" points="{coords}"/>'
        f'<circle cx="{last_x}" cy="{last_y}" r="3" fill="#e5a100"/></svg>'
    )


def stage_times(metrics: dict[str, Any]) -> dict[str, float]:
    """Stage timings of one step: every numeric `time_*` key except the step total."""
    return {
        key[len(TIME_PREFIX):]: float(value)
        for key, value in metrics.items()
        if key.startswith(TIME_PREFIX) and key != "time_step" and isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def dashboard_html(history: list[dict[str, Any]], title: str = "training") -> str:
    if not history:
        return f"<div><b>{esc(title)}</b>: waiting for the first step…</div>"
    cards = []
    for label, keys in PANELS:
        values = [pick(step, keys) for step in history]
        if all(value is None for value in values):
            continue
        latest = next((v for v in reversed(values) if v is not None), None)
        cards.append(
            f'<div class="srt-card" style="display:inline-block;margin:4px;padding:4px 6px;border:1px solid #ccc;border-radius:4px">'
            f'<div style="font-size:11px;color:#555">{esc(label)}</div><div style="font-weight:bold">{latest:.3g}</div>{sparkline(values)}</div>'
        )
    times = stage_times(history[-1])
    total = sum(times.values()) or 1.0
    segments = "".join(
        f'<div title="{esc(name)}: {seconds:.2f} s" style="width:{300 * seconds / total:.0f}px;background:{STAGE_COLOURS[i % len(STAGE_COLOURS)]}"></div>'
        for i, (name, seconds) in enumerate(times.items())
    )
    legend = " · ".join(
        f'<span style="color:{STAGE_COLOURS[i % len(STAGE_COLOURS)]}">■</span> {esc(name)} {seconds:.2f} s' for i, (name, seconds) in enumerate(times.items())
    )
    stages = f'<div style="margin:4px">stage times (last step): <div style="display:flex;height:12px">{segments}</div><div style="font-size:11px">{legend}</div></div>' if times else ""
    step = history[-1].get("step", len(history) - 1)
    return f'<div class="srt-dashboard"><b>{esc(title)}</b> · step {esc(step)} · {len(history)} steps logged<div>{"".join(cards)}</div>{stages}</div>'


class TrainingDashboard(widgets.VBox):
    """`dashboard.on_step(metrics)` records a step and redraws; `history` keeps every dict."""

    def __init__(self, title: str = "training", **kwargs: Any) -> None:
        self.title = title
        self.history: list[dict[str, Any]] = []
        self.view = widgets.HTML(dashboard_html([], title))
        super().__init__([self.view], **kwargs)

    def on_step(self, metrics: dict[str, Any]) -> None:
        self.history.append(dict(metrics))
        self.view.value = dashboard_html(self.history, self.title)

    def series(self, label_or_key: str) -> list[float | None]:
        keys = dict(PANELS).get(label_or_key, (label_or_key,))
        return [pick(step, keys) for step in self.history]
