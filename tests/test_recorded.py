"""The recorded runs as the notebooks quote them: numbers come from the files, a missing file or
question is a clear error, and the recorded run says what the course's text says of it."""

from __future__ import annotations

import json

import pytest

from helpers import config
from helpers.analyse import summarise
from helpers.course import recorded
from helpers.running_example import RUNNING_EXAMPLE


def _write_run(root, label, rows):
    folder = root / "toy" / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(i, reward, calls, source="nq", **extra):
    return {"id": f"q{i}", "question": "?", "answers": ["a"], "data_source": source, "reward": reward,
            "valid_format": reward >= 0, "exact_match": reward == 1.0, "search_calls": calls,
            "queries": ["q"] * calls, "answer": "a" if reward == 1.0 else "b", **extra}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    _write_run(tmp_path, "base_agent", [_row(0, 1.0, 0), _row(1, 0.0, 0), _row(2, 0.0, 1, "hotpotqa"), _row(3, -0.1, 0)])
    return tmp_path


def test_summaries_and_reward_shares_are_read_from_the_rows(toy):
    summary = recorded.eval_summary("base_agent", run="toy")
    assert summary["n"] == 4 and summary["format_rate"] == 0.75 and summary["no_search_share"] == 0.75
    assert recorded.eval_summary("base_agent", run="toy", source="hotpotqa")["n"] == 1
    assert recorded.reward_shares("base_agent", run="toy") == {1.0: 0.25, 0.0: 0.5, -0.1: 0.25}


def test_an_outcome_is_the_row_of_that_question(toy):
    outcome = recorded.running_example_outcome("base_agent", run="toy", example_id="q2")
    assert (outcome.search_calls, outcome.answer, outcome.exact_match) == (1, "b", False)
    assert "searched once, answered 'b' (wrong)" in outcome.describe()


def test_missing_files_and_questions_are_clear_errors(toy):
    with pytest.raises(FileNotFoundError, match="no recorded file"):
        recorded.eval_rows("sft", run="toy")
    with pytest.raises(KeyError, match="not among the recorded rows"):
        recorded.running_example_outcome("base_agent", run="toy", example_id="nope")
    with pytest.raises(KeyError, match="no rows from"):
        recorded.eval_summary("base_agent", run="toy", source="triviaqa")


def test_the_recorded_run_says_what_the_course_says_of_it():
    base = recorded.eval_summary("base_agent")
    assert base["format_rate"] > 0.9 and base["no_search_share"] > 0.95  # answers well-formed, never searches
    assert recorded.reward_shares("base_agent")[0.0] > 0.9  # so its groups score 0, not -0.1
    sft, grpo = recorded.running_example_outcome("sft"), recorded.running_example_outcome("sft_grpo")
    assert (sft.search_calls, sft.answer) == (2, "director")
    assert (grpo.search_calls, grpo.answer) == (1, "Governor")
    assert RUNNING_EXAMPLE.answers[0] not in (sft.answer, grpo.answer)
    first, last = recorded.trend("exact_match", "search_calls_mean", run="efficiency")
    assert abs(first - last) < 0.05  # exact match did not drift towards more calls


def test_the_evaluated_checkpoint_is_read_from_the_rows(toy):
    assert recorded.evaluated_updates("base_agent", run="toy") is None  # no checkpoint named
    _write_run(toy, "trained", [_row(0, 1.0, 1, model_path="/w/grpo/checkpoints/step00005"),
                                _row(1, 0.0, 1, model_path="/w/grpo/checkpoints/step00005/")])
    assert recorded.evaluated_updates("trained", run="toy") == 5
    _write_run(toy, "mixed", [_row(0, 1.0, 1, model_path="/w/step00003"), _row(1, 0.0, 1, model_path="/w/step00004")])
    with pytest.raises(ValueError, match="mixes checkpoints"):
        recorded.evaluated_updates("mixed", run="toy")


