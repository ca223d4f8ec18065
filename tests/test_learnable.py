"""Choosing the questions a short GRPO run can learn on, from recorded sampled answers."""

from __future__ import annotations

import json

import pytest

from helpers.course.learnable import answer_rates, learnable_examples, learnable_ids, read_rows


def rows(pattern: dict[str, list[bool]]) -> list[dict]:
    return [{"id": qid, "exact_match": hit} for qid, hits in pattern.items() for hit in hits]


def test_rates_count_every_sample_of_a_question():
    rates = answer_rates(rows({"a": [True, False, False, True], "b": [False, False], "c": [True]}))
    assert rates == {"a": (0.5, 4), "b": (0.0, 2), "c": (1.0, 1)}


def test_only_questions_answered_sometimes_are_kept_closest_to_a_half_first():
    rates = answer_rates(rows({
        "never": [False] * 4, "always": [True] * 4, "half": [True, False, True, False],
        "quarter": [True, False, False, False], "three": [True, True, True, False], "once": [True],
    }))
    assert learnable_ids(rates) == ["half", "quarter", "three"]
    assert learnable_ids(rates, limit=1) == ["half"]
    assert learnable_ids(rates, band=(0.5, 1.0), min_samples=1) == ["half", "three", "always", "once"]
    with pytest.raises(ValueError, match="band"):
        learnable_ids(rates, band=(0.8, 0.2))


def test_the_selection_reads_a_recording_and_refuses_ids_of_another_data_pack(tmp_path):
    from helpers.data import load_examples

    train = load_examples("train", limit=3)
    path = tmp_path / "rates.jsonl"
    recorded = rows({train[0].id: [True, False], train[1].id: [True, True], train[2].id: [False, True]})
    path.write_text("".join(json.dumps(r) + "\n" for r in recorded))
    assert [e.id for e in learnable_examples(path)] == sorted([train[0].id, train[2].id])
    path.write_text(json.dumps({"id": "not-a-question", "exact_match": True}) + "\n"
                    + json.dumps({"id": "not-a-question", "exact_match": False}) + "\n")
    with pytest.raises(ValueError, match="not in the train split"):
        learnable_examples(path)
    with pytest.raises(FileNotFoundError, match="python -m helpers.course.learnable record"):
        read_rows(tmp_path / "missing.jsonl")


def test_the_cpu_run_starts_from_the_recorded_sft_under_the_notebook_budgets(tmp_path):
    from helpers.course.learnable import CPU_RUN, SFT_START, cpu_run_config
    from helpers.widgets.budgets import budgets
    from helpers.widgets.course import rollout_config

    values = budgets("full")
    config = cpu_run_config(rollout_config(values), tmp_path / "run")
    assert config.init_from == str(SFT_START) and config.questions_per_batch == CPU_RUN["questions_per_step"]
    assert config.max_steps == CPU_RUN["steps"] and config.max_minutes == CPU_RUN["minutes"]
    assert config.learning_rate == CPU_RUN["learning_rate"] and not config.resume
    assert cpu_run_config(rollout_config(values), tmp_path / "run", max_steps=2).max_steps == 2
    assert config.rollout.group_size == CPU_RUN["group_size"]
    assert config.rollout.max_tool_response_tokens == values["max_tool_response_tokens"]
    assert config.rollout.max_search_calls == values["max_search_calls"]


def test_the_recorded_answer_rates_offer_the_cpu_run_its_questions():
    from helpers.course.learnable import ANSWER_RATES, BAND, CPU_RUN

    rates = answer_rates(read_rows(ANSWER_RATES))
    chosen = learnable_ids(rates, limit=CPU_RUN["questions"])
    assert len(chosen) == CPU_RUN["questions"]
    assert all(BAND[0] <= rates[qid][0] <= BAND[1] and rates[qid][1] >= 8 for qid in chosen)


def test_recording_samples_each_question_once_per_seed_at_temperature_one(tmp_path, monkeypatch):
    import helpers.course.learnable
    from helpers.data import SearchExample
    from helpers.course.learnable import answer_rates, read_rows, record_answer_rates

    examples = [SearchExample(id=f"q{i}", question=f"question {i}?", answers=["a"], data_source="nq") for i in range(3)]
    monkeypatch.setattr(helpers.course.learnable, "load_examples", lambda split, limit=None, skip=0: examples[skip:skip + limit])
    seen = []

    def fake_evaluate(config, examples):
        seen.append((config.rollout.temperature, config.rollout.seed, config.rollout_config().group_size))
        return [{"id": e.id, "exact_match": (config.rollout.seed + int(e.id[1])) % 2 == 0} for e in examples]

    monkeypatch.setattr(helpers.course.learnable, "evaluate", fake_evaluate)
    out = record_answer_rates(tmp_path / "policy", tmp_path / "rates.jsonl", samples=2, limit=3)
    assert seen == [(1.0, 0, 1), (1.0, 1, 1)]
    rates = answer_rates(read_rows(out))
    assert rates == {"q0": (0.5, 2), "q1": (0.5, 2), "q2": (0.5, 2)}
