"""Token-level ratios and sampler/trainer KL (helpers.mismatch)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import mismatch as mm
from helpers.data import SearchExample
from helpers.rollout import AssistantTurn, Trajectory

logps = st.lists(st.floats(-20, -1e-3), min_size=1, max_size=50)


def test_ratios_and_log_ratios_by_hand():
    new, old = [-1.0, -2.0, -0.5], [-1.0, -1.5, -1.0]
    assert mm.log_ratios(new, old).tolist() == pytest.approx([0.0, -0.5, 0.5])
    assert mm.token_ratios(new, old).tolist() == pytest.approx([1.0, math.exp(-0.5), math.exp(0.5)])
    with pytest.raises(ValueError, match="aligned"):
        mm.log_ratios([-1.0], [-1.0, -2.0])
    with pytest.raises(ValueError, match="finite"):
        mm.log_ratios([-np.inf], [-1.0])


@given(logps)
def test_identical_logprobs_mean_no_mismatch(values):
    s = mm.mismatch_stats(values, values)
    assert s.kl_k1 == 0.0 and s.kl_k3 == 0.0
    assert s.ratio_min == s.ratio_max == 1.0
    assert s.share_outside_band == 0.0


@given(st.lists(st.tuples(st.floats(-20, -1e-3), st.floats(-3, 3)), min_size=1, max_size=50))
def test_k3_is_never_negative_and_quantiles_are_ordered(pairs):
    old = [o for o, _ in pairs]
    new = [o + d for o, d in pairs]
    s = mm.mismatch_stats(new, old)
    assert s.kl_k3 >= 0.0
    q = [s.ratio_quantiles[k] for k in ("p1", "p5", "p25", "p50", "p75", "p95", "p99")]
    assert all(a <= b + 1e-12 for a, b in zip(q, q[1:]))
    assert s.ratio_min <= q[0] and q[-1] <= s.ratio_max
    assert s.tokens == len(pairs)


def test_k1_and_k3_estimate_the_exact_kl_on_tokens_drawn_from_the_sampler():
    rng = np.random.default_rng(0)
    mu = np.array([0.5, 0.3, 0.15, 0.05])
    pi = np.array([0.45, 0.33, 0.14, 0.08])
    exact = float(np.sum(mu * np.log(mu / pi)))
    tokens = rng.choice(4, size=200_000, p=mu)
    s = mm.mismatch_stats(np.log(pi[tokens]), np.log(mu[tokens]))
    assert s.kl_k1 == pytest.approx(exact, rel=0.1)
    assert s.kl_k3 == pytest.approx(exact, rel=0.1)


def test_truncated_weights_and_the_is_objective():
    r = np.array([0.5, 1.0, 3.0])
    assert mm.truncated_is_weights(r, cap=2.0).tolist() == [0.5, 1.0, 2.0]
    assert mm.is_weighted_objective(r, [1.0, 1.0, 1.0]) == pytest.approx(1.5)
    assert mm.is_weighted_objective(r, [1.0, 1.0, 1.0], cap=2.0) == pytest.approx(3.5 / 3)
    assert mm.is_weighted_objective(np.ones(3), [1.0, -1.0, 2.0]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        mm.truncated_is_weights(r, cap=0)


def make_trajectory():
    t = Trajectory(example=SearchExample("id", "q?", ["a"], "nq"), group_index=0, messages=[])
    t.turns = [
        AssistantTurn(prompt_tokens=[1, 2, 3], completion_tokens=[10, 11], logprobs=[-0.1, -0.2], text=""),
        # the next prompt continues: the two sampled tokens, then an observation 7, 8
        AssistantTurn(prompt_tokens=[1, 2, 3, 10, 11, 7, 8], completion_tokens=[12, 13, 14],
                      logprobs=[-0.3, -0.4, -0.5], text=""),
    ]
    t.advantage = 1.0
    return t


def test_sampled_positions_match_the_datum_layout():
    from helpers.train import build_datum

    t = make_trajectory()
    positions = mm.sampled_positions(t)
    assert positions == [2, 3, 6, 7, 8]
    datum = build_datum(t).datum
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    old = datum.loss_fn_inputs["logprobs"].to_numpy()
    assert targets[positions].tolist() == [10, 11, 12, 13, 14]
    assert old[positions].tolist() == pytest.approx(mm.sampler_logprobs_of(t))
    others = np.delete(old, positions)
    assert np.all(others == 0.0)


def test_sampled_positions_reject_a_broken_continuation():
    t = make_trajectory()
    t.turns[1].prompt_tokens = [1, 2, 3, 99, 11, 7]
    with pytest.raises(ValueError, match="continue"):
        mm.sampled_positions(t)


class FakeTrainingClient:
    """Test double of TrainingClient.forward: target logprobs = sampler's + a known shift."""

    def __init__(self, shift):
        self.shift = shift
        self.calls = 0

    def forward(self, datums, loss_fn):
        self.calls += 1
        outputs = []
        for d in datums:
            old = d.loss_fn_inputs["logprobs"].to_numpy().astype(np.float64)
            outputs.append({"logprobs": np.where(old != 0, old + self.shift, -5.0)})
        return {"loss_fn_outputs": outputs}