def test_what_s_did_on_a_gpu_is_what_notebook_14_says():
    """Notebook 14's section on the recorded `trim` runs with s = 1 and with s from the preference model."""
    runs = {"draw2": "h200_agent/continued/draw2", "draw1": "h200_agent/continued/draw1",
            "model_s": "h200_agent/preference_trim"}
    start = summarise(recorded.policy_rows("agent"))
    evaluated = {name: summarise(recorded.eval_rows("sft_grpo", run)) for name, run in runs.items()}
    curves = {name: recorded.training_metrics("grpo_trim", run) for name, run in runs.items()}
    updates = {name: recorded.evaluated_updates("sft_grpo", run) for name, run in runs.items()}
    assert updates["model_s"] < updates["draw1"] < updates["draw2"]  # unequal arms, s the shortest
    searches = {name: [r["search_calls_mean"] for r in m] for name, m in curves.items()}
    # s = 1 drawn like the s run climbs; the s run stays; the other s = 1 run is flat for longer
    assert searches["draw2"][-1] > searches["draw2"][0] + 0.5 and searches["draw2"][2] > searches["model_s"][2] + 0.1
    assert max(searches["model_s"]) - min(searches["model_s"]) < 0.1
    assert max(searches["draw1"][:len(searches["model_s"]) + 2]) - searches["draw1"][0] < 0.1
    em = {name: s["all"]["em_strict"] for name, s in evaluated.items()}
    assert min(em, key=em.get) == "draw2" and em["draw2"] < start["all"]["em_strict"]
    assert abs(em["model_s"] - start["all"]["em_strict"]) < 0.01
    hotpot, nq = ({name: s[source]["multi_search_share"] for name, s in evaluated.items()} for source in ("hotpotqa", "nq"))
    assert hotpot["draw2"] > 0.5 and hotpot["model_s"] > start["hotpotqa"]["multi_search_share"]
    assert nq["model_s"] < min(nq["draw1"], nq["draw2"])
    mean_s = [r["eff/preference_mean"] for r in curves["model_s"]]
    assert all(0.4 < s < 0.6 for s in mean_s)  # "near one half"
    seconds = {name: sum(r["time_step"] for r in m) / len(m) for name, m in curves.items()}
    assert seconds["model_s"] > max(seconds["draw1"], seconds["draw2"])


@pytest.mark.slow
def test_the_multi_search_agent_on_a_cpu_repeats_its_gpu_evaluation():
    """The shipped adapter, evaluated on this machine as the recorded run evaluated it on a GPU (greedy,
    the recorded budgets), makes the same searches and gives the same answer on a question it searched
    twice on: what a learner runs is the policy the tables describe."""
    import dataclasses

    import torch

    from helpers.course.policies import SEARCHES_AGAIN, adapter_dir, evaluation_path
    from helpers.eval import evaluate
    from helpers.experiment import make_plan
    from helpers.runs import read_jsonl
    from helpers.widgets.measured import CANDIDATES, candidates

    torch.set_num_threads(2)
    gpu = {row["id"]: row for row in read_jsonl(evaluation_path(SEARCHES_AGAIN))}
    recorded = make_plan("h200", "unused").eval
    gpu_rollout = json.loads(evaluation_path(SEARCHES_AGAIN).with_suffix(".config.json").read_text())["eval"]["rollout"]
    here = dataclasses.asdict(recorded.rollout)
    assert {k: v for k, v in gpu_rollout.items() if k != "search_concurrency"} == \
        {k: here[k] for k in gpu_rollout if k != "search_concurrency"}  # the GPU evaluation's own settings
    config = dataclasses.replace(recorded, model_path=str(adapter_dir(SEARCHES_AGAIN)), output=None, batch_size=1)
    [row] = evaluate(config, examples=candidates(CANDIDATES[:1]), progress=False)
    expected = gpu[CANDIDATES[0]]
    assert row["search_calls"] == expected["search_calls"] == 2
    assert row["queries"] == expected["queries"] and row["answer"] == expected["answer"]
