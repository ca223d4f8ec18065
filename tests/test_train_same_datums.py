"""A GRPO step on the small model gives the same datums as the recorded step.

The fixture was recorded from the training step before it was split into stages (rollout,
score, advantages, datums); the rewards are fixed per branch so the groups carry signal even
though an untrained 135M model never answers right.

Sampling at temperature 1 is not reproducible across CPUs (a logit that differs in the fifth
decimal can flip one sampled token, and every later token with it), so the sampler here replays
the recorded completions: each prompt the rollout builds must be a prefix of a recorded
trajectory, and the answer is the recorded continuation with its logprobs. Everything from the
prompt to the datum is the code under test: prompts, stop handling, parsing, rewards,
advantages, stitching, datums and micro-batching, and the update runs for real.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from pathlib import Path

import numpy as np
import pytest

from fixtures.doubles import TinySearch
from helpers.data import SearchExample
from helpers.reward import GroupRewards

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parent / "fixtures" / "grpo_step_smollm2.json"
BRANCH_REWARDS = [1.0, 0.0, 0.0, 0.5]


def recorded_sequences(expected):
    """Each recorded trajectory as (tokens, sampled positions, logprob per position)."""
    recorded = []
    for want in expected["datums"]:
        tokens = want["input"] + want["target"][-1:]
        # target i predicts token i + 1; a sampled token is one that carries an advantage
        sampled = {i + 1 for i, advantage in enumerate(want["advantages"]) if advantage != 0}
        logprobs = {i + 1: lp for i, lp in enumerate(want["logprobs"])}
        recorded.append((tokens, sampled, logprobs))
    return recorded


class ReplaySampler:
    """A sampling client that answers each prompt with the recorded continuation(s)."""

    def __init__(self, recorded):
        self.recorded = recorded
        self.prompts = []

    def sample(self, prompt, num_samples, sampling_params):
        ids = prompt.to_ints()
        self.prompts.append(ids)
        matches = [r for r in self.recorded if r[0][:len(ids)] == ids and len(r[0]) > len(ids)]
        assert len(matches) == num_samples, (
            f"the rollout built a prompt ({len(ids)} tokens) that {len(matches)} recorded trajectories start "
            f"with, for {num_samples} samples: the prompt differs from the recorded step's")
        sequences = []
        for tokens, sampled, logprobs in matches:
            end = len(ids)
            while end < len(tokens) and end in sampled:
                end += 1
            assert end > len(ids), "the recorded trajectory has no sampled tokens after this prompt"
            sequences.append(SimpleNamespace(tokens=tokens[len(ids):end],
                                             logprobs=[logprobs[i] for i in range(len(ids), end)],
                                             stop_reason="stop", text=None))
        return SimpleNamespace(sequences=sequences)


def branch_reward(group):
    return GroupRewards([BRANCH_REWARDS[t.group_index] for t in group.trajectories])


def test_a_grpo_step_gives_the_recorded_datums(tmp_path, monkeypatch, small_model_name):
    import torch

    import helpers.train as train_module
    from helpers.train import TrainConfig, open_session, train_step

    torch.set_num_threads(2)
    expected = json.loads(FIXTURE.read_text())
    config = TrainConfig(
        model=small_model_name, backend="local", max_steps=1, questions_per_batch=2,
        rollout=dict(group_size=4, max_search_calls=1, max_assistant_turns=2, max_assistant_tokens=12,
                     max_tool_response_tokens=200, max_trajectory_tokens=1024),
        lora_rank=4, learning_rate=1e-3, save_every=0, seed=3,
        out=str(tmp_path / "run"), resume=False,
    )
    examples = [SearchExample(id="t1", question="What is the capital of France?", answers=["Paris"], data_source="nq"),
                SearchExample(id="t2", question="Who wrote Hamlet?", answers=["Shakespeare"], data_source="nq")]
    session = open_session(config, search_client=TinySearch(), examples=examples)
    replay = ReplaySampler(recorded_sequences(expected))
    exported = session.training_client.save_weights_and_get_sampling_client
    monkeypatch.setattr(session.training_client, "save_weights_and_get_sampling_client",
                        lambda *a, **k: exported(*a, **k) and replay)
    built = []
    original = train_module.build_training_datums
    monkeypatch.setattr(train_module, "build_training_datums",
                        lambda trajectories, *a, **k: built.append(original(trajectories, *a, **k)) or built[-1])
    metrics, groups = train_step(session.training_client, session.tokenizer, session.search_client, examples,
                                 config, 0, reward_fn=branch_reward)

    assert len(replay.prompts) == len(examples), "one first-turn request per question"
    trajectories = [t for group in groups for t in group.trajectories]
    assert [t.reward for t in trajectories] == expected["rewards"]
    assert [t.advantage for t in trajectories] == pytest.approx(expected["advantages"], abs=1e-12)
    assert [t.end_reason for t in trajectories] == expected["end_reasons"]
    assert [t.search_calls for t in trajectories] == expected["search_calls"]
    for key, value in expected["metrics"].items():
        assert metrics[key] == value, key
    (datums,) = built
    assert len(datums) == len(expected["datums"])
    for item, want in zip(datums, expected["datums"]):
        inputs = item.datum.loss_fn_inputs
        assert item.datum.model_input.to_ints() == want["input"]
        assert inputs["target_tokens"].to_numpy().tolist() == want["target"]
        np.testing.assert_allclose(inputs["logprobs"].to_numpy(), want["logprobs"], atol=1e-5)
        np.testing.assert_array_equal(inputs["advantages"].to_numpy(), np.asarray(want["advantages"], np.float32))