def test_measure_step_aligns_trainer_logprobs_with_sampled_tokens():
    client = FakeTrainingClient(shift=0.01)
    stats, new, old = mm.measure_step(client, [make_trajectory(), make_trajectory()], step=4)
    assert client.calls == 1
    assert stats.step == 4 and stats.tokens == 10
    assert (new - old).tolist() == pytest.approx([0.01] * 10, abs=1e-6)
    assert stats.kl_k1 == pytest.approx(-0.01, abs=1e-6)
    assert stats.kl_k3 == pytest.approx(math.exp(0.01) - 1 - 0.01, rel=1e-3)


def test_history_keeps_one_row_per_step_and_plots():
    import matplotlib

    matplotlib.use("Agg")
    h = mm.MismatchHistory(keep_per_step=3)
    rng = np.random.default_rng(1)
    for step in range(3):
        old = -rng.random(10)
        h.add(step, old + rng.normal(0, 0.01 * (step + 1), 10), old)
    rows = h.rows()
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[2]["mean_abs_log_ratio"] > rows[0]["mean_abs_log_ratio"]
    assert all(len(v) == 3 for v in h.log_ratios.values())
    ax = h.plot()
    assert len(ax) == 2


@pytest.mark.slow
def test_bf16_scoring_differs_from_fp32_on_the_same_tokens(small_model_name):
    import torch

    torch.set_num_threads(2)
    result = mm.precision_mismatch(small_model_name, ["The Eiffel Tower is in Paris, France."])
    stats = result["stats"]
    assert stats.tokens == len(result["trainer_logprobs"]) > 5
    assert stats.mean_abs_log_ratio > 1e-4  # bf16 rounding is visible per token
    assert 0.0 < stats.kl_k3 < 0.1  # but the two distributions stay close


def test_history_round_trips_through_metrics_rows():
    h = mm.MismatchHistory()
    h.add(0, [-1.0, -2.0, -0.3], [-1.1, -1.9, -0.3])
    s = h.steps[0]
    row = {"step": 0, **{f"mismatch/{k}": getattr(s, k) for k in
                         ("tokens", "kl_k1", "kl_k3", "mean_abs_log_ratio", "max_abs_log_ratio", "share_outside_band")},
           **{f"mismatch/ratio_{k}": v for k, v in s.ratio_quantiles.items()}}
    back = mm.MismatchHistory.from_metrics([row, {"step": 1}])  # rows without mismatch are skipped
    assert len(back.steps) == 1
    assert back.steps[0].kl_k3 == s.kl_k3 and back.steps[0].tokens == 3
    assert back.steps[0].ratio_quantiles == s.ratio_quantiles


def test_is_explorer_reports_objectives_and_truncation():
    w = mm.is_weight_explorer([-1.1, -0.5, -1.8], [-1.0, -0.5, -2.0], [1.0, 1.0, -1.0])
    text = w.children[-1].value
    assert "+0.333333" in text  # no correction: mean of the advantages
    w.controls["cap"].value = 1.1
    assert "0.3333" in w.children[-1].value  # one token in three is above the cap


def test_mismatch_checkers(capsys):
    from helpers.checkers import mismatch as exercises

    r = mm.token_ratios(exercises.EXERCISE_TRAINER, exercises.EXERCISE_SAMPLER)
    assert exercises.check_ratios(r) and not exercises.check_ratios([1, 1, 1])
    assert exercises.check_k3(mm.kl_k3(np.log(r))) and not exercises.check_k3(0.5)
    assert exercises.check_truncated(np.minimum(r, 1.1)) and not exercises.check_truncated(r)


@pytest.mark.slow
def test_a_trainer_loaded_from_the_policys_adapter_scores_its_samples_as_the_sampler_did(monkeypatch):
    """Notebook 13 measures the mismatch on notebook 05's rollout, which the trained policy sampled:
    a trainer created from that policy's adapter is the sampler's model; a fresh one is not."""
    import torch

    from helpers.engine import connect
    from helpers.course.policies import load_policy, unavailable_reason
    from helpers.rollout import rollout_batch
    from helpers.running_example import RUNNING_EXAMPLE
    from helpers.widgets.budgets import budgets
    from helpers.widgets.course import rollout_config, search_client

    monkeypatch.setenv("COURSE_PROFILE", "full")
    assert unavailable_reason("sft_grpo") is None, unavailable_reason("sft_grpo")
    torch.set_num_threads(2)
    policy = load_policy("sft_grpo")
    config = rollout_config(budgets("full"), seed=0, group_size=1, max_search_calls=1, max_assistant_turns=2,
                            max_assistant_tokens=48)
    rollout = list(rollout_batch(policy.sampler, policy.tokenizer, search_client(), [RUNNING_EXAMPLE], config,
                                 progress=False))
    service = connect()
    same, _, _ = mm.measure_step(service.create_training_client_from_state(policy.path), rollout)
    fresh, _, _ = mm.measure_step(service.create_lora_training_client(base_model=policy.model, rank=8, seed=0), rollout)
    assert same.tokens > 0 and same.max_abs_log_ratio < 1e-3, same
    assert fresh.max_abs_log_ratio > 100 * max(same.max_abs_log_ratio, 1e-6), (same, fresh)
