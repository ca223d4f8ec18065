"""build_datum, micro-batch packing and weighting, data order, CLI (no model needed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.data import SearchExample
from helpers.rollout import AssistantTurn, RolloutConfig, Trajectory
from helpers.train import (
    MAX_TRAIN_CONTEXT_TOKENS,
    TrainConfig,
    TrainingDatum,
    add_config_arguments,
    batch_for_step,
    build_datum,
    build_training_datums,
    config_from_args,
    degenerate_groups,
    pack_micro_batches,
    padded_tokens,
    weight_micro_batch_for_global_mean,
)

EXAMPLE = SearchExample(id="q1", question="Who?", answers=["x"], data_source="nq")


def make_trajectory(segments, advantage=0.5, question_index=0):
    """segments: alternating context/completion lengths, e.g. [50, 20, 300, 8]."""
    full: list[int] = []
    turns = []
    next_token = 1
    for i in range(0, len(segments), 2):
        context = list(range(next_token, next_token + segments[i]))
        next_token += segments[i]
        full = full + context
        completion = list(range(next_token, next_token + segments[i + 1]))
        next_token += segments[i + 1]
        logprobs = [-0.01 * (t % 7 + 1) for t in completion]
        turns.append(AssistantTurn(prompt_tokens=list(full), completion_tokens=completion, logprobs=logprobs, text=""))
        full = full + completion
    trajectory = Trajectory(example=EXAMPLE, group_index=0, messages=[], question_index=question_index, turns=turns)
    trajectory.advantage = advantage
    return trajectory


def arrays(datum):
    inputs = datum.loss_fn_inputs
    return (
        np.asarray(datum.model_input.to_ints()),
        inputs["target_tokens"].to_numpy(),
        inputs["logprobs"].to_numpy(),
        inputs["advantages"].to_numpy(),
    )


def test_build_datum_masks_observations_and_shifts_once():
    # The seed's paper exercise: prompt 50 -> turn 20 -> observation 300 -> turn 8.
    trajectory = make_trajectory([50, 20, 300, 8], advantage=0.5)
    item = build_datum(trajectory)
    tokens, targets, logprobs, advantages = arrays(item.datum)
    assert item.length == len(tokens) == 50 + 20 + 300 + 8 - 1
    assert np.count_nonzero(advantages) == 28
    full = np.arange(1, 50 + 20 + 300 + 8 + 1)
    assert tokens.tolist() == full[:-1].tolist()
    assert targets.tolist() == full[1:].tolist()
    # Position p predicts full[p+1]: an assistant token exactly when the target is sampled.
    sampled = set(trajectory.turns[0].completion_tokens) | set(trajectory.turns[1].completion_tokens)
    for target, logprob, advantage in zip(targets, logprobs, advantages):
        if int(target) in sampled:
            assert advantage == pytest.approx(0.5)
            assert logprob == pytest.approx(-0.01 * (int(target) % 7 + 1))
        else:
            assert advantage == 0.0 and logprob == 0.0


def test_negative_advantage_is_carried_and_logprobs_match_turns():
    trajectory = make_trajectory([5, 3, 4, 2, 6, 1], advantage=-0.25)
    _, _, logprobs, advantages = arrays(build_datum(trajectory).datum)
    assert set(advantages[advantages != 0].tolist()) == {-0.25}
    expected = [lp for turn in trajectory.turns for lp in turn.logprobs]
    assert logprobs[advantages != 0] == pytest.approx(expected)


def test_build_datum_errors():
    with pytest.raises(ValueError, match="no assistant turns"):
        build_datum(Trajectory(example=EXAMPLE, group_index=0, messages=[]))
    bad = make_trajectory([3, 2])
    bad.turns[0].logprobs = bad.turns[0].logprobs[:-1]
    with pytest.raises(ValueError, match="logprobs"):
        build_datum(bad)
    broken = make_trajectory([3, 2, 4, 2])
    broken.turns[1].prompt_tokens[1] = 999_999  # re-rendered prompt: prefix no longer matches
    with pytest.raises(ValueError, match="does not continue"):
        build_datum(broken)
    empty = make_trajectory([3, 0])
    with pytest.raises(ValueError, match="no assistant tokens"):
        build_datum(empty)
    long = make_trajectory([MAX_TRAIN_CONTEXT_TOKENS, 2])
    with pytest.raises(ValueError, match="training context"):
        build_datum(long)
    assert build_datum(make_trajectory([MAX_TRAIN_CONTEXT_TOKENS - 1, 2])).length == MAX_TRAIN_CONTEXT_TOKENS


def test_build_training_datums_skips_zero_advantage():
    trajectories = [make_trajectory([4, 2], advantage=a) for a in (0.0, 0.5, -0.5, 0.0)]
    datums = build_training_datums(trajectories)
    assert len(datums) == 2
    assert sorted(float(arrays(d.datum)[3].min() + arrays(d.datum)[3].max()) for d in datums) == [-0.5, 0.5]


def test_degenerate_groups_counts_all_zero_groups():
    trajectories = [make_trajectory([2, 1], advantage=a, question_index=q) for q, a in
                    [(0, 0.0), (0, 0.0), (1, 0.5), (1, -0.5), (2, 0.0)]]
    assert degenerate_groups(trajectories) == (2, 3)


def fake(length: int) -> TrainingDatum:
    return build_datum(make_trajectory([length, 1]))


def test_pack_first_fit_decreasing_example():
    datums = [fake(n) for n in (10, 90, 40, 50, 20, 60)]  # lengths are n (n + 1 tokens - 1)
    batches = pack_micro_batches(datums, max_datums=3, max_tokens=200)
    assert [[d.length for d in b] for b in batches] == [[90, 60], [50, 40, 20], [10]]
    assert all(padded_tokens(b) <= 200 for b in batches)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=0, max_size=25),
    max_datums=st.integers(1, 6),
    max_tokens=st.integers(50, 800),
)
def test_pack_respects_caps_and_keeps_every_datum(lengths, max_datums, max_tokens):
    datums = [TrainingDatum(datum=None, length=n) for n in lengths]
    batches = pack_micro_batches(datums, max_datums=max_datums, max_tokens=max_tokens)
    packed = [id(d) for b in batches for d in b]
    assert sorted(packed) == sorted(id(d) for d in datums)
    for batch in batches:
        assert len(batch) <= max_datums
        assert padded_tokens(batch) <= max_tokens or len(batch) == 1
        assert [d.length for d in batch] == sorted((d.length for d in batch), reverse=True)


def test_weighting_scales_only_advantages():
    micro_batch = [fake(5), build_datum(make_trajectory([3, 4], advantage=-1.0))]
    weighted = weight_micro_batch_for_global_mean(micro_batch, total_samples=8)
    for original, new in zip(micro_batch, weighted):
        t0, g0, l0, a0 = arrays(original.datum)
        t1, g1, l1, a1 = arrays(new)
        assert t0.tolist() == t1.tolist() and g0.tolist() == g1.tolist()
        assert l0 == pytest.approx(l1)
        assert a1 == pytest.approx(a0 * 2 / 8)
    with pytest.raises(ValueError, match="total_samples"):
        weight_micro_batch_for_global_mean(micro_batch, total_samples=1)


def test_batch_for_step_is_deterministic_and_covers_each_epoch():
    examples = list(range(10))
    first = [batch_for_step(examples, s, 4, seed=3) for s in range(5)]
    again = [batch_for_step(examples, s, 4, seed=3) for s in range(5)]
    assert first == again
    flat = [x for b in first for x in b]
    assert sorted(flat[:10]) == examples and sorted(flat[10:20]) == examples
    assert first != [batch_for_step(examples, s, 4, seed=4) for s in range(5)]


def test_balance_sources_gives_each_source_its_share_and_cycles_the_small_one():
    from helpers.data import SearchExample

    examples = [SearchExample(id=f"n{i}", question="q", answers=["a"], data_source="nq") for i in range(20)]
    examples += [SearchExample(id=f"h{i}", question="q", answers=["a"], data_source="hotpotqa") for i in range(3)]
    batches = [batch_for_step(examples, s, 5, seed=1, balance_sources=True) for s in range(6)]
    assert batches == [batch_for_step(examples, s, 5, seed=1, balance_sources=True) for s in range(6)]
    for batch in batches:  # 5 = 3 + 2: the first source in name order takes the remainder
        assert [e.data_source for e in batch].count("hotpotqa") == 3
    hotpot = [e.id for b in batches for e in b if e.data_source == "hotpotqa"]
    assert sorted(hotpot[:3]) == ["h0", "h1", "h2"] and sorted(hotpot[3:6]) == ["h0", "h1", "h2"]
    plain = [e.data_source for s in range(6) for e in batch_for_step(examples, s, 5, seed=1)]
    assert plain.count("hotpotqa") < 18  # without it the batch follows the 20:3 mix
    one_source = examples[:20]
    assert batch_for_step(one_source, 2, 5, 1, balance_sources=True) == batch_for_step(one_source, 2, 5, 1)
    with pytest.raises(ValueError, match="questions_per_batch"):
        batch_for_step(examples, 0, 1, seed=1, balance_sources=True)


def test_cli_flags_map_to_config():
    import argparse

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, TrainConfig)
    args = parser.parse_args(
        ["--max-steps", "3", "--rollout.group-size", "4", "--learning-rate", "1e-4", "--backend", "pytrio",
         "--search-backend", "local", "--init-from", "ckpt", "--no-resume", "--max-minutes", "2.5",
         "--rollout.max-search-calls", "2"]
    )
    config = config_from_args(TrainConfig, args)
    assert (config.max_steps, config.rollout.group_size, config.learning_rate) == (3, 4, 1e-4)
    assert config.rollout.max_search_calls == 2 and config.rollout.max_assistant_turns == RolloutConfig().max_assistant_turns
    assert (config.backend, config.init_from, config.resume, config.max_minutes) == ("pytrio", "ckpt", False, 2.5)
    assert config.rollout_config(2).group_size == 4
    assert config.rollout_config(2).seed != config.rollout_config(3).seed
    with pytest.raises(SystemExit):  # the budgets live under rollout.: a flat name is an error
        parser.parse_args(["--max-search-calls", "2"])


def test_budgets_are_declared_once_and_an_unknown_name_is_an_error():
    from helpers.eval import EvalConfig
    from helpers.runs import updated

    assert TrainConfig().rollout == RolloutConfig()  # training uses the rollout's defaults as they are
    evaluation = EvalConfig().rollout
    assert (evaluation.temperature, evaluation.group_size) == (0.0, 1)  # greedy, one answer per question
    assert evaluation.max_trajectory_tokens == RolloutConfig().max_trajectory_tokens
    config = updated(TrainConfig(), rollout={"max_search_calls": 2}, learning_rate=1e-4)
    assert config.rollout.max_search_calls == 2 and config.rollout.group_size == RolloutConfig().group_size
    with pytest.raises(ValueError, match="RolloutConfig has no field \\['max_serach_calls'\\]"):
        updated(TrainConfig(), rollout={"max_serach_calls": 2})
    with pytest.raises(ValueError, match="no field"):
        updated(TrainConfig(), group_size=4)
    with pytest.raises(TypeError):
        TrainConfig(max_search_calls=2)
    assert TrainConfig(rollout={"group_size": 2}).rollout.group_size == 2  # a dict (JSON, presets) is read by name


def test_the_first_step_does_not_predict_the_time_of_later_steps():
    """It also compiles the decode step: a 227 s first step stopped a 5.5-minute run after one step."""
    from helpers.train import out_of_time

    budget = 330.0
    assert not out_of_time(227.0, [227.0], budget)
    assert not out_of_time(239.0, [227.0, 12.0], budget)
    assert out_of_time(320.0, [227.0, 12.0, 15.0, 14.0], budget)  # 320 + 15 > 330
    assert not out_of_time(300.0, [227.0, 12.0, 15.0, 14.0], budget)
    assert out_of_time(331.0, [227.0], budget)  # already over
    assert out_of_time(330.0, [], budget)
    assert not out_of_time(0.0, [], budget)


def test_on_a_cpu_the_first_step_predicts_the_next():
    """Nothing compiles on a CPU: an 845 s first step must stop a 15-minute run, not start a second."""
    from helpers.train import out_of_time

    assert out_of_time(845.0, [845.0], 900.0, first_compiles=False)
    assert not out_of_time(845.0, [845.0], 900.0, first_compiles=True)
    assert not out_of_time(100.0, [100.0], 900.0, first_compiles=False)
