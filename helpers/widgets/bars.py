"""Group advantages as bars (degenerate groups flagged) and micro-batch packing as blocks."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from helpers.widgets._html import advantage_colour, esc, plural, shorten


def normalise_groups(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for number, group in enumerate(groups):
        rewards = [float(value) for value in group.get("rewards") or []]
        advantages = [float(value) for value in group.get("advantages") or []]
        if len(rewards) != len(advantages):
            raise ValueError(f"group {number}: {len(rewards)} rewards but {len(advantages)} advantages")
        out.append(
            {
                "question": str(group.get("question") or f"question {number}"),
                "rewards": rewards,
                "advantages": advantages,
                "degenerate": all(value == 0.0 for value in advantages),
            }
        )
    return out


def advantage_bars_html(groups: list[dict[str, Any]], height: int = 60) -> str:
    """One panel per group: a bar per trajectory, up for A>0, down for A<0; degenerate groups greyed."""
    groups = normalise_groups(groups)
    scale = max([abs(a) for group in groups for a in group["advantages"]] + [1e-9])
    panels = []
    for group in groups:
        bars = []
        for index, (reward, advantage) in enumerate(zip(group["rewards"], group["advantages"])):
            size = int(round(height * abs(advantage) / scale)) if advantage else 1
            bar = f'<div title="τ{index}: reward {reward:+.2f}, advantage {advantage:+.2f}" style="height:{size}px;width:18px;background:{advantage_colour(advantage, scale)}"></div>'
            above = height - size if advantage > 0 else height
            below = height - size if advantage < 0 else height - (0 if advantage else 1)
            # the bar grows up from the zero line for A>0 and down from it for A<0
            column = f'<div style="height:{above}px"></div>{bar}<div style="height:{below}px;border-top:1px dotted #aaa"></div>'
            bars.append(
                f'<div style="display:inline-block;margin:0 2px;text-align:center;vertical-align:top">{column}'
                f'<div style="font-size:10px">r={reward:g}</div></div>'
            )
        flag = '<b style="color:#b35900">degenerate: every A = 0, no gradient</b>' if group["degenerate"] else ""
        panels.append(
            f'<div class="srt-group" style="display:inline-block;margin:4px 10px 4px 0;padding:4px;border:1px solid #ccc;border-radius:4px;'
            f'{"opacity:0.6;" if group["degenerate"] else ""}"><div style="font-size:11px;max-width:260px">{esc(shorten(group["question"], 60))}</div>'
            f'{"".join(bars)}<div>{flag}</div></div>'
        )
    count = sum(group["degenerate"] for group in groups)
    summary = f"<div><b>{count}</b> of {len(groups)} groups degenerate ({(count / len(groups) if groups else 0):.0%})</div>"
    return f'<div class="srt-bars">{summary}{"".join(panels)}</div>'


def normalise_micro_batches(micro_batches: list[list[Any]]) -> list[list[int]]:
    """Accept lengths, or items with a `length` (the trainer's TrainingDatum)."""
    return [[int(item if isinstance(item, (int, float)) else item.length) for item in batch] for batch in micro_batches]


def packing_stats(micro_batches: list[list[Any]]) -> dict[str, float]:
    batches = normalise_micro_batches(micro_batches)
    real = sum(sum(batch) for batch in batches)
    padded = sum(max(batch, default=0) * len(batch) for batch in batches)
    return {
        "micro_batches": len(batches),
        "samples": sum(len(batch) for batch in batches),
        "real_tokens": real,
        "padded_tokens": padded,
        "padding_fraction": (padded - real) / padded if padded else 0.0,
    }


def micro_batch_html(micro_batches: list[list[Any]], width: int = 420) -> str:
    """Each micro-batch is a block of rows padded to its longest row; hatched = padding."""
    batches = normalise_micro_batches(micro_batches)
    total = sum(len(batch) for batch in batches)
    longest = max([length for batch in batches for length in batch] + [1])
    blocks = []
    for number, batch in enumerate(batches):
        pad_to = max(batch, default=0)
        rows = []
        for length in batch:
            real = int(width * length / longest)
            pad = int(width * (pad_to - length) / longest)
            rows.append(
                f'<div style="display:flex;height:9px;margin:1px 0" title="{length} tokens + {pad_to - length} padding">'
                f'<div style="width:{real}px;background:#4a6fa5"></div>'
                f'<div style="width:{pad}px;background:repeating-linear-gradient(45deg,#ddd,#ddd 3px,#f6f6f6 3px,#f6f6f6 6px)"></div></div>'
            )
        weight = f"{len(batch)}/{total}" if total else "0"
        blocks.append(
            f'<div class="srt-micro" style="margin:4px 0;padding:3px;border:1px solid #bbb;border-radius:4px;display:inline-block">'
            f'<div style="font-size:11px">micro-batch {number}: {plural(len(batch), "sample", "samples")}, padded to {pad_to}, weight n/N = {weight}</div>{"".join(rows)}</div>'
        )
    stats = packing_stats(batches)
    summary = (
        f"<div>{plural(stats['micro_batches'], 'micro-batch', 'micro-batches')} · {stats['real_tokens']} real tokens · "
        f"{stats['padded_tokens']} after padding · {stats['padding_fraction']:.0%} padding</div>"
    )
    return f'<div class="srt-microbatches">{summary}{"<br>".join(blocks)}</div>'


class AdvantageBars(widgets.HTML):
    def __init__(self, groups: list[dict[str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.update(groups or [])

    def update(self, groups: list[dict[str, Any]]) -> None:
        self.groups = normalise_groups(groups)
        self.value = advantage_bars_html(self.groups)


class MicroBatchBlocks(widgets.HTML):
    def __init__(self, micro_batches: list[list[Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.update(micro_batches or [])

    def update(self, micro_batches: list[list[Any]]) -> None:
        self.micro_batches = normalise_micro_batches(micro_batches)
        self.stats = packing_stats(self.micro_batches)
        self.value = micro_batch_html(self.micro_batches)
