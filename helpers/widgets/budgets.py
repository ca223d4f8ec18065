"""The budgets of the current profile (`helpers.presets.PROFILES`) and the sliders that move them."""

from __future__ import annotations

import dataclasses
from typing import Any

import ipywidgets as widgets

from helpers import config
from helpers.presets import profile_budgets
from helpers.rollout import RolloutConfig

# (minimum, maximum, step) of the sliders in notebook 05 and the playground. search_topk is the
# search client's number of passages per query, not a RolloutConfig field.
SLIDERS = {
    "max_search_calls": (0, 4, 1),
    "max_assistant_turns": (1, 8, 1),
    "max_assistant_tokens": (16, 512, 16),
    "max_tool_response_tokens": (16, 1024, 16),
    "max_trajectory_tokens": (256, 8192, 256),
    "group_size": (1, 8, 1),
    "temperature": (0.0, 1.5, 0.1),
    "search_topk": (1, 10, 1),
}

# Wide enough for the longest budget name ("max_tool_response_tokens") at JupyterLab's font size.
SLIDER_STYLE = {"description_width": "210px"}


def slider_layout(width: str = "520px") -> widgets.Layout:
    """At most `width` wide, narrower where the output area is (JupyterLab with its sidebar open):
    a fixed width wider than the area clips the readout and scrolls the row sideways."""
    return widgets.Layout(width="100%", max_width=width)


def budgets(name: str | None = None) -> dict[str, Any]:
    """A fresh copy of the budgets of the current profile (or of `name`)."""
    return profile_budgets(name or config.profile())


def rollout_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """The RolloutConfig fields among a budgets dict (the other keys size the notebooks' runs)."""
    names = {f.name for f in dataclasses.fields(RolloutConfig)}
    return {key: value for key, value in values.items() if key in names}


def budget_sliders(values: dict[str, Any] | None = None, specs: dict[str, tuple] = SLIDERS,
                   style: dict[str, str] = SLIDER_STYLE, width: str = "520px") -> dict[str, widgets.Widget]:
    """One slider per budget (or per `specs` entry: name -> (minimum, maximum, step));
    continuous_update=False so a drag re-runs once, on release."""
    values = values or budgets()
    out: dict[str, widgets.Widget] = {}
    for name, (low, high, step) in specs.items():
        value = values.get(name, low)
        cls = widgets.FloatSlider if isinstance(step, float) else widgets.IntSlider
        out[name] = cls(
            value=value, min=low, max=high, step=step, description=name,
            continuous_update=False, style=style, layout=slider_layout(width),
        )
        out[name].add_class(f"srt-slider-{name}")
    return out
