"""The gated reward with group-anchored tool-call and length penalties (helpers.efficiency)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import efficiency as eff
from helpers.data import SearchExample
from helpers.advantages import assign_advantages
from helpers.reward import score
from helpers.rollout import AssistantTurn, Trajectory, groups_of
from helpers.train import build_training_datums

counts = st.lists(st.integers(0, 10), min_size=1, max_size=8)


@st.composite
def groups(draw, min_size=1, max_size=8):
    n = draw(st.integers(min_size, max_size))
    r_base = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    calls = draw(st.lists(st.integers(0, 10), min_size=n, max_size=n))
    failed = [draw(st.integers(0, c)) for c in calls]
    lengths = draw(st.lists(st.integers(1, 2000), min_size=n, max_size=n))
    refs = draw(st.lists(st.integers(1, 2000), min_size=n, max_size=n))
    prefs = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    return r_base, calls, failed, lengths, refs, prefs


# ---------------------------------------------------------------- tool-call penalty


def test_effective_calls_subtract_failures_and_never_go_negative():
    assert eff.effective_calls([3, 2, 0], [1, 0, 0]) == [2, 2, 0]
    assert eff.effective_calls([1], [4]) == [0]
    with pytest.raises(ValueError):
        eff.effective_calls([1, 2], [0])


@settings(deadline=None)  # a shared CPU can stall one example past hypothesis's 200 ms
@given(counts, st.data())
def test_baseline_lies_between_min_and_ceil_mean_of_winners(calls, data):
    winners = data.draw(st.lists(st.booleans(), min_size=len(calls), max_size=len(calls)))
    seed = data.draw(st.integers(0, 2**32 - 1))
    b = eff.sample_tool_baseline(calls, winners, seed)
    won = [c for c, w in zip(calls, winners) if w]
    if not won:
        assert b is None
    else:
        assert min(won) <= b <= math.ceil(sum(won) / len(won))
        assert isinstance(b, int)


def test_baseline_is_an_integer_uniform_covering_both_ends():
    calls, winners = [1, 2, 4, 6], [True, True, True, False]  # winners 1,2,4: range 1..ceil(7/3)=3
    rng = np.random.default_rng(0)
    draws = [eff.sample_tool_baseline(calls, winners, rng) for _ in range(3000)]
    values, freq = np.unique(draws, return_counts=True)
    assert values.tolist() == [1, 2, 3]
    assert np.all(np.abs(freq / 3000 - 1 / 3) < 0.04)


def test_same_seed_same_baseline():
    calls, winners = [0, 3, 5, 9, 2], [True, True, True, True, False]
    assert {eff.sample_tool_baseline(calls, winners, 7) for _ in range(5)} == {
        eff.sample_tool_baseline(calls, winners, 7)
    }


def test_tool_penalty_matches_formula_by_hand():
    # winners get alpha_win * (1 - e^-Delta); the rest alpha_lose * (1 - e^-Delta) + beta_lose
    pens = eff.tool_penalties([1, 3, 0, 4], [True, True, False, False], baseline=1,
                              alpha_win=1.0, alpha_lose=0.5, beta_lose=0.1)
    assert pens[0] == 0.0
    assert pens[1] == pytest.approx(1 - math.exp(-2))
    assert pens[2] == pytest.approx(0.1)
    assert pens[3] == pytest.approx(0.5 * (1 - math.exp(-3)) + 0.1)


@given(counts, st.integers(0, 10), st.floats(0, 2), st.floats(0, 2), st.floats(0, 1))
def test_tool_penalty_is_bounded_and_grows_with_calls(calls, baseline, aw, al, bl):
    for won in (True, False):
        pens = eff.tool_penalties(calls, [won] * len(calls), baseline, aw, al, bl)
        low, high = (0.0, aw) if won else (bl, al + bl)
        assert all(low - 1e-12 <= p <= high + 1e-12 for p in pens)
        order = np.argsort(calls, kind="stable")
        ordered = [pens[i] for i in order]
        assert all(a <= b + 1e-12 for a, b in zip(ordered, ordered[1:]))


def test_group_without_winner_pays_only_the_constant_beta():
    rows = eff.score_group([0, 0, 0], calls=[0, 2, 9], lengths=[50, 50, 50],
                           config=eff.EfficiencyConfig(lambda_len=0.0, beta_lose=0.3))
    assert {r.tool_baseline for r in rows} == {None}
    assert [r.pen_tool for r in rows] == [0.3, 0.3, 0.3]
    # the constant cancels in the group baseline: searching more is not punished here
    assert [r.advantage for r in rows] == pytest.approx([0.0, 0.0, 0.0])


def test_failed_searches_are_not_charged():
    cfg = eff.EfficiencyConfig(lambda_len=0.0)
    rows = eff.score_group([1, 1], calls=[1, 4], failed=[0, 3], lengths=[10, 10], config=cfg)
    assert [r.effective_calls for r in rows] == [1, 1]
    assert rows[0].reward == rows[1].reward == 1.0
    rows = eff.score_group([1, 1], calls=[1, 4], lengths=[10, 10], config=cfg)
    assert rows[1].reward < rows[0].reward


# ---------------------------------------------------------------- length penalty


def test_length_baselines_average_references_of_preferred_winners_and_the_rest():
    assert eff.length_baselines([100, 200, 50, 30], [True, True, False, False]) == (150, 40)
    assert eff.length_baselines([100, 200], [False, False]) == (None, 150)
    assert eff.length_baselines([100, 200], [True, True]) == (150, None)


def test_length_penalty_by_hand():
    refs = [100, 100, 100, 100]
    pens = eff.length_penalties([150, 80, 40, 101], [True, True, False, False], refs)
    assert pens[0] == 1.0  # longer than every reference: hard cap
    assert pens[1] == 0.0  # a winner shorter than b_win pays nothing
    assert pens[2] == pytest.approx(1 - math.exp(-(100 / 40 - 1)))  # a terse loser pays
    assert pens[3] == 1.0
    # b_win = 200 (the preferred winner's reference), b_lose = 100
    pens = eff.length_penalties([190, 80], [True, False], [200, 100])
    assert pens[0] == 0.0
    assert pens[1] == pytest.approx(1 - math.exp(-(100 / 80 - 1)))
    pens = eff.length_penalties([150, 80], [True, False], [100, 160])
    assert pens[0] == pytest.approx(1 - math.exp(-(150 / 100 - 1)))  # a verbose winner pays
    assert pens[1] == pytest.approx(1 - math.exp(-(160 / 80 - 1)))


@given(groups())
def test_length_penalty_in_unit_interval_and_hard_cap(group):
    _, _, _, lengths, refs, _ = group
    preferred = [bool(i % 2) for i in range(len(lengths))]
    pens = eff.length_penalties(lengths, preferred, refs)
    assert all(0.0 <= p <= 1.0 for p in pens)
    for length, p in zip(lengths, pens):
        if length > max(refs):
            assert p == 1.0


def test_length_penalty_needs_one_positive_reference_per_member():
    with pytest.raises(ValueError, match="one reference length"):
        eff.length_penalties([10, 20], [True, False], [10])
    with pytest.raises(ValueError, match="positive"):
        eff.length_penalties([10], [True], [0])


def test_preference_below_threshold_moves_a_winner_to_the_short_side():
    # a correct but dispreferred answer is judged like a loser on length: short is penalised
    cfg = eff.EfficiencyConfig(lambda_tool=0.0, lambda_len=1.0)
    rows = eff.score_group([1, 1], calls=[0, 0], lengths=[20, 100], preferences=[0.2, 1.0],
                           reference_lengths=[100, 100], config=cfg)
    assert rows[0].pen_len == pytest.approx(1 - math.exp(-(100 / 20 - 1)))
    assert rows[0].reward == pytest.approx(0.2 - rows[0].pen_len)


# ---------------------------------------------------------------- the gated reward


def test_gate_rejects_out_of_range_inputs():
    with pytest.raises(ValueError):
        eff.gated_reward(0.5, 1.0, 0.0)
    with pytest.raises(ValueError):
        eff.gated_reward(1, 1.5, 0.0)
    with pytest.raises(ValueError):
        eff.EfficiencyConfig(lambda_tool=-1)


@settings(max_examples=200)
@given(groups(), st.integers(0, 1000))
def test_gated_reward_properties(group, seed):
    r_base, calls, failed, lengths, refs, prefs = group
    cfg = eff.EfficiencyConfig(seed=seed)
    rows = eff.score_group(r_base, calls, lengths, failed=failed, preferences=prefs,
                           reference_lengths=refs, config=cfg)
    for row, r, s in zip(rows, r_base, prefs):
        assert row.pen_eff == pytest.approx(cfg.lambda_tool * row.pen_tool
                                            + cfg.lambda_len * row.pen_len)
        assert row.reward == pytest.approx(r * s - row.pen_eff)
        if r == 0:
            assert row.reward <= 0.0  # the gate: no preference credit without a correct answer
    assert sum(row.advantage for row in rows) == pytest.approx(0.0, abs=1e-9)
    # with s = 1 and penalties that cannot reach 1, every correct answer outranks every wrong one
    rows = eff.score_group(r_base, calls, lengths, failed=failed, reference_lengths=refs,
                           config=cfg)
    won = [row.reward for row in rows if row.r_base]
    lost = [row.reward for row in rows if not row.r_base]
    if won and lost:
        assert min(won) > max(lost)


def test_score_group_is_reproducible_and_seed_dependent():
    args = dict(r_base=[1, 1, 1, 0], calls=[0, 2, 5, 3], lengths=[30, 40, 50, 60])
    a = eff.score_group(**args, config=eff.EfficiencyConfig(seed=1))
    b = eff.score_group(**args, config=eff.EfficiencyConfig(seed=1))
    assert [r.reward for r in a] == [r.reward for r in b]
    baselines = {eff.score_group(**args, config=eff.EfficiencyConfig(seed=s))[0].tool_baseline
                 for s in range(40)}
    assert baselines == {0, 1, 2, 3}  # min 0 .. ceil(7/3) = 3


# ---------------------------------------------------------------- on Trajectory objects


def make_trajectory(q, exact, calls, n_tokens, failed=None):
    t = Trajectory(example=SearchExample("id", "q?", ["Paris"], "nq"), group_index=0, messages=[],
                   question_index=q)
    t.turns = [AssistantTurn(prompt_tokens=[1], completion_tokens=[5] * n_tokens,
                             logprobs=[-0.1] * n_tokens, text="x")]
    t.search_calls, t.exact_match = calls, exact
    t.end_reason, t.final_text, t.valid_format = "answer", "Answer: Paris" if exact else "Answer: Lyon", True
    t.reward = 1.0 if exact else 0.0
    if failed is not None:
        t.failed_searches = failed
    return t


def test_the_gated_reward_function_rewards_a_group_of_trajectories_idempotently():
    group = [make_trajectory(0, True, 1, 40), make_trajectory(0, True, 4, 40),
             make_trajectory(0, False, 2, 40)]
    reward = eff.GatedReward(eff.EfficiencyConfig(lambda_len=0.0))
    groups = groups_of(group)
    terms = score(groups, reward)
    rows = reward.breakdown(groups[0])
    assert [t.reward for t in group] == [r.reward for r in rows]
    assert [r.length for r in rows] == [40, 40, 40] and terms["eff/length_mean"] == 40
    assert group[0].reward > group[1].reward > group[2].reward  # extra searches cost a winner
    assign_advantages(groups)
    assert [t.advantage for t in group] == pytest.approx([r.advantage for r in rows])
    assert sum(t.advantage for t in group) == pytest.approx(0.0)
    score(groups, reward)  # r_base comes from exact_match, not from the reward: the same again
    assert [t.reward for t in group] == [r.reward for r in rows]
    plain = eff.GatedReward(eff.EfficiencyConfig(lambda_len=0.0), use=False)
    assert plain(groups[0]).rewards == [1.0, 1.0, 0.0]  # exact match, gated terms only logged
    assert plain(groups[0]).components["eff/pen_tool_mean"] == [r.pen_tool for r in rows]


def test_failed_search_count_is_read_from_the_trajectory():
    t = make_trajectory(0, True, 3, 10, failed=2)
    assert eff.failed_calls_of(t) == 2
    assert eff.failed_calls_of(make_trajectory(0, True, 3, 10)) == 0


def test_each_group_draws_its_own_baseline_and_uses_its_reference_lengths():
    batch = [make_trajectory(q, q == 0 or i == 0, i, 10 + 10 * i) for q in (0, 1) for i in range(3)]
    batch[3].example = SearchExample("other", "q?", ["Paris"], "nq")
    reference = SimpleNamespace(for_groups=lambda groups: {"id": [20, 20, 20], "other": [100, 100, 100]})
    reward = eff.GatedReward(eff.EfficiencyConfig(), reference=reference)
    groups = groups_of(batch, step=3)
    for g in groups:
        g.example = g.trajectories[0].example
    score(groups, reward)
    rows = [row for g in groups for row in reward.breakdown(g)]
    assert [r.reference_length for r in rows] == [20, 20, 20, 100, 100, 100]
    for g in groups:  # seeded by (seed, step, question): reproducible, one baseline per group
        expected = eff.score_group(**eff.group_numbers(g.trajectories), reference_lengths=[20, 20, 20]
                                   if g.index == 0 else [100, 100, 100], rng=np.random.default_rng([0, 3, g.index]))
        assert [t.reward for t in g.trajectories] == [r.reward for r in expected]


def test_a_group_whose_gated_rewards_are_all_equal_yields_no_datums():
    """Eight losers pay the same beta_lose (reward -0.1 each): their float mean is 1.4e-17 off -0.1,
    and advantages of that size would pass a `!= 0` filter; they must be exactly 0."""
    group = [make_trajectory(0, False, 1, 30) for _ in range(8)]
    groups = groups_of(group)
    score(groups, eff.GatedReward(eff.EfficiencyConfig(lambda_tool=1.0, lambda_len=0.0)))
    rewards = [t.reward for t in group]
    assert rewards == [pytest.approx(-0.1)] * 8 and len(set(rewards)) == 1
    assert sum(rewards) / len(rewards) != rewards[0]  # the float residue the exact-zero rule removes
    assert assign_advantages(groups) == 1
    assert [t.advantage for t in group] == [0.0] * 8
    assert build_training_datums(group) == []
    rows = eff.score_group([0] * 8, calls=[1] * 8, lengths=[30] * 8,
                           config=eff.EfficiencyConfig(lambda_tool=1.0, lambda_len=0.0))
    assert [r.advantage for r in rows] == [0.0] * 8


def test_format_penalty_is_off_by_default_and_charges_broken_formats_when_on():
    args = dict(r_base=[1, 0, 0], calls=[1, 1, 1], lengths=[20, 20, 20],
                valid_format=[True, True, False])
    off = eff.score_group(**args)
    assert off[1].reward == off[2].reward
    on = eff.score_group(**args, config=eff.EfficiencyConfig(format_penalty=0.1))
    assert on[2].reward == pytest.approx(on[1].reward - 0.1)
    assert on[0].reward == off[0].reward


# ---------------------------------------------------------------- widgets and exercises


def test_penalty_explorer_recomputes_on_slider_moves_and_escapes_labels():
    numbers = dict(r_base=[1, 1, 0], calls=[1, 3, 2], lengths=[40, 60, 30])
    w = eff.penalty_explorer(numbers=numbers, labels=["a", "<script>x</script>", "c"])
    table = w.children[-1].value
    assert "<script>" not in table and "&lt;script&gt;" in table
    before = [r.reward for r in w.rows]
    w.sliders["lambda_tool"].value = 0.0
    w.sliders["lambda_len"].value = 0.0
    assert [r.reward for r in w.rows] == [1.0, 1.0, 0.0]
    assert before[1] < 1.0
    with pytest.raises(ValueError, match="exactly one"):
        eff.penalty_explorer()


def test_exercise_checkers_accept_the_formula_and_reject_wrong_answers(capsys):
    from helpers.checkers import efficiency as exercises

    good = eff.tool_penalties([1, 2, 4, 3], [True, True, True, False], 2, 1.0, 0.5, 0.1)
    assert exercises.check_tool_penalties(good)
    assert not exercises.check_tool_penalties([0, 0, 0, 0])
    assert not exercises.check_tool_penalties(None)
    assert exercises.check_length_penalty(1 - math.exp(-0.5))
    assert not exercises.check_length_penalty(1.0)
    assert exercises.check_no_winner_advantages([0, 0, 0, 0])
    assert not exercises.check_no_winner_advantages([0.1, -0.1, 0, 0])
    points = [eff.BudgetPoint("base", b, 2, acc, 1, b, 5, 50, 55 + 10 * b, 0) for b, acc in
              [(0, 0.0), (1, 0.5), (2, 0.5)]]
    assert exercises.check_best_budget(points, "base", 1) and not exercises.check_best_budget(points, "base", 2)
    assert exercises.check_tokens_per_correct(points, "base", 2, 75 / 0.5)
    assert exercises.check_tokens_per_correct(points, "base", 0, float("inf"))
    assert exercises.check_turns_for_budget(3, 4) and not exercises.check_turns_for_budget(3, 3)
    out = capsys.readouterr().out.splitlines()
    assert "correct" in out and any(line.startswith("not yet") for line in out)


def test_budget_curve_widget_switches_metric():
    import matplotlib

    matplotlib.use("Agg")
    points = [eff.BudgetPoint(p, b, 2, 0.1 * b, 1, b, 5, 50, 55, 0) for p in ("base", "sft") for b in range(3)]
    w = eff.budget_curve_widget(points)
    assert w.controls["policies"].value == ("base", "sft")
    w.controls["metric"].value = "tokens_per_question"
    w.controls["policies"].value = ("sft",)
