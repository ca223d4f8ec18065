"""The recorded GPU runs in `results/`, read the way the notebooks quote them.

Every number the course states about a recorded run comes from these files, so a re-recorded run
changes the text with it:

    from helpers.course.recorded import eval_summary, running_example_outcome
    eval_summary("base_agent")["format_rate"]      # the base model's share of well-formed answers
    running_example_outcome("sft_grpo").answer     # what SFT + GRPO answered on the running example

`RECORDED_RUN` (`helpers.course.policies`) names the run the README reports; a run's evaluation rows are
`results/<run>/eval/<label>.jsonl` (labels `base_agent`, `base_closed_book`, `base_rag`, `sft`,
`sft_grpo`), its training metrics `results/<run>/<stage>/metrics.jsonl`. A recorded policy of
another run (the search agent, `agent`, of `AGENT_RUN`; the multi-search agent, `again`, of `AGAIN_RUN`) is
read by its name: `policy_rows("agent")`.
A run may sit in a folder of another run's: `training_metrics("grpo_trim", run="h200_agent/preference_trim")`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers import config
from helpers.analyse import first_last_quarter, summarise
from helpers.course.policies import RECORDED_RUN, evaluation_path
from helpers.running_example import RUNNING_EXAMPLE
from helpers.runs import read_jsonl

EVAL_LABELS = {"base_agent": "base model, agent loop", "base_closed_book": "base model, closed book",
               "base_rag": "base model, RAG", "sft": "SFT", "sft_grpo": "SFT + GRPO"}


def run_folder(run: str | None = None) -> Path:
    """results/<run>, the recorded run the README reports by default."""
    return config.RESULTS_DIR / (run or RECORDED_RUN)


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(f"no recorded file {path}: the recorded runs live in results/ "
                                "(bash results/run.sh on a GPU machine makes one)")
    return read_jsonl(path)


def eval_rows(label: str, run: str | None = None) -> list[dict[str, Any]]:
    """The evaluation rows of one policy of a recorded run (one row per test question)."""
    return _read(run_folder(run) / "eval" / f"{label}.jsonl")


def policy_rows(name: str) -> list[dict[str, Any]]:
    """The evaluation rows of a recorded policy by its name ("sft", "sft_grpo", "agent"), from its own run."""
    path = evaluation_path(name)
    if path is None:
        raise ValueError(f"the recorded policy {name!r} has no evaluation of its own; pick a trained one")
    return _read(path)


def eval_summary(label: str, run: str | None = None, source: str = "all") -> dict[str, Any]:
    """`helpers.analyse.summarise` of a policy's recorded rows: 'all', 'nq' or 'hotpotqa'."""
    summary = summarise(eval_rows(label, run))
    if source not in summary:
        raise KeyError(f"{label} of {run or RECORDED_RUN} has no rows from {source!r}; it has {sorted(summary)}")
    return summary[source]


def reward_shares(label: str, run: str | None = None) -> dict[float, float]:
    """{reward: share of questions} of a recorded evaluation (1 right, 0 wrong, −0.1 badly formatted)."""
    rows = eval_rows(label, run)
    counts = Counter(round(float(r["reward"]), 6) for r in rows)
    return {reward: counts[reward] / len(rows) for reward in sorted(counts, reverse=True)}


@dataclass(frozen=True)
class Outcome:
    """What a recorded policy did on one question: its searches, its answer and the reward."""

    label: str
    search_calls: int
    queries: tuple[str, ...]
    answer: str | None
    exact_match: bool
    reward: float

    def describe(self) -> str:
        searches = {0: "not at all", 1: "once", 2: "twice"}.get(self.search_calls, f"{self.search_calls} times")
        verdict = "right" if self.exact_match else "wrong"
        return f"{EVAL_LABELS.get(self.label, self.label)}: searched {searches}, answered {self.answer!r} ({verdict})"


def running_example_outcome(label: str, run: str | None = None, example_id: str = RUNNING_EXAMPLE.id) -> Outcome:
    """The recorded evaluation's trajectory of the course's running example (or another test question)."""
    for row in eval_rows(label, run):
        if row["id"] == example_id:
            return Outcome(label, int(row["search_calls"]), tuple(row.get("queries") or ()), row.get("answer"),
                           bool(row["exact_match"]), float(row["reward"]))
    raise KeyError(f"question {example_id} is not among the recorded rows of {label} ({run or RECORDED_RUN})")


def evaluated_updates(label: str, run: str | None = None) -> int | None:
    """How many updates the checkpoint behind a recorded evaluation had taken: its rows' `model_path`
    ends in `step00005` for the fifth (a run evaluates a checkpoint, not always its last step).
    None when the rows name no checkpoint."""
    paths = {str(row.get("model_path") or "") for row in eval_rows(label, run)}
    steps = {int(m.group(1)) for m in (re.search(r"step(\d+)/*$", path) for path in paths) if m}
    if len(steps) > 1:
        raise ValueError(f"{label} of {run or RECORDED_RUN} mixes checkpoints {sorted(steps)}")
    return steps.pop() if steps else None


def training_metrics(stage: str = "grpo", run: str | None = None) -> list[dict[str, Any]]:
    """One recorded training run's metrics, a row per step (`results/<run>/<stage>/metrics.jsonl`)."""
    return _read(run_folder(run) / stage / "metrics.jsonl")


def trend(stage: str, key: str, run: str | None = None) -> tuple[float, float]:
    """A training metric's mean over the first and over the last quarter of the recorded steps."""
    return first_last_quarter(training_metrics(stage, run), key)
