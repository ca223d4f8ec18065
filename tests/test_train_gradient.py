"""Weighted micro-batches give exactly the gradient of one global batch (real model, real engine).

forward_backward sums each datum's loss over tokens and averages over the datums of the call;
gradients accumulate until optim_step. Splitting N datums into micro-batches of n_k and scaling
each micro-batch's advantages by n_k/N must therefore reproduce the one-call gradient; without
the scaling, datums in small micro-batches count more.
"""

from __future__ import annotations

import random

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trainer(small_model_name):
    import torch

    torch.set_num_threads(2)
    from helpers.engine import connect

    client = connect("local").create_lora_training_client(
        small_model_name, rank=4, seed=0, train_mlp=False, train_unembed=False
    )
    return client


def _trajectories():
    from helpers.data import SearchExample
    from helpers.rollout import AssistantTurn, Trajectory

    rng = random.Random(0)
    example = SearchExample(id="g", question="?", answers=["a"], data_source="nq")
    out = []
    for index, (prompt_len, answer_len, advantage) in enumerate(
        [(9, 4, 0.75), (5, 7, -0.25), (7, 3, -0.5)]
    ):
        prompt = [rng.randrange(100, 20000) for _ in range(prompt_len)]
        completion = [rng.randrange(100, 20000) for _ in range(answer_len)]
        logprobs = [-rng.uniform(0.5, 9.0) for _ in completion]
        turn = AssistantTurn(prompt_tokens=prompt, completion_tokens=completion, logprobs=logprobs, text="")
        trajectory = Trajectory(example=example, group_index=index, messages=[], turns=[turn])
        trajectory.advantage = advantage
        out.append(trajectory)
    return out


def _gradient(trainer, calls):
    """Run forward_backward on each list of datums, return the accumulated LoRA gradient."""
    import torch

    params = trainer._run.params  # the engine's trainable LoRA tensors (test-only peek)
    for p in params:
        p.grad = None
    for datums in calls:
        trainer.forward_backward(datums, loss_fn="importance_sampling").result()
    grads = [p.grad.detach().float().clone().reshape(-1) for p in params if p.grad is not None]
    for p in params:
        p.grad = None
    assert grads, "the engine produced no gradient"
    return torch.cat(grads)


def test_weighted_micro_batches_match_the_global_batch_gradient(trainer):
    import torch

    from helpers.train import build_training_datums, pack_micro_batches, weight_micro_batch_for_global_mean

    datums = build_training_datums(_trajectories())
    total = len(datums)
    micro_batches = pack_micro_batches(datums, max_datums=2, max_tokens=10_000)
    assert [len(b) for b in micro_batches] == [2, 1]  # unequal sizes: weights 2/3 and 1/3

    global_grad = _gradient(trainer, [[d.datum for d in datums]])
    weighted = _gradient(trainer, [weight_micro_batch_for_global_mean(b, total) for b in micro_batches])
    unweighted = _gradient(trainer, [[d.datum for d in b] for b in micro_batches])

    scale = global_grad.abs().max()
    assert scale > 0
    # fp32 rounding differs with the shapes of the calls (about 1e-4 of the largest entry with the
    # unembedding taken at trained positions only); the wrong weighting is off by more than 5 %
    assert torch.allclose(weighted, global_grad, atol=2e-4 * float(scale), rtol=1e-4)
    # Without n_k/N each call's mean counts fully: a clearly different (and larger) gradient.
    assert (unweighted - global_grad).abs().max() > 0.05 * scale


def test_a_micro_batch_out_of_device_memory_is_retried_in_halves_with_the_same_gradient(trainer, monkeypatch):
    """Runs that share a GPU can run out of memory on a packed micro-batch; the engine retries its rows
    in two halves, putting back a gradient a backward cut short had partly added."""
    import torch

    import helpers.engine.training as training
    from helpers.train import build_training_datums

    datums = [d.datum for d in build_training_datums(_trajectories())]
    expected = _gradient(trainer, [datums])
    real = training.sequence_logprobs
    sizes = []

    def tight_memory(model, ids, *args, **kwargs):  # no room for more than one row in a forward
        sizes.append(ids.shape[0])
        if ids.shape[0] > 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, ids, *args, **kwargs)

    monkeypatch.setattr(training, "sequence_logprobs", tight_memory)
    split = _gradient(trainer, [datums])
    assert sizes[0] == 3 and sizes.count(1) == 3  # all three rows packed together, then one by one
    scale = float(expected.abs().max())
    assert torch.allclose(split, expected, atol=2e-4 * scale, rtol=1e-4)

    # out of memory half-way through a backward: the layers already done have added their share
    monkeypatch.setattr(training, "sequence_logprobs", real)
    first_layer = trainer._run.params[0]  # the last to receive its gradient in a backward
    failed = []

    def fail_once(grad):
        if not failed:
            failed.append(True)
            raise torch.OutOfMemoryError("CUDA out of memory (simulated, in backward)")
        return grad

    handle = first_layer.register_hook(fail_once)
    try:
        retried = _gradient(trainer, [datums])
    finally:
        handle.remove()
    assert failed
    assert torch.allclose(retried, expected, atol=2e-4 * scale, rtol=1e-4)

    # a single row that does not fit is the caller's error to see
    monkeypatch.setattr(training, "sequence_logprobs", lambda *a, **k: (_ for _ in ()).throw(
        torch.OutOfMemoryError("CUDA out of memory (simulated)")))
    with pytest.raises(Exception, match="out of memory|OutOfMemory"):
        trainer.forward_backward(datums[:1], loss_fn="importance_sampling").result()
