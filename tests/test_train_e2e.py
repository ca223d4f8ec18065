"""One full GRPO step end to end on the small model: rollout -> datums -> micro-batches -> update.

Real engine, real rollout, real tokenizer. Only the reward is fixed (branch 0 right, branch 1
wrong) so the single group is not degenerate: an untrained 135M model with a 6-token budget
never writes a valid answer, and a degenerate group would train nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.doubles import TinySearch
from helpers.data import SearchExample
from helpers.reward import GroupRewards
from helpers.runs import RunDir

pytestmark = pytest.mark.slow


def fixed_reward(group):
    return GroupRewards([1.0 if t.group_index == 0 else 0.0 for t in group.trajectories])


def test_one_grpo_step_updates_the_policy_and_resumes(tmp_path, monkeypatch, small_model_name):
    import torch

    torch.set_num_threads(2)
    from helpers.train import TrainConfig, open_session, train

    config = TrainConfig(
        model=small_model_name, backend="local", max_steps=1, questions_per_batch=1,
        rollout=dict(group_size=2, max_search_calls=1, max_assistant_turns=1, max_assistant_tokens=6,
                     max_tool_response_tokens=200, max_trajectory_tokens=1024),
        lora_rank=4, learning_rate=1e-3, save_every=1, out=str(tmp_path / "run"),
    )
    example = SearchExample(id="t1", question="What is the capital of France?", answers=["Paris"], data_source="nq")
    session = open_session(config, search_client=TinySearch(), examples=[example])
    params = session.training_client._run.params  # test-only peek at the LoRA tensors
    before = [p.detach().clone() for p in params]

    seen = []
    summary = train(config, on_step=seen.append, session=session, progress=False, reward_fn=fixed_reward)

    assert summary["finished"] and summary["steps_done"] == 1
    metrics = seen[0]
    assert metrics["trajectories"] == 2 and metrics["datums"] == 2 and metrics["micro_batches"] >= 1
    assert metrics["trained_tokens"] == metrics["assistant_tokens_mean"] * 2 > 0
    assert metrics["degenerate_group_share"] == 0.0
    # Same fp32 weights on both sides: the sampler and the trainer must agree on every token.
    assert abs(metrics["kl_sampler_trainer_k1"]) < 1e-3 and metrics["kl_sampler_trainer_k3"] < 1e-3
    changed = sum(int(not torch.equal(b, p.detach())) for b, p in zip(before, params))
    assert changed > 0, "optim_step left every LoRA tensor unchanged"

    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["step"] == 0 and row["datums"] == 2
    # records are relative to the run folder, so a copied folder resumes from its own checkpoints
    stored = json.loads((tmp_path / "run" / "checkpoints.jsonl").read_text().splitlines()[-1])["path"]
    assert not Path(stored).is_absolute()
    checkpoint = Path(RunDir(tmp_path / "run").resolve(stored))
    assert (checkpoint / "adapter.safetensors").is_file() and (checkpoint / "optimizer.pt").is_file()
    assert (Path(summary["sampler_path"]) / "adapter.safetensors").is_file()

    # A new session on the same folder resumes after the saved step and restores those weights.
    resumed = open_session(config, search_client=TinySearch(), examples=[example])
    assert resumed.start_step == 1
    for new, old in zip(resumed.training_client._run.params, params):
        assert torch.allclose(new.detach(), old.detach())
