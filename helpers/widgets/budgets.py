"""Budgets for the notebooks, per profile, and the sliders that move them.

COURSE_PROFILE=fast shrinks every number (the tests use it); nothing else changes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ipywidgets as widgets

from helpers import config
from helpers.rollout import RolloutConfig

FAST = {
    "questions": 1,
    "group_size": 2,
    "max_search_calls": 1,
    "max_assistant_turns": 3,
    "max_assistant_tokens": 48,
    "max_tool_response_tokens": 224,
    "max_trajectory_tokens": 1024,
    "temperature": 1.0,
    "search_topk": 3,
    "eval_questions": 1,
    "sweep_budgets": [0, 1, 2],  # notebook 12's budgets b (the recorded GPU sweep has 0-10)
    "sweep_questions": 1,
    "sweep_assistant_tokens": 48,
    "sft_questions": 2,
    "sft_epochs": 1,
    "grpo_questions": 1,
    "grpo_steps": 1,
}
FULL = {
    "questions": 2,
    "group_size": 4,
    "max_search_calls": 3,
    "max_assistant_turns": 4,
    "max_assistant_tokens": 192,
    "max_tool_response_tokens": 384,
    "max_trajectory_tokens": 3072,
    "temperature": 1.0,
    "search_topk": 3,
    "eval_questions": 8,  # four evaluations in notebook 10, each a batch decoded to its longest answer
    # a budget sweep is policies x budgets x questions rollouts, each policy's batch decoded until
    # its longest turn ends: sized to minutes on 2 CPU cores (a search call is about 31 tokens)
    "sweep_budgets": [0, 1, 3],
    "sweep_questions": 4,
    "sweep_assistant_tokens": 96,
    # notebook 09's run from scratch shows the mechanics in minutes on a CPU; its run that learns
    # starts from the recorded SFT adapter (helpers.learnable.CPU_RUN), the real run is the GPU's
    "sft_questions": 4,
    "sft_epochs": 1,
    "grpo_questions": 1,  # one question x group_size: the minutes go to the run that learns
    "grpo_steps": 1,
}

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
    name = name or config.profile()
    if name not in config.PROFILES:
        raise ValueError(f"profile must be one of {', '.join(config.PROFILES)}, got {name!r}")
    # the gpu profile's live widgets keep the full budgets; its training run is helpers.recipe's
    return dict(FAST if name == "fast" else FULL)


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
