"""The gated reward inside the one GRPO step (helpers.train.train_step), on test doubles."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from fixtures.doubles import FakeSearchClient, ScriptedSamplingClient, call

from helpers import efficiency as eff
from helpers import mismatch as mm
from helpers.data import SearchExample
from helpers.models import load_tokenizer
from helpers.runs import RunDir
from helpers.train import TrainConfig, TrainingSession, train_step


def branchy(prompt: str, index: int) -> str:
    """Branch i of the group searches i times, then answers; only searching branches are right."""
    done = prompt.count("<tool_response>")
    if done == 0:
        return "Answer: London" if index == 0 else call(f"b{index} q0")
    branch = int(re.findall(r"b(\d) q", prompt)[-1])
    return call(f"b{branch} q{done}") if done < branch else "Answer: Paris"


class FakeTrainer:
    """TrainingClient double: a scripted sampler, and a trainer whose logprobs are the sampler's
    shifted by a known amount; records what forward_backward was given."""

    def __init__(self, tokenizer, shift=0.02):
        self.tokenizer = tokenizer
        self.shift = shift
        self.sent = []
        self.steps = 0

    def save_weights_and_get_sampling_client(self):
        return ScriptedSamplingClient(self.tokenizer, branchy)

    def _outputs(self, datums):
        outputs = []
        for d in datums:
            old = d.loss_fn_inputs["logprobs"].to_numpy().astype(np.float64)
            outputs.append({"logprobs": np.where(old != 0, old + self.shift, -3.0)})
        return SimpleNamespace(loss_fn_outputs=outputs, metrics={"loss_sum": 0.0})

    def forward(self, datums, loss_fn="cross_entropy"):
        return self._outputs(datums)

    def forward_backward(self, datums, loss_fn="importance_sampling"):
        self.sent.extend(datums)
        return self._outputs(datums)

    def optim_step(self, adam):
        self.steps += 1

    def save_state(self, name):
        return SimpleNamespace(path=f"fake://{name}")

    def save_weights_for_sampler(self, name):
        return SimpleNamespace(path=f"fake://{name}")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2-135m")


def session(tokenizer, tmp_path=None, **overrides):
    config = TrainConfig(model="smollm2-135m", questions_per_batch=1, rollout=dict(
        group_size=4, max_search_calls=4, max_assistant_turns=6, max_assistant_tokens=64), **overrides)
    run = RunDir(tmp_path or config.out) if tmp_path else None
    return TrainingSession(config, None, FakeTrainer(tokenizer), tokenizer, FakeSearchClient(), list(BATCH), run)


def step(s, reward, **kwargs):
    """One GRPO step of a comparison run: the one training step with the comparison's reward."""
    reward_fn = eff.comparison_reward(reward, eff.EfficiencyConfig(format_penalty=0.1))
    return train_step(s.training_client, s.tokenizer, s.search_client, BATCH, s.config, 0, reward_fn=reward_fn,
                      **kwargs)


BATCH = [SearchExample("q0", "Which city?", ["Paris"], "nq")]


def trained_advantages(trainer):
    """The advantage each datum carried into forward_backward (constant over its sampled tokens).

    One micro-batch here, so its weight n_k / N is 1 and the values are the trajectories' own."""
    out = []
    for d in trainer.sent:
        a = d.loss_fn_inputs["advantages"].to_numpy()
        out.append(float(a[a != 0][0]) if np.any(a != 0) else 0.0)
    return out


def test_plain_reward_treats_every_winner_alike(tokenizer):
    s = session(tokenizer)
    metrics, groups = step(s, "exact_match")
    trajectories = groups[0].trajectories
    assert [t.search_calls for t in trajectories] == [0, 1, 2, 3]
    assert [t.exact_match for t in trajectories] == [False, True, True, True]
    assert [t.reward for t in trajectories] == [0.0, 1.0, 1.0, 1.0]
    adv = [t.advantage for t in trajectories]
    assert adv[1] == adv[2] == adv[3] > 0 > adv[0]
    assert sorted(trained_advantages(s.training_client)) == pytest.approx(sorted(adv))
    assert s.training_client.steps == 1
    # the gated terms are still logged for comparison, without touching the rewards used
    assert metrics["eff/pen_tool_mean"] > 0
    assert metrics["reward_mean"] == pytest.approx(0.75)


