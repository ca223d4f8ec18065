"""A rollout playground: pick a policy and a question, move any budget, and the rollout runs
again; its tree is redrawn and a table says, branch by branch, what changed against the last run.

`run_fn(values) -> tree data` is supplied by the notebook (`helpers.widgets.live.live_run_fn`
calls rollout_batch); keeping it a parameter lets the widget be tested without a model. `values`
holds every slider's value, plus "policy" and "question" when those pickers are shown; the tree
data it returns may carry a "note" (shown above the change table). A run_fn
that takes a second argument gets a `RunControl`: `control.progress(text)` updates the status
line, and `control.check()` raises `Superseded` once a newer change is waiting, so a run in flight
can stop at its next step.

Runs happen in a worker thread (`background=True`), so the kernel stays free for the next slider
event: the latest change wins, and changes made while a run is in flight never pile up (only the
most recent one runs next). A run that was overtaken is not drawn.
"""

from __future__ import annotations

import inspect
import threading
import time
import traceback
from typing import Any, Callable, Sequence

import ipywidgets as widgets

from helpers.widgets._html import esc, shorten
from helpers.widgets.budgets import budget_sliders, budgets
from helpers.widgets.changes import SUMMARY_FIELDS, changes_html, compare_runs, setting_changes
from helpers.widgets.tree import TrajectoryTree


SLIDER_BASIS = "400px"  # a slider's width before the row is shared out: label, track and readout fit


class Superseded(Exception):
    """A newer slider change is waiting: the run in flight stops and its result is dropped."""


class RunControl:
    """Handed to a run_fn that takes two arguments: progress reports and the latest-wins check."""

    def __init__(self, owner: "RolloutPlayground", generation: int, label: str) -> None:
        self._owner, self.generation, self.label = owner, generation, label
        self.started = time.perf_counter()

    @property
    def superseded(self) -> bool:
        return self._owner._generation != self.generation

    def check(self) -> None:
        if self.superseded:
            raise Superseded(f"run {self.generation} overtaken by a newer change")

    def progress(self, text: str) -> None:
        if not self.superseded:
            elapsed = time.perf_counter() - self.started
            self._owner.status.value = (f'<i data-state="running">running ({esc(self.label)}): {esc(text)} · '
                                        f"{elapsed:.0f} s</i>")


