"""The pass@k filter on training questions: which groups carry signal, the file, and a run's pool."""

from __future__ import annotations

import json

import pytest

import helpers.rollout
from helpers import question_filter
from helpers.question_filter.__main__ import main as filter_command
from helpers.data import SearchExample, load_examples
from helpers.rollout import AssistantTurn, RolloutGroups, Trajectory, groups_of
from helpers.session import question_pool, training_examples
from helpers.train import TrainConfig

# right answers out of 4 rollouts per question: q0 some (signal), q1 none, q2 all, q3 some
RIGHT = {"q0": 1, "q1": 0, "q2": 4, "q3": 3}
EXAMPLES = [SearchExample(id=qid, question=f"question {qid}?", answers=["right"], data_source="nq") for qid in RIGHT]


def fake_rollout(calls):
    def rollout_groups(sampling_client, tokenizer, search_client, examples, config, progress=False):
        calls.append(([e.id for e in examples], config.seed))
        out = []
        for qi, example in enumerate(examples):
            for g in range(config.group_size):
                turn = AssistantTurn(prompt_tokens=[1], completion_tokens=[2], logprobs=[-0.5], text="")
                t = Trajectory(example=example, group_index=g, messages=[], question_index=qi, turns=[turn])
                t.final_text = "Answer: right" if g < RIGHT[example.id] else "Answer: wrong"
                t.end_reason = "answer"
                out.append(t)
        return RolloutGroups(groups_of(out))

    return rollout_groups


def test_the_filter_keeps_the_questions_whose_group_has_signal(monkeypatch):
    calls: list = []
    monkeypatch.setattr(helpers.rollout, "rollout_groups", fake_rollout(calls))
    config = TrainConfig(rollout=dict(group_size=4))
    verdicts = question_filter.judge(None, None, None, EXAMPLES, config, batch=3, progress=False)
    assert {qid: v["signal"] for qid, v in verdicts.items()} == {"q0": True, "q1": False, "q2": False, "q3": True}
    assert {qid: v["passes"] for qid, v in verdicts.items()} == RIGHT
    # rolled out in chunks of `batch`, each chunk with its own seed (reproducible)
    assert [ids for ids, _ in calls] == [["q0", "q1", "q2"], ["q3"]] and calls[0][1] != calls[1][1]


def test_a_reward_that_needs_a_session_is_refused_with_what_to_do():
    config = TrainConfig(reward="gated", reward_options={"reference": "initial"})
    with pytest.raises(ValueError, match="reward=exact_match"):
        question_filter.judge(None, None, None, EXAMPLES, config, progress=False)


def test_the_file_round_trips_and_unjudged_questions_stay(tmp_path):
    verdicts = {"q0": {"signal": True, "passes": 1}, "q1": {"signal": False, "passes": 0}}
    path = question_filter.write(tmp_path / "f" / "filter.json", verdicts, k=4, policy="sft")
    saved = json.loads(path.read_text())
    assert saved["judged"] == 2 and saved["kept"] == 1 and saved["k"] == 4 and saved["policy"] == "sft"
    kept = question_filter.apply(EXAMPLES, question_filter.load(path))
    assert [ex.id for ex in kept] == ["q0", "q2", "q3"]  # q1 judged without signal; q2, q3 not judged
    with pytest.raises(FileNotFoundError, match="python -m helpers.question_filter"):
        question_filter.load(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text(json.dumps({"kept": [0, 1]}))
    with pytest.raises(ValueError, match="not a question filter"):
        question_filter.load(tmp_path / "other.json")


def test_a_run_with_a_filter_trains_on_the_kept_questions_only(tmp_path):
    pool = load_examples("train", limit=6)
    verdicts = {ex.id: {"signal": i % 2 == 0, "passes": 1} for i, ex in enumerate(pool[:4])}
    path = question_filter.write(tmp_path / "filter.json", verdicts, k=4)
    config = TrainConfig(limit=6, question_filter=str(path))
    assert [ex.id for ex in training_examples(config)] == [pool[i].id for i in (0, 2, 4, 5)]
    assert len(training_examples(TrainConfig(limit=6))) == 6
    every = question_filter.write(tmp_path / "none.json", {ex.id: {"signal": False, "passes": 0} for ex in pool}, k=4)
    with pytest.raises(ValueError, match="leaves none"):
        training_examples(TrainConfig(limit=6, question_filter=str(every)))


def test_the_command_judges_the_pool_with_the_small_model_and_a_run_reads_its_file(tmp_path, capsys):
    out = tmp_path / "filter.json"
    summary = filter_command(["--preset", "cpu-dry", "--out", str(out), "--limit", "2", "--batch", "1"])
    saved = json.loads(out.read_text())
    pool = training_examples(TrainConfig(skip=2))[:2]  # cpu-dry's GRPO pool: the split after SFT's 2
    assert sorted(saved["verdicts"]) == sorted(ex.id for ex in pool)
    assert saved["k"] == 2 and saved["reward"] == "exact_match" and saved["policy"] == "smollm2-135m"
    assert summary["judged"] == 2 and summary["kept"] == sum(v["signal"] for v in saved["verdicts"].values())
    assert '"judged": 2' in capsys.readouterr().out
    kept = training_examples(TrainConfig(skip=2, limit=None, question_filter=str(out)))
    dropped = {qid for qid, v in saved["verdicts"].items() if not v["signal"]}
    assert not dropped & {ex.id for ex in kept}


def test_the_pool_holds_the_synthetic_split_when_the_run_draws_from_it():
    from helpers.session import SYNTHETIC_SPLIT

    synthetic = load_examples(SYNTHETIC_SPLIT)
    assert synthetic, "the synthetic split is built by make setup"
    split_only = question_pool(TrainConfig(skip=2), limit=3)
    assert [ex.id for ex in split_only] == [ex.id for ex in training_examples(TrainConfig(skip=2))[:3]]
    both = question_pool(TrainConfig(skip=2, synthetic_share=0.5), limit=3)
    assert [ex.id for ex in both] == [ex.id for ex in split_only] + [ex.id for ex in synthetic[:3]]
    # the run filters its synthetic questions with the same file: a judged one without signal leaves
    verdicts = {synthetic[0].id: {"signal": False, "passes": 0}}
    assert synthetic[0] not in question_filter.apply(synthetic[:3], verdicts)


def test_the_command_judges_the_synthetic_questions_of_a_run_that_mixes_them_in(tmp_path):
    from helpers.session import SYNTHETIC_SPLIT

    out = tmp_path / "filter.json"
    summary = filter_command(["--preset", "cpu-dry", "--out", str(out), "--limit", "1", "--batch", "2",
                              "--set", "grpo.synthetic_share=0.5"])
    judged = sorted(json.loads(out.read_text())["verdicts"])
    assert judged == sorted([training_examples(TrainConfig(skip=2))[0].id, load_examples(SYNTHETIC_SPLIT)[0].id])
    assert summary["judged"] == 2 and len(summary["by_source"]) == 2
