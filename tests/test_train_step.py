"""The composable training step on test doubles: reward functions by name, observers, dynamic sampling."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

import helpers.train as train_module
from fixtures.doubles import FakeTrainer
from helpers.data import SearchExample
from helpers.reward import GroupRewards, register_reward, score
from helpers.reward_functions import make_reward, reward_names
from helpers.rollout import AssistantTurn, RolloutGroups, RolloutStats, Trajectory, groups_of
from helpers.runs import RunDir, add_config_arguments, config_from_args
from helpers.train import TrainConfig, TrainingSession, extra_questions, train, train_step

# Questions whose id starts with "s" have signal: branch 0 answers right, the others wrong.
EXAMPLES = [SearchExample(id=f"{'s' if i % 3 == 0 else 'n'}{i}", question=f"question {i}?", answers=["right"],
                          data_source="nq") for i in range(30)]


def fake_rollout(seen):
    def rollout_groups(sampling_client, tokenizer, search_client, examples, config, progress=False):
        seen.append(([e.id for e in examples], config.seed))
        out = []
        for qi, example in enumerate(examples):
            for g in range(config.group_size):
                turn = AssistantTurn(prompt_tokens=[1, 2, 3], completion_tokens=[4, 5], logprobs=[-0.5, -0.25], text="")
                t = Trajectory(example=example, group_index=g, messages=[], question_index=qi, turns=[turn])
                right = example.id.startswith("s") and g == 0
                t.final_text, t.end_reason = ("Answer: right" if right else "Answer: wrong"), "answer"
                out.append(t)
        groups = RolloutGroups(groups_of(out))
        groups.stats = RolloutStats(questions=len(examples), trajectories=len(out), end_reasons={"answer": len(out)})
        return groups

    return rollout_groups


def step(monkeypatch, config, batch, extra=(), **kwargs):
    seen: list = []
    monkeypatch.setattr(train_module, "rollout_groups", fake_rollout(seen))
    trainer = FakeTrainer()
    metrics, groups = train_step(trainer, None, None, batch, config, 0, extra=extra, **kwargs)
    return metrics, groups, seen, trainer


def test_without_dynamic_sampling_every_group_is_kept_and_one_rollout_runs(monkeypatch):
    config = TrainConfig(questions_per_batch=3, rollout=dict(group_size=4))
    metrics, groups, seen, trainer = step(monkeypatch, config, EXAMPLES[:3], extra=EXAMPLES[3:9])
    assert len(seen) == 1 and [g.example.id for g in groups] == ["s0", "n1", "n2"]
    assert metrics["informative_groups"] == 1 and metrics["degenerate_group_share"] == pytest.approx(2 / 3)
    assert metrics["datums"] == 4 and not any(key.startswith("dynamic/") for key in metrics)
    assert trainer.sent == [4]


def test_dynamic_sampling_draws_until_the_quota_has_signal(monkeypatch):
    config = TrainConfig(questions_per_batch=3, rollout=dict(group_size=4), dynamic_sampling=True, dynamic_sampling_rounds=4)
    extra = EXAMPLES[3:12]  # s3, n4, n5 | s6, n7, n8 | s9, n10, n11
    metrics, groups, seen, trainer = step(monkeypatch, config, EXAMPLES[:3], extra=extra)
    assert [ids for ids, _ in seen] == [["s0", "n1", "n2"], ["s3", "n4", "n5"], ["s6", "n7", "n8"]]
    assert len({seed for _, seed in seen}) == 3  # each round samples with its own seed
    assert [g.example.id for g in groups] == ["s0", "s3", "s6"] and all(not g.degenerate for g in groups)
    # every group has its own index in the step (what a reward seeds its randomness with)
    assert [g.index for g in groups] == [0, 3, 6]
    assert all(t.question_index == g.index for g in groups for t in g.trajectories)
    assert metrics["dynamic/rounds"] == 3 and metrics["dynamic/questions"] == 9
    assert metrics["dynamic/kept_groups"] == 3 and metrics["dynamic/filtered_group_share"] == pytest.approx(6 / 9)
    assert metrics["datums"] == 12 and metrics["trajectories"] == 36  # rollout metrics: every draw
    # the loss is the mean over the kept trajectories: one micro-batch of 12 weighs 12 / 12
    assert trainer.sent == [12]


def test_dynamic_sampling_stops_after_its_rounds_and_skips_questions_already_in_the_step(monkeypatch):
    config = TrainConfig(questions_per_batch=3, rollout=dict(group_size=2), dynamic_sampling=True, dynamic_sampling_rounds=2)
    extra = [EXAMPLES[0], *EXAMPLES[1:3], EXAMPLES[4]]  # s0 again: not drawn twice in one step
    metrics, groups, seen, _ = step(monkeypatch, config, [EXAMPLES[1], EXAMPLES[2], EXAMPLES[4]], extra=extra)
    assert [ids for ids, _ in seen] == [["n1", "n2", "n4"], ["s0"]]
    assert [g.example.id for g in groups] == ["s0"] and metrics["dynamic/rounds"] == 2


def test_a_bigger_first_round_rolls_out_extra_batches_at_once_and_keeps_the_quota(monkeypatch):
    config = TrainConfig(questions_per_batch=3, rollout=dict(group_size=4), dynamic_sampling=True,
                         dynamic_sampling_rounds=3, dynamic_sampling_draw=2)
    extra = EXAMPLES[3:12]  # s3, n4, n5 | s6, n7, n8 | s9, n10, n11
    metrics, groups, seen, trainer = step(monkeypatch, config, EXAMPLES[:3], extra=extra)
    # one rollout of two batches, then one more batch: 3 groups with signal from 9 questions in 2 rounds
    assert [ids for ids, _ in seen] == [["s0", "n1", "n2", "s3", "n4", "n5"], ["s6", "n7", "n8"]]
    assert [g.example.id for g in groups] == ["s0", "s3", "s6"]
    assert metrics["dynamic/rounds"] == 2 and metrics["dynamic/questions"] == 9
    assert trainer.sent == [12]
    with pytest.raises(ValueError, match="dynamic_sampling_draw"):
        TrainConfig(dynamic_sampling_draw=0)


def test_extra_questions_have_a_chunk_per_extra_batch_each_with_the_synthetic_share():
    synthetic = [SearchExample(id=f"m{i}", question=f"hop {i}?", answers=["x"], data_source="synthetic")
                 for i in range(40)]
    config = TrainConfig(questions_per_batch=4, dynamic_sampling=True, dynamic_sampling_rounds=3,
                         dynamic_sampling_draw=2, synthetic_share=0.5, seed=3)
    extra = extra_questions(EXAMPLES, 1, config, synthetic)
    chunks = [extra[i:i + 4] for i in range(0, len(extra), 4)]
    assert len(chunks) == 3  # one for the first round's second batch, one per later round
    assert all(sum(e.id.startswith("m") for e in chunk) == 2 for chunk in chunks)
    assert len({e.id for e in extra}) == len(extra)  # no question twice in one step
    assert extra == extra_questions(EXAMPLES, 1, config, synthetic)  # a resumed run draws the same
    assert not any(e.id.startswith("m") for e in extra_questions(EXAMPLES, 1, config))  # no synthetic split


def test_extra_questions_are_a_pure_function_of_seed_and_step():
    config = TrainConfig(questions_per_batch=4, dynamic_sampling=True, dynamic_sampling_rounds=3, seed=5)
    first = [extra_questions(EXAMPLES, s, config) for s in range(3)]
    assert first == [extra_questions(EXAMPLES, s, config) for s in range(3)]
    assert all(len(x) == 8 for x in first) and first[0] != first[1]
    assert first[0] != train_module.batch_for_step(EXAMPLES, 0, 8, config.seed)  # not the step's own order
    assert extra_questions(EXAMPLES, 0, TrainConfig(questions_per_batch=4)) == []
    with pytest.raises(ValueError, match="dynamic_sampling_rounds"):
        TrainConfig(dynamic_sampling_rounds=0)


def test_a_reward_chosen_by_name_and_its_components_reach_the_metrics(monkeypatch):
    def length_bonus(scale: float = 1.0):
        def reward(group):
            values = [scale * t.group_index for t in group.trajectories]
            return GroupRewards(values, {"test/bonus_mean": values})
        return reward

    register_reward("test-length-bonus", length_bonus)
    assert "test-length-bonus" in reward_names() and "gated" in reward_names()
    config = TrainConfig(questions_per_batch=2, rollout=dict(group_size=3), reward="test-length-bonus", reward_options={"scale": 2.0})
    metrics, groups, _, _ = step(monkeypatch, config, EXAMPLES[:2])
    assert [t.reward for t in groups[1].trajectories] == [0.0, 2.0, 4.0]
    assert metrics["test/bonus_mean"] == pytest.approx(2.0) and metrics["informative_groups"] == 2
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        make_reward("nope")
    with pytest.raises(ValueError, match="does not take"):
        make_reward("test-length-bonus", slope=1)
    with pytest.raises(ValueError, match="no option"):
        make_reward("gated", bogus=1)


def test_score_refuses_a_reward_function_that_breaks_the_contract():
    trajectories = [Trajectory(example=EXAMPLES[0], group_index=g, messages=[], end_reason="answer",
                               final_text="Answer: right") for g in range(2)]
    with pytest.raises(ValueError, match="one reward per trajectory"):
        score(groups_of(trajectories), lambda group: GroupRewards([1.0]))
    with pytest.raises(ValueError, match="finite"):
        score(groups_of(trajectories), lambda group: GroupRewards([1.0, float("nan")]))


class Recorder:
    def __init__(self):
        self.events = []

    def before_update(self, context):
        self.events.append(("before", context.step, len(context.groups), len(context.trajectories)))
        return {"recorder/seen": len(context.trajectories)}

    def on_step(self, metrics, config):
        self.events.append(("step", metrics["step"], metrics["recorder/seen"], config.rollout.group_size))

    def close(self):
        self.events.append(("close",))


def test_observers_see_each_step_before_the_update_and_after_it_and_are_closed(monkeypatch, tmp_path):
    monkeypatch.setattr(train_module, "rollout_groups", fake_rollout([]))
    config = TrainConfig(max_steps=2, questions_per_batch=2, rollout=dict(group_size=2), save_every=0, out=str(tmp_path / "run"))
    session = TrainingSession(config, None, FakeTrainer(), None, None, EXAMPLES[:4], RunDir(config.out))
    recorder, plain = Recorder(), []
    train(config, session=session, progress=False, observers=[recorder, lambda m, c: plain.append(m["step"])])
    assert recorder.events == [("before", 0, 2, 4), ("step", 0, 4, 2), ("before", 1, 2, 4), ("step", 1, 4, 2),
                               ("close",)]
    assert plain == [0, 1]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["recorder/seen"] for r in rows] == [4, 4] and all("wall_time" in r for r in rows)


def test_reward_options_and_dynamic_sampling_come_from_the_command_line():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, TrainConfig)
    args = parser.parse_args(["--reward", "gated", "--reward-options", "lambda_tool=0.3",
                              "--reward-options", "format_penalty=0.1,seed=2", "--dynamic-sampling"])
    config = config_from_args(TrainConfig, args)
    assert config.reward == "gated" and config.dynamic_sampling and config.dynamic_sampling_rounds == 4
    assert config.reward_options == {"lambda_tool": 0.3, "format_penalty": 0.1, "seed": 2}
    reward = config.reward_fn()
    assert reward.config.lambda_tool == 0.3 and reward.config.seed == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["--reward-options", "lambda_tool"])


def _session(config, examples, synthetic=()):
    return TrainingSession(config, None, None, None, None, list(examples), None, synthetic=list(synthetic))


def test_synthetic_share_mixes_that_many_synthetic_questions_into_every_step():
    def example(i, source):
        return SearchExample(id=f"{source}-{i}", question=f"q{i}", answers=["a"], data_source=source)

    real = [example(i, "nq") for i in range(20)]
    synthetic = [example(i, "synthetic") for i in range(10)]
    plain = TrainConfig(questions_per_batch=8, seed=3)
    # share 0 leaves the split's own order untouched
    assert train_module.step_questions(_session(plain, real, synthetic), 2) == train_module.batch_for_step(real, 2, 8, 3)
    mixed = TrainConfig(questions_per_batch=8, seed=3, synthetic_share=0.25)
    batches = [train_module.step_questions(_session(mixed, real, synthetic), step) for step in range(5)]
    assert all(sum(e.data_source == "synthetic" for e in batch) == 2 for batch in batches)
    assert all(len(batch) == 8 for batch in batches)
    # a resumed run draws the same questions
    assert batches[4] == train_module.step_questions(_session(mixed, real, synthetic), 4)
    # every synthetic question is met within one pass over the synthetic pool
    assert {e.id for batch in batches for e in batch if e.data_source == "synthetic"} == {e.id for e in synthetic}


def _session_with_rubric(config, examples, synthetic, rubric):
    return TrainingSession(config, None, None, None, None, list(examples), None, synthetic=list(synthetic),
                           rubric=list(rubric))


def test_the_rubric_share_mixes_rubric_prompts_on_top_of_the_verifiable_batch():
    """The post's 90/10 (verifiable : rubric) through the same mixing as the synthetic share; off by default."""
    def example(i, source):
        return SearchExample(id=f"{source}-{i}", question=f"q{i}", answers=["a"], data_source=source)

    real = [example(i, "nq") for i in range(40)]
    synthetic = [example(i, "synthetic") for i in range(10)]
    rubric = [example(i, "rubric") for i in range(6)]
    assert TrainConfig().rubric_share == 0.0 and TrainConfig().rubric_prompts is None
    plain = TrainConfig(questions_per_batch=10, seed=3, synthetic_share=0.2)
    # off: the batches are exactly those without any rubric prompts
    assert ([train_module.step_questions(_session_with_rubric(plain, real, synthetic, rubric), s) for s in range(3)]
            == [train_module.step_questions(_session(plain, real, synthetic), s) for s in range(3)])
    mixed = dataclasses.replace(plain, rubric_share=0.1)
    batches = [train_module.step_questions(_session_with_rubric(mixed, real, synthetic, rubric), s) for s in range(6)]
    assert all(len(b) == 10 and sum(e.data_source == "rubric" for e in b) == 1 for b in batches)
    assert all(sum(e.data_source == "synthetic" for e in b) == round(9 * 0.2) for b in batches)
    assert {e.id for b in batches for e in b if e.data_source == "rubric"} == {e.id for e in rubric}
    assert batches[5] == train_module.step_questions(_session_with_rubric(mixed, real, synthetic, rubric), 5)