def _takes_control(run_fn: Callable) -> bool:
    try:
        parameters = [p for p in inspect.signature(run_fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return False
    return len(parameters) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def _question_text(question: Any) -> str:
    return str(getattr(question, "question", question) or "")


class RolloutPlayground(widgets.VBox):
    """Sliders for every budget, optional policy and question pickers, the change table and the tree.

    policies: (label, value) pairs for the policy picker (value goes to values["policy"]).
    questions: examples (anything with .question/.answers, or objects with .example, .why and
        optionally .policy: picking it picks that policy too) offered first in the question box;
        typing another question runs it with no reference.
    sliders: name -> (minimum, maximum, step) for settings that are not budgets (e.g. notebook 12's
        stated budget b), shown instead of the budget sliders.
    """

    def __init__(self, run_fn: Callable[..., dict[str, Any]], values: dict[str, Any] | None = None,
                 run_now: bool = True, *, policies: Sequence[tuple[str, Any]] | None = None, policy: Any = None,
                 questions: Sequence[Any] | None = None, background: bool = True, run_label: str = "run again",
                 sliders: dict[str, tuple[int, int, int]] | None = None, row_prefix: str = "τ",
                 **kwargs: Any) -> None:
        self.run_fn = run_fn
        self._with_control = _takes_control(run_fn)
        self.values = dict(values or budgets())
        self.background = background
        self.row_prefix = row_prefix
        self.sliders = (budget_sliders(self.values) if sliders is None else
                        budget_sliders(self.values, sliders, {"description_width": "170px"}, "460px"))
        self.pickers: dict[str, widgets.Widget] = {}
        rows: list[widgets.Widget] = []
        if policies:
            options = list(policies)
            chosen = policy if policy in [value for _, value in options] else options[0][1]
            self.pickers["policy"] = widgets.Dropdown(options=options, value=chosen, description="policy",
                                                      style={"description_width": "70px"},
                                                      layout=widgets.Layout(width="100%", max_width="520px"))
            self.pickers["policy"].add_class("srt-picker-policy")
        self._suggested: dict[str, Any] = {}
        self._why: dict[str, str] = {}
        self._policy_of: dict[str, Any] = {}  # a prompt that needs a certain policy names it (`.policy`)
        if questions:
            for item in questions:
                example = getattr(item, "example", item)
                self._suggested[_question_text(example)] = example
                self._why[_question_text(example)] = str(getattr(item, "why", "") or "")
                if getattr(item, "policy", None) is not None:
                    self._policy_of[_question_text(example)] = item.policy
            box = widgets.Combobox(options=list(self._suggested), value=next(iter(self._suggested)),
                                   ensure_option=False, continuous_update=False, description="question",
                                   placeholder="pick a question or type your own, then press Enter",
                                   style={"description_width": "70px"}, layout=widgets.Layout(width="100%", max_width="820px"))
            box.add_class("srt-picker-question")
            self.pickers["question"] = box
        self.why = widgets.HTML("")
        self.why.add_class("srt-playground-why")
        self.button = widgets.Button(description=run_label, button_style="primary")
        self.button.on_click(lambda _: self.request())
        if self.pickers:
            rows.append(widgets.Box(list(self.pickers.values()), layout=widgets.Layout(
                display="flex", flex_flow="row wrap", width="100%")))
            rows.append(self.why)
        # The sliders wrap: two to a row where the output area is wide, one where it is not (a
        # notebook beside JupyterLab's file browser); none is ever wider than the area.
        for slider in self.sliders.values():
            slider.layout.flex = f"1 1 {SLIDER_BASIS}"
            slider.layout.margin = "2px 24px 2px 0"  # a gap between the two of a row
        self.slider_box = widgets.Box(list(self.sliders.values()), layout=widgets.Layout(
            display="flex", flex_flow="row wrap", width="100%"))
        self.slider_box.add_class("srt-playground-sliders")
        rows.append(self.slider_box)
        self.status = widgets.HTML("")
        self.status.add_class("srt-playground-status")
        self.note = widgets.HTML("")  # what the run function says about its result (e.g. a teacher-forced branch)
        self.note.add_class("srt-playground-note")
        self.changes = widgets.HTML("")
        self.changes.add_class("srt-playground-changes")
        self.tree = TrajectoryTree()
        self.runs = 0
        self.error: str | None = None
        self.last_values: dict[str, Any] | None = None
        self.last_data: dict[str, Any] | None = None
        self._generation = 0
        self._wanted: dict[str, Any] | None = None
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._follow_question()
        for control in [*self.sliders.values(), *self.pickers.values()]:
            control.observe(self._changed, names="value")
        self._show_why()
        super().__init__([*rows, widgets.HBox([self.button, self.status]), self.note, self.changes, self.tree], **kwargs)
        self.add_class("srt-playground")
        if run_now:
            self.run()

    # -- what the learner set ---------------------------------------------------------------
    def question(self) -> Any:
        """The picked example, or a reference-free example for a typed question."""
        from helpers.data import SearchExample

        text = " ".join(str(self.pickers["question"].value).split())
        if text in self._suggested:
            return self._suggested[text]
        return SearchExample("typed", text, [], "typed")

    def current(self) -> dict[str, Any]:
        values = dict(self.values)
        values.update({name: slider.value for name, slider in self.sliders.items()})
        if "policy" in self.pickers:
            values["policy"] = self.pickers["policy"].value
        if "question" in self.pickers:
            values["question"] = self.question()
        return values

    def _follow_question(self) -> None:
        """Pick the policy the chosen prompt names (e.g. the one that searches again), if offered."""
        if "question" not in self.pickers or "policy" not in self.pickers:
            return
        wanted = self._policy_of.get(_question_text(self.question()))
        picker = self.pickers["policy"]
        if wanted is not None and wanted != picker.value and wanted in [value for _, value in picker.options]:
            picker.value = wanted

    def _show_why(self) -> None:
        if "question" not in self.pickers:
            return
        example = self.question()
        why = self._why.get(_question_text(example), "")
        gold = ", ".join(getattr(example, "answers", []) or [])
        parts = [f"<b>why this question:</b> {esc(why)}" if why else "",
                 f"<b>gold:</b> {esc(gold)}" if gold else "<i>your question: no reference answer, so the "
                 "reward only checks the format</i>"]
        self.why.value = " · ".join(p for p in parts if p)

    def _label(self, values: dict[str, Any]) -> str:
        shown = [f"{name}={values[name]}" for name in self.sliders]
        if "policy" in values:
            shown.insert(0, f"policy={values['policy']}")
        return ", ".join(shown)

    def _comparable(self, values: dict[str, Any]) -> dict[str, Any]:
        out = {name: values.get(name) for name in self.sliders}
        if "policy" in values:
            out["policy"] = values["policy"]
        if "question" in values:
            out["question"] = shorten(_question_text(values["question"]), 50)
        return out

    # -- running ------------------------------------------------------------------------------
    def _changed(self, change: dict[str, Any]) -> None:
        if change.get("owner") is self.pickers.get("question"):
            self._show_why()
            self._follow_question()  # its own change requests a run too; the latest settings win
        if self.background:
            self.request()
        else:
            self.run()

    def request(self) -> None:
        """Run the current settings in the worker; a run in flight is overtaken (latest wins)."""
        if not self.background:
            self.run()
            return
        with self._lock:
            self._wanted = self.current()
            self._generation += 1
            if self._worker is not None and self._worker.is_alive():
                self.status.value = '<i data-state="waiting">newer settings: the run in flight stops at its next step</i>'
                return
            self._worker = threading.Thread(target=self._work, daemon=True, name="rollout-playground")
            self._worker.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                values, generation = self._wanted, self._generation
                self._wanted = None
                if values is None:
                    self._worker = None
                    return
            self._execute(values, generation)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no run is in flight or waiting (for tests and scripts); False on timeout."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def run(self) -> dict[str, Any] | None:
        """Run the current settings now, in this thread."""
        with self._lock:
            self._generation += 1
            generation = self._generation
        return self._execute(self.current(), generation)

    def _execute(self, values: dict[str, Any], generation: int) -> dict[str, Any] | None:
        label = self._label(values)
        control = RunControl(self, generation, label)
        self.status.value = f'<i data-state="running">running rollout ({esc(label)})…</i>'
        started = time.perf_counter()
        try:
            data = self.run_fn(values, control) if self._with_control else self.run_fn(values)
        except Superseded:
            return None
        except Exception as error:  # shown in the widget: a slider drag must not kill the notebook
            if control.superseded:
                return None
            self.error = "".join(traceback.format_exception_only(type(error), error)).strip()
            self.status.value = f'<span data-state="failed" style="color:#b00">rollout failed: {esc(self.error)}</span>'
            return None
        if control.superseded:  # a newer change is waiting: drawing this one would only flicker
            return None
        self.error = None
        self.runs += 1
        comparable = self._comparable(values)
        # Branches are compared only on the same question: after a switch this run is the new baseline.
        switched = (self.last_values is not None and "question" in comparable
                    and self.last_values.get("question") != comparable["question"])
        baseline = None if switched else self.last_data
        moved = {} if switched else setting_changes(self.last_values, comparable)
        fields = SUMMARY_FIELDS if data.get("advantages", True) else tuple(f for f in SUMMARY_FIELDS if f != "advantage")
        prefix = str(data.get("row_prefix") or self.row_prefix)  # the tree and the table name rows alike
        self.changes.value = changes_html(compare_runs(baseline, data), moved, row_prefix=prefix, fields=fields,
                                          new_baseline="another question" if switched else "")
        self.tree.update(data)
        note = str(data.get("note") or "")
        self.note.value = f'<p data-testid="playground-note"><b>note:</b> {esc(note)}</p>' if note else ""
        self.last_values, self.last_data = comparable, data
        leaves = len(self.tree.data["leaves"])
        self.status.value = (
            f'<span data-state="done" data-runs="{self.runs}">run {self.runs}: {leaves} trajectories in '
            f"{time.perf_counter() - started:.1f} s ({esc(label)})</span>"
        )
        return data
