"""Views of the gated reward and of the tool-efficiency curve: the penalty explorer, a table of every
term of R, and the budget curve of a sweep."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from helpers.efficiency.budget import BudgetPoint
from helpers.efficiency.rewards import (
    EfficiencyBreakdown,
    EfficiencyConfig,
    baseline_range,
    effective_calls,
    group_numbers,
    score_group,
)


def breakdown_html(rows: Sequence[EfficiencyBreakdown], labels: Sequence[str] | None = None) -> str:
    """A table of every term of R, with a bar for the advantage. All text is escaped."""
    labels = list(labels) if labels is not None else [f"τ{i}" for i in range(len(rows))]
    scale = max([abs(r.advantage) for r in rows] + [1e-9])
    head = ("trajectory", "r_base", "calls", "c~", "L", "L_ref", "pen_tool", "pen_len", "pen_eff", "R", "A")
    out = ['<table class="eff-table" style="border-collapse:collapse;font-family:monospace">',
           "<tr>" + "".join(f'<th style="padding:2px 8px;text-align:right">{html.escape(h)}</th>' for h in head)
           + '<th style="padding:2px 8px">advantage</th></tr>']
    for label, r in zip(labels, rows):
        cells = (label, r.r_base, r.calls, r.effective_calls, r.length, f"{r.reference_length:.0f}",
                 f"{r.pen_tool:.3f}", f"{r.pen_len:.3f}", f"{r.pen_eff:.3f}", f"{r.reward:+.3f}",
                 f"{r.advantage:+.3f}")
        width = int(60 * abs(r.advantage) / scale)
        colour = "#2a9d8f" if r.advantage >= 0 else "#e76f51"
        block = f'<div style="width:{width}px;background:{colour}">&nbsp;</div>'
        left, right = ("", block) if r.advantage >= 0 else (block, "")
        bar = ('<div style="display:flex;width:120px">'
               f'<div style="width:60px;display:flex;justify-content:flex-end">{left}</div>'
               f'<div style="width:60px">{right}</div></div>')
        out.append("<tr>" + "".join(f'<td style="padding:2px 8px;text-align:right">{html.escape(str(c))}</td>'
                                    for c in cells) + f"<td>{bar}</td></tr>")
    out.append("</table>")
    return "".join(out)


def penalty_explorer(
    group: Sequence[Any] | None = None,
    *,
    numbers: dict[str, Sequence[Any]] | None = None,
    labels: Sequence[str] | None = None,
    config: EfficiencyConfig = EfficiencyConfig(),
):
    """Sliders for lambda_tool, lambda_len, alpha_win, alpha_lose, beta_lose and the baseline seed,
    recomputing every penalty, reward and advantage of one group as they move.

    Give either a group of Trajectory objects or `numbers` (keys of `score_group`).
    """
    import ipywidgets as widgets

    if (group is None) == (numbers is None):
        raise ValueError("give exactly one of `group` (Trajectory objects) or `numbers`")
    if group is not None:
        numbers = group_numbers(group)
    style = {"description_width": "90px"}
    sliders = {
        name: widgets.FloatSlider(value=getattr(config, name), min=0.0, max=high, step=0.05,
                                  description=name, continuous_update=True, style=style,
                                  layout=widgets.Layout(width="360px"))
        for name, high in (("lambda_tool", 1.0), ("lambda_len", 1.0), ("alpha_win", 2.0),
                           ("alpha_lose", 2.0), ("beta_lose", 1.0))
    }
    sliders["seed"] = widgets.IntSlider(value=config.seed, min=0, max=20, description="baseline seed",
                                        style=style, layout=widgets.Layout(width="360px"))
    table = widgets.HTML()
    note = widgets.HTML()

    def recompute(_=None):
        cfg = EfficiencyConfig(**{k: s.value for k, s in sliders.items()},
                               preferred_threshold=config.preferred_threshold,
                               format_penalty=config.format_penalty)
        rows = score_group(config=cfg, **numbers)
        table.value = breakdown_html(rows, labels)
        baseline = rows[0].tool_baseline if rows else None
        bounds = baseline_range(effective_calls(numbers["calls"], numbers.get("failed")),
                                [bool(r) for r in numbers["r_base"]])
        note.value = (f"<b>b_g = {baseline}</b> drawn from {bounds}" if bounds
                      else "<b>no winner</b>: no baseline, every member pays beta_lose only")
        explorer.rows = rows

    explorer = widgets.VBox([widgets.HBox([widgets.VBox(list(sliders.values())[:3]),
                                           widgets.VBox(list(sliders.values())[3:])]), note, table])
    explorer.sliders = sliders
    for slider in sliders.values():
        slider.observe(recompute, names="value")
    recompute()
    return explorer


def budget_curve_widget(points: Sequence[BudgetPoint]):
    """Pick policies and a y-axis; the tool-efficiency curve redraws."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from helpers.analyse import policy_colour

    policies = list(dict.fromkeys(p.policy for p in points))
    pick = widgets.SelectMultiple(options=policies, value=tuple(policies), description="policies",
                                  rows=min(len(policies), 6) or 1)
    hint = widgets.HTML("<small>Ctrl-click (⌘-click on a Mac) to pick several policies</small>")
    metric = widgets.Dropdown(options=[("exact match", "accuracy"), ("search calls", "search_calls_mean"),
                                       ("tokens / question", "tokens_per_question"),
                                       ("valid format", "valid_format_rate")],
                              value="accuracy", description="y axis")
    out = widgets.Output()
    drawn: dict[str, Any] = {}

    def redraw(_=None):
        out.clear_output(wait=True)
        with out:
            fig, ax = plt.subplots(figsize=(6, 3.6))
            drawn["axes"] = ax
            for name in pick.value:
                mine = sorted((p for p in points if p.policy == name), key=lambda p: p.budget)
                # a policy keeps its colour whichever others are picked beside it
                ax.plot([p.budget for p in mine], [getattr(p, metric.value) for p in mine], "o-", label=name,
                        color=policy_colour(name))
            ax.set_xlabel("search budget b")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # budgets are whole searches
            ax.set_ylabel(metric.label)
            ax.grid(alpha=0.3)
            if pick.value:
                ax.legend()
            plt.show()

    pick.observe(redraw, names="value")
    metric.observe(redraw, names="value")
    redraw()
    box = widgets.VBox([widgets.HBox([widgets.VBox([pick, hint]), metric]), out])
    box.controls = {"policies": pick, "metric": metric}
    box.drawn = drawn  # the axes of the last drawing ("axes"), for tests
    return box
