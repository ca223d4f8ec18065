"""How much of a training pool can still teach a trained policy: the pass@k filter, recorded on a GPU.

A group whose rollouts all earn one reward has zero advantage (notebook 08), so a question the policy
always answers, or never can, costs its rollouts and buys no gradient. `helpers.question_filter` measures
this before a run: each training question rolled out `k` times by the policy the run starts from, with
the run's reward. Recorded on one H100 (`results/h200_filter/`): the multi-search agent after 41 updates
of `search_gain` (`results/h200_replicas/gain5ns-k2_41`) judged its stage's 1,105 training questions,
then the same stage ran from it for five minutes twice, side by side: on every question, and on the
questions the filter kept (`<run>/grpo_trim/metrics.jsonl`).

    from helpers.course.question_pool import informative_by_step, passes_histogram, pool_figure
    histogram = passes_histogram()      # {rollouts right of 8: questions}
    pool_figure(histogram, informative_by_step())
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from helpers.analyse import COLUMN_INCHES, OTHER_COLOURS
from helpers.course.recorded import run_folder, training_metrics

FILTER_RUN = "h200_filter"
# the two runs of the stage, by what they trained on
RUNS = {"every question": "gain5ns-k2", "the filter's questions": "gain5ns-k2-f"}
STAGE = "grpo_trim"
NO_SIGNAL_COLOUR = "#7f7f7f"


def filter_file(run: str = FILTER_RUN) -> dict[str, Any]:
    """The recorded filter: its policy, reward, `k` and a verdict per question."""
    return json.loads((run_folder(run) / "question_filter.json").read_text())


def passes_histogram(run: str = FILTER_RUN) -> dict[int, int]:
    """How many questions had 0, 1, ..., k of their k rollouts right (every count present, zeros too)."""
    recorded = filter_file(run)
    counts = Counter(v["passes"] for v in recorded["verdicts"].values())
    return {passes: counts.get(passes, 0) for passes in range(recorded["k"] + 1)}


def signal_share(run: str = FILTER_RUN) -> float:
    """The share of judged questions whose group's rewards differed: the ones a step can learn from."""
    verdicts = filter_file(run)["verdicts"].values()
    return sum(v["signal"] for v in verdicts) / len(verdicts)


def informative_by_step(run: str = FILTER_RUN, runs: Mapping[str, str] = RUNS) -> dict[str, list[int]]:
    """Per run (by label), the groups with signal that each recorded step trained on."""
    return {label: [int(m["informative_groups"]) for m in training_metrics(STAGE, f"{run}/{name}")]
            for label, name in runs.items()}


def pool_figure(histogram: Mapping[int, int], steps: Mapping[str, Sequence[int]]):
    """Left: questions by rollouts right (the grey ends teach nothing); right: groups with signal a step."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(COLUMN_INCHES, 3.8), layout="constrained")
    k = max(histogram)
    colours = [NO_SIGNAL_COLOUR if passes in (0, k) else OTHER_COLOURS[0] for passes in histogram]
    left.bar(list(histogram), list(histogram.values()), color=colours)
    left.set_xticks(list(histogram))
    left.set_xlabel(f"rollouts right, of {k}")
    left.set_ylabel("training questions")
    left.set_title("the starting policy on its pool")
    for label, colour in zip(steps, OTHER_COLOURS[1:]):
        right.plot(range(1, len(steps[label]) + 1), steps[label], marker="o", ms=3, color=colour, label=label)
    right.set_xlabel("step")
    right.set_ylabel("groups with signal (of the step's)")
    right.set_title("what each step learned from")
    right.legend()
    return fig
