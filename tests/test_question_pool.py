"""The recorded pass@k filter as the course shows it: the pool's histogram, its signal, each step's groups."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

from helpers import config
from helpers.course import question_pool
from helpers.course.question_pool import informative_by_step, passes_histogram, pool_figure, signal_share


def _write(root, verdicts, steps):
    run = root / "pool"
    run.mkdir(parents=True)
    (run / "question_filter.json").write_text(json.dumps({"k": 4, "verdicts": verdicts}))
    for name, counts in steps.items():
        folder = run / name / question_pool.STAGE
        folder.mkdir(parents=True)
        folder.joinpath("metrics.jsonl").write_text("".join(json.dumps({"step": i, "informative_groups": c}) + "\n"
                                                            for i, c in enumerate(counts)))
    return "pool"


def test_the_histogram_counts_every_number_of_right_rollouts_and_the_signal_is_read_from_the_verdicts(tmp_path,
                                                                                                    monkeypatch):
    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    verdicts = {"a": {"signal": False, "passes": 0}, "b": {"signal": True, "passes": 2},
                "c": {"signal": False, "passes": 4}, "d": {"signal": True, "passes": 0}}
    run = _write(tmp_path, verdicts, {"all": [1, 0, 2], "kept": [3, 3]})
    assert passes_histogram(run) == {0: 2, 1: 0, 2: 1, 3: 0, 4: 1}
    assert signal_share(run) == 0.5  # "d": no right answer, yet its rewards differed
    steps = informative_by_step(run, {"every question": "all", "filtered": "kept"})
    assert steps == {"every question": [1, 0, 2], "filtered": [3, 3]}
    fig = pool_figure(passes_histogram(run), steps)
    bars, lines = fig.axes[0].patches, fig.axes[1].get_lines()
    assert len(bars) == 5 and [b.get_height() for b in bars] == [2, 0, 1, 0, 1]
    # the ends (all wrong, all right) are drawn as no signal, the middle in colour
    assert bars[0].get_facecolor() == bars[4].get_facecolor() != bars[2].get_facecolor()
    assert [list(line.get_ydata()) for line in lines] == [[1, 0, 2], [3, 3]]


def test_the_recorded_filter_shows_a_used_up_pool_and_a_filtered_run_that_runs_out_of_signal():
    histogram = passes_histogram()
    recorded = question_pool.filter_file()
    assert sum(histogram.values()) == recorded["judged"] == len(recorded["verdicts"])
    assert round(signal_share() * recorded["judged"]) == recorded["kept"]
    # most questions sit at the ends: never or always right
    assert histogram[0] + histogram[recorded["k"]] > 0.8 * recorded["judged"]
    steps = informative_by_step()
    filtered, every = steps["the filter's questions"], steps["every question"]
    assert sum(filtered[:10]) > 3 * sum(every[:10])  # the filter's first steps learn from more groups
    assert sum(filtered[-10:]) < sum(filtered[:10])  # and then its questions are learned
