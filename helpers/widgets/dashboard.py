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
# Timings measured *inside* another stage: drawn as parts of it, never added next to it.
NESTED_STAGES = {"rollout": ("sampling", "search")}
# Not a stage: searches run concurrently, so their summed latency exceeds the wall time they took.
NOT_STAGES = ("step", "search_latency_sum")
# Distinct colours (Okabe-Ito, colour-blind safe), one per segment of the bar.
STAGE_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")


def pick(metrics: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _tick(value: float) -> str:
    """A short axis label: 0.875, 1.49, 1.8e-4."""
    if value and (abs(value) < 1e-2 or abs(value) >= 1e4):
        return f"{value:.1e}".replace("e-0", "e-").replace("e+0", "e")
    return f"{value:.3g}"


def sparkline(values: list[float | None], steps: list[Any] | None = None, width: int = 170, height: int = 58) -> str:
    """A line chart with its axes: the y range (low and high value) on the left, the first and
    last step under the line."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if not points:
        return f'<svg width="{width}" height="{height}"></svg>'
    steps = steps if steps is not None and len(steps) == len(values) else list(range(len(values)))
    left, right, top, bottom = 40, 6, 6, 14  # room for the tick labels
    low = min(v for _, v in points)
    high = max(v for _, v in points)
    span = (high - low) or 1.0
    n = max(len(values) - 1, 1)

    def x(i: int) -> float:
        return left + (width - left - right) * i / n

    def y(v: float) -> float:
        return height - bottom - (height - top - bottom) * (v - low) / span

    coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in points)
    last_i, last_v = points[-1]
    axis = 'stroke="#999" stroke-width="1"'
    label = 'font-size="9" fill="#555" font-family="sans-serif"'
    return (
        f'<svg width="{width}" height="{height}">'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" {axis}/>'
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" {axis}/>'
        f'<text x="{left - 3}" y="{y(high) + 3:.1f}" text-anchor="end" {label}>{esc(_tick(high))}</text>'
        + (f'<text x="{left - 3}" y="{y(low) + 3:.1f}" text-anchor="end" {label}>{esc(_tick(low))}</text>' if high != low else "")
        + f'<text x="{left}" y="{height - 2}" text-anchor="start" {label}>{esc(steps[0])}</text>'
        f'<text x="{width - right}" y="{height - 2}" text-anchor="end" {label}>step {esc(steps[-1])}</text>'
        f'<polyline fill="none" stroke="#0072B2" stroke-width="2" points="{coords}"/>'
        f'<circle cx="{x(last_i):.1f}" cy="{y(last_v):.1f}" r="3" fill="#E69F00"/></svg>'
    )


def _seconds(metrics: dict[str, Any], name: str) -> float | None:
    value = pick(metrics, (TIME_PREFIX + name,))
    return None if value is None else max(value, 0.0)


def stage_times(metrics: dict[str, Any]) -> dict[str, float]:
    """Where one step's wall time went, as parts that add up to the step.

    Top-level stages are the `time_*` keys; a stage with timings measured inside it (the rollout's
    sampling and search) is replaced by those parts plus its remainder ("rollout: other"), and
    whatever no stage measured is "other", so the parts partition `time_step`.
    """
    nested = {child for children in NESTED_STAGES.values() for child in children}
    top = [key[len(TIME_PREFIX):] for key in metrics if key.startswith(TIME_PREFIX)]
    top = [name for name in top if name not in NOT_STAGES and name not in nested and _seconds(metrics, name) is not None]
    parts: dict[str, float] = {}
    for name in top:
        seconds = _seconds(metrics, name)
        children = {child: _seconds(metrics, child) for child in NESTED_STAGES.get(name, ())}
        children = {child: value for child, value in children.items() if value is not None}
        if children:
            inside = sum(children.values())
            scale = min(1.0, seconds / inside) if inside else 1.0  # never let parts exceed their stage
            parts.update({f"{name}: {child}": value * scale for child, value in children.items()})
            parts[f"{name}: other"] = max(seconds - inside * scale, 0.0)
        else:
            parts[name] = seconds
    step = _seconds(metrics, "step")
    if step is not None and step > sum(parts.values()):
        parts["other"] = step - sum(parts.values())
    return {name: value for name, value in parts.items() if value > 0}


def dashboard_html(history: list[dict[str, Any]], title: str = "training") -> str:
    if not history:
        return f"<div><b>{esc(title)}</b>: waiting for the first step…</div>"
    cards = []
    steps = [step.get("step", i) for i, step in enumerate(history)]
    for label, keys in PANELS:
        values = [pick(step, keys) for step in history]
        if all(value is None for value in values):
            continue
        latest = next((v for v in reversed(values) if v is not None), None)
        cards.append(
            f'<div class="srt-card" style="display:inline-block;margin:4px;padding:4px 6px;border:1px solid #ccc;border-radius:4px">'
            f'<div style="font-size:11px;color:#555">{esc(label)}</div><div style="font-weight:bold">{latest:.3g}</div>{sparkline(values, steps)}</div>'
        )
    times = stage_times(history[-1])
    total = sum(times.values()) or 1.0
    colours = {name: STAGE_COLOURS[i % len(STAGE_COLOURS)] for i, name in enumerate(times)}
    segments = "".join(
        f'<div title="{esc(name)}: {seconds:.2f} s" style="width:{100 * seconds / total:.2f}%;background:{colours[name]}"></div>'
        for name, seconds in times.items()
    )
    legend = " · ".join(
        f'<span style="color:{colours[name]}">■</span> {esc(name)} {seconds:.2f} s ({seconds / total:.0%})'
        for name, seconds in times.items()
    )
    stages = (f'<div style="margin:4px">where the last step\'s {total:.2f} s went:'
              f'<div class="srt-stage-bar" style="display:flex;height:12px;width:420px">{segments}</div>'
              f'<div style="font-size:11px">{legend}</div></div>') if times else ""
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