def test_config_flags_read_back_into_the_same_config():
    """How results/run.sh hands the preset's GRPO settings to the efficiency comparison."""
    from helpers.experiment import make_plan
    from helpers.runs import config_flags

    grpo = make_plan("h200", "x").grpo
    grpo = dataclasses.replace(grpo, reward="gated", reward_options={"lambda_tool": 0.3, "seed": 2})
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, TrainConfig)
    flags = config_flags(grpo)
    assert "--rollout.max-search-calls" in flags and "--balance-sources" in flags
    assert config_from_args(TrainConfig, parser.parse_args(flags)) == grpo


def test_a_reward_that_samples_counterfactuals_gets_the_steps_sampler_before_it_scores(monkeypatch):
    calls = []

    def flagged():
        def reward(group):  # reads what the counterfactuals wrote: 1 where it was marked
            return GroupRewards([float(getattr(t, "marked", 0)) for t in group.trajectories])

        def sample_counterfactuals(sampling_client, tokenizer, groups):
            calls.append((sampling_client, len(groups)))
            for group in groups:
                group.trajectories[-1].marked = 1
        reward.sample_counterfactuals = sample_counterfactuals
        return reward

    register_reward("test-counterfactual", flagged)
    config = TrainConfig(questions_per_batch=2, rollout=dict(group_size=3), reward="test-counterfactual")
    _, groups, _, trainer = step(monkeypatch, config, EXAMPLES[:2])
    assert len(calls) == 1 and calls[0][1] == 2 and calls[0][0] is not None  # once a round, with the step's sampler
    assert [t.reward for g in groups for t in g.trajectories] == [0.0, 0.0, 1.0] * 2
