"""The training loop with test doubles: step order, metrics JSONL, checkpoints, kill-and-resume."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import helpers.train as train_module
from fixtures.doubles import FakeTrainer
from helpers.data import SearchExample
from helpers.advantages import assign_advantages
from helpers.reward import score
from helpers.rollout import AssistantTurn, RolloutGroups, RolloutStats, Trajectory, groups_of
from helpers.runs import read_jsonl
from helpers.train import RunDir, TrainConfig, TrainingSession, batch_for_step, train

EXAMPLES = [SearchExample(id=f"q{i}", question=f"question {i}?", answers=["right"], data_source="nq") for i in range(7)]


def fake_rollout(calls, crash_at=None):
    """rollout_groups double: finished, unscored groups; only branch 0 of question 0 answers right."""

    def rollout_groups(sampling_client, tokenizer, search_client, examples, config, progress=False):
        step = len(calls)
        if crash_at is not None and step == crash_at:
            raise KeyboardInterrupt("killed mid-step")
        calls.append([e.id for e in examples])
        out = []
        for qi, example in enumerate(examples):
            for g in range(config.group_size):
                turn = AssistantTurn(prompt_tokens=[1, 2, 3], completion_tokens=[4, 5], logprobs=[-0.5, -0.25], text="")
                t = Trajectory(example=example, group_index=g, messages=[], question_index=qi, turns=[turn])
                t.final_text = "Answer: right" if g == 0 and qi == 0 else "Answer: wrong"  # others: degenerate
                t.end_reason = "answer"
                t.search_calls = g
                out.append(t)
        groups = RolloutGroups(groups_of(out))
        groups.stats = RolloutStats(questions=len(examples), trajectories=len(out))
        return groups

    return rollout_groups


def scored(groups):
    score(groups)
    assign_advantages(groups)
    return [t for group in groups for t in group.trajectories]


def session_for(tmp_path, log, config):
    run = RunDir(config.out)
    last = run.last_checkpoint()
    trainer = FakeTrainer(log)
    start = 0
    if last:
        trainer.load_state_with_optimizer(last["path"])
        start = last["step"]
    run.keep_metrics_before(start)
    return TrainingSession(config, None, trainer, None, None, EXAMPLES, run, start)


def test_step_order_metrics_and_kill_resume(tmp_path, monkeypatch):
    config = TrainConfig(max_steps=5, questions_per_batch=3, rollout=dict(group_size=2), save_every=2, out=str(tmp_path / "run"))

    # Uninterrupted reference run: which questions each step sees.
    reference_calls: list = []
    monkeypatch.setattr(train_module, "rollout_groups", fake_rollout(reference_calls))
    ref_log: list = []
    ref_config = TrainConfig(**{**config.__dict__, "out": str(tmp_path / "ref")})
    summary = train(ref_config, session=session_for(tmp_path, ref_log, ref_config), progress=False)
    assert summary["finished"] and summary["steps_done"] == 5
    assert reference_calls == [[e.id for e in batch_for_step(EXAMPLES, s, 3, config.seed)] for s in range(5)]
    # The seed's order, every step: sync weights -> forward_backward(importance_sampling)... -> one optim_step.
    first_step = ref_log[: ref_log.index("optim") + 1]
    assert first_step[0] == "sync" and first_step[-1] == "optim"
    assert all(item[1] == "importance_sampling" for item in first_step[1:-1])
    assert ref_log.count("optim") == 5

    # Killed during step 3 (0-based). save_every=2: the last checkpoint holds steps 0-1; step 2 finished unsaved.
    calls: list = []
    monkeypatch.setattr(train_module, "rollout_groups", fake_rollout(calls, crash_at=3))
    log: list = []
    with pytest.raises(KeyboardInterrupt):
        train(config, session=session_for(tmp_path, log, config), progress=False)
    run = RunDir(config.out)
    assert run.last_checkpoint()["step"] == 2
    assert [row["step"] for row in read_jsonl(run.metrics)] == [0, 1, 2]  # step 2 ran, not checkpointed

    # Resume in a "new process": starts from the step-2 checkpoint, replays step 2, same questions.
    resumed_calls: list = []
    monkeypatch.setattr(train_module, "rollout_groups", fake_rollout(resumed_calls))
    log2: list = []
    summary = train(config, session=session_for(tmp_path, log2, config), progress=False)
    assert ("load", "fake://run-step00002") in log2
    assert resumed_calls == reference_calls[2:]
    rows = read_jsonl(run.metrics)
    assert [row["step"] for row in rows] == [0, 1, 2, 3, 4]  # each step logged exactly once
    assert summary["finished"] and summary["steps_done"] == 5


def test_metrics_row_has_the_seed_fields(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(train_module, "rollout_groups", fake_rollout(calls))
    seen: list = []
    config = TrainConfig(max_steps=1, questions_per_batch=2, rollout=dict(group_size=4), save_every=0, out=str(tmp_path / "m"))
    train(config, on_step=seen.append, session=session_for(tmp_path, [], config), progress=False)
    row = json.loads((tmp_path / "m" / "metrics.jsonl").read_text().splitlines()[0])
    assert seen and seen[0]["step"] == row["step"] == 0
    for key in ("exact_match", "valid_format_rate", "search_calls_mean", "no_search_share", "failed_searches",
                "search_timeouts", "truncated_observations", "trajectory_tokens_mean", "trained_tokens",
                "degenerate_group_share", "time_rollout", "time_search", "time_training",
                "kl_sampler_trainer_k1", "kl_sampler_trainer_k3"):
        assert key in row, key
    # Question 0 has rewards [1, 0, 0, 0]; question 1 is degenerate: half the groups.
    assert row["degenerate_group_share"] == 0.5
    assert row["datums"] == 4 and row["trained_tokens"] == 4 * 2
    assert row["exact_match"] == pytest.approx(1 / 8)
    assert row["no_search_share"] == pytest.approx(2 / 8)
    # searches = group index: the 2- and 3-search branches of question 0 lost (advantage -0.25 each),
    # question 1's are degenerate (0): GRPO pushes away from searching again
    assert row["multi_search_advantage_mean"] == pytest.approx(-0.125)
    # Trainer logprobs equal sampler logprobs in the double: the KL must read 0.
    assert row["kl_sampler_trainer_k1"] == pytest.approx(0.0, abs=1e-7)
    assert row["kl_sampler_trainer_k3"] == pytest.approx(0.0, abs=1e-7)


def test_mixed_batches_log_exact_match_and_second_searches_per_source(tmp_path, monkeypatch):
    monkeypatch.setattr(train_module, "rollout_groups", fake_rollout([]))
    mixed = [SearchExample(id="h0", question="q?", answers=["right"], data_source="hotpotqa"), *EXAMPLES[:1]]
    config = TrainConfig(max_steps=1, questions_per_batch=2, rollout=dict(group_size=4), save_every=0, out=str(tmp_path / "s"),
                         balance_sources=True)
    session = session_for(tmp_path, [], config)
    session.examples = mixed
    train(config, session=session, progress=False)
    row = json.loads((tmp_path / "s" / "metrics.jsonl").read_text().splitlines()[0])
    # balanced batch in name order: hotpotqa is question 0 (rewards [1, 0, 0, 0]), nq is degenerate
    assert row["exact_match/hotpotqa"] == 0.25 and row["exact_match/nq"] == 0.0
    assert row["multi_search_share/hotpotqa"] == row["multi_search_share/nq"] == 0.5
    assert row["multi_search_advantage_mean/hotpotqa"] == pytest.approx(-0.25)
    assert row["multi_search_advantage_mean/nq"] == 0.0


def test_a_skipped_optimiser_step_is_reported(capsys):
    """The engine drops a non-finite gradient; the step's metrics and the log say so."""
    import pytrio

    from helpers.train import build_training_datums, optimise

    trajectories = scored(fake_rollout([])(None, None, None, EXAMPLES[:1], SimpleNamespace(group_size=4)))
    datums = build_training_datums(trajectories)
    for grad_norm, skipped in ((float("nan"), 1.0), (0.5, 0.0)):
        trainer = FakeTrainer([])
        trainer.optim_step = lambda adam, m={"grad_norm": grad_norm, "skipped_non_finite": skipped}: SimpleNamespace(
            result=lambda: SimpleNamespace(metrics=m))
        metrics = optimise(trainer, datums, len(trajectories), pytrio.AdamParams(learning_rate=1e-4))
        assert metrics["optim_skipped"] == skipped
        out = capsys.readouterr().out
        assert ("optimiser step skipped" in out) == bool(skipped)
        # what the next look needs: the importance ratio's range over the step's sampled tokens
        assert ("log-ratio range [0, 0]" in out) == bool(skipped)  # the fake trainer echoes the sampler


def test_sampler_trainer_kl_reports_the_log_ratio_extremes_and_non_finite_logprobs():
    from types import SimpleNamespace

    import numpy as np

    from helpers.metrics import sampler_trainer_kl

    class Array:
        def __init__(self, values):
            self.values = np.asarray(values, dtype=np.float32)

        def to_numpy(self):
            return self.values

    def datum(old, advantages):
        return SimpleNamespace(loss_fn_inputs={"logprobs": Array(old), "advantages": Array(advantages)})

    # prompt token (advantage 0) ignored; sampled tokens' new - old: +0.5, -2.0, and one the trainer
    # scores as -inf (what overflows exp() in the loss)
    datums = [datum([0.0, -1.0, -0.5], [0.0, 1.0, 1.0]), datum([-3.0, -0.1], [-1.0, -1.0])]
    outputs = [({"loss_fn_outputs": [{"logprobs": np.array([-9.0, -0.5, -2.5])},
                                     {"logprobs": np.array([-np.inf, -0.1])}]}, 2)]
    kl = sampler_trainer_kl(datums, outputs)
    assert kl["log_ratio_max"] == pytest.approx(0.5)
    assert kl["log_ratio_min"] == pytest.approx(-2.0)
    assert kl["logprob_non_finite"] == 1
