"""A rollout playground: budget sliders that re-run a small rollout and redraw its tree.

`run_fn(values) -> tree data` is supplied by the notebook (it calls rollout_batch); keeping it a
parameter lets the widget be tested without a model.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable

import ipywidgets as widgets

from helpers.widgets._html import esc
from helpers.widgets.budgets import budget_sliders, budgets
from helpers.widgets.tree import TrajectoryTree


class RolloutPlayground(widgets.VBox):
    def __init__(self, run_fn: Callable[[dict[str, Any]], dict[str, Any]], values: dict[str, Any] | None = None,
                 run_now: bool = True, **kwargs: Any) -> None:
        self.run_fn = run_fn
        self.values = dict(values or budgets())
        self.sliders = budget_sliders(self.values)
        self.status = widgets.HTML("")
        self.status.add_class("srt-playground-status")
        self.tree = TrajectoryTree()
        self.runs = 0
        self.error: str | None = None
        for slider in self.sliders.values():
            slider.observe(self._changed, names="value")
        super().__init__([widgets.VBox(list(self.sliders.values())), self.status, self.tree], **kwargs)
        self.add_class("srt-playground")
        if run_now:
            self.run()

    def _changed(self, change: dict[str, Any]) -> None:
        self.run()

    def current(self) -> dict[str, Any]:
        values = dict(self.values)
        values.update({name: slider.value for name, slider in self.sliders.items()})
        return values

    def run(self) -> dict[str, Any] | None:
        values = self.current()
        summary = ", ".join(f"{name}={values[name]}" for name in self.sliders)
        self.status.value = f"<i>running rollout ({esc(summary)})…</i>"
        started = time.perf_counter()
        try:
            data = self.run_fn(values)
        except Exception as error:  # shown in the widget: a slider drag must not kill the notebook
            self.error = "".join(traceback.format_exception_only(type(error), error)).strip()
            self.status.value = f'<span style="color:#b00">rollout failed: {esc(self.error)}</span>'
            return None
        self.error = None
        self.runs += 1
        self.tree.update(data)
        leaves = len(self.tree.data["leaves"])
        self.status.value = (
            f'<span data-runs="{self.runs}">run {self.runs}: {leaves} trajectories in '
            f"{time.perf_counter() - started:.1f} s ({esc(summary)})</span>"
        )
        return data