def test_gated_reward_ranks_the_frugal_winner_first_and_logs_the_mismatch(tokenizer):
    s = session(tokenizer)
    history = mm.MismatchHistory()
    metrics, groups = step(s, "gated", observers=[mm.MismatchObserver(history)])
    trajectories = groups[0].trajectories
    rewards = [t.reward for t in trajectories]
    assert rewards[1] > rewards[3] and rewards[2] >= rewards[3]
    assert rewards[0] < 0
    adv = [t.advantage for t in trajectories]
    assert adv[1] > adv[3]
    assert sorted(trained_advantages(s.training_client)) == pytest.approx(sorted(adv), abs=1e-6)
    assert sum(t.advantage for t in trajectories) == pytest.approx(0.0, abs=1e-6)
    assert metrics["mismatch/kl_k1"] == pytest.approx(-0.02, abs=1e-5)
    assert metrics["mismatch/ratio_p50"] == pytest.approx(np.exp(0.02), rel=1e-4)
    assert history.steps[0].tokens == sum(len(x.completion_tokens) for t in trajectories for x in t.turns)


def test_unknown_reward_is_refused(tokenizer):
    with pytest.raises(ValueError, match="reward must be one of"):
        eff.comparison_reward("vibes", eff.EfficiencyConfig())


def test_train_with_reward_logs_every_step_and_uses_reference_lengths(tokenizer, tmp_path):
    s = session(tokenizer, max_steps=2, out=str(tmp_path / "gated"))
    summary = eff.train_with_reward(s.config, "gated", session=s, length_reference="initial", progress=False,
                                    work=str(tmp_path / "work" / "gated"))
    rows = eff.load_metrics(tmp_path / "gated")
    assert [r["step"] for r in rows] == [0, 1]
    assert summary["steps_done"] == 2 and summary["sampler_path"] == "fake://gated-final"
    assert (tmp_path / "gated" / "summary.json").exists()
    assert (tmp_path / "gated" / "log_ratios.npz").exists()
    assert all("mismatch/kl_k3" in r and "eff/pen_len_mean" in r for r in rows)
    with pytest.raises(ValueError, match="length_reference"):
        eff.train_with_reward(s.config, "gated", session=s, length_reference="nope", progress=False,
                              work=str(tmp_path / "work" / "gated"))


def test_reference_lengths_are_sampled_once_per_question(tokenizer):
    from helpers.rollout import RolloutConfig

    sampler = ScriptedSamplingClient(tokenizer, branchy)
    ref = eff.ReferenceLengths(sampler, tokenizer, FakeSearchClient())
    cfg = RolloutConfig(group_size=4, max_search_calls=4)
    first = ref.for_batch(BATCH, cfg)
    calls = sampler.calls
    again = ref.for_batch(BATCH + BATCH, cfg)
    assert sampler.calls == calls  # cached
    assert len(first[0]) == 4 and again[1] == first[0]
    assert first[0][3] > first[0][1]  # the branch that searched three times wrote more


def test_compare_command_runs_each_reward_into_its_own_folder(monkeypatch, tmp_path):
    seen = []

    def fake_train(config, reward, *, efficiency, length_reference):
        seen.append((reward, config.out, config.max_steps, efficiency.lambda_tool, length_reference))
        return {"reward": reward}

    monkeypatch.setattr(eff, "train_with_reward", fake_train)
    eff.main(["compare", "--max-steps", "3", "--out", str(tmp_path), "--lambda-tool", "0.3",
              "--length-reference", "initial"])
    assert seen == [("exact_match", str(tmp_path / "exact_match"), 3, 0.3, "initial"),
                    ("gated", str(tmp_path / "gated"), 3, 0.3, "initial")]
