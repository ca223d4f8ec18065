"""The loss notebook 08's exercise is graded against is the one the engine minimises: on a real
model, `forward_backward(importance_sampling)` reports the same loss as the checker's
`engine_loss` computed from the engine's own log-probabilities (ratios away from 1, padding,
different lengths, zero-advantage positions)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow


def test_the_checkers_loss_is_the_loss_forward_backward_reports(small_model_name):
    torch.set_num_threads(2)
    from helpers.checkers.loss import engine_loss
    from helpers.checkers.train import make_trajectory
    from helpers.engine import connect
    from helpers.train import build_datum

    client = connect("local").create_lora_training_client(small_model_name, rank=4, seed=0, train_mlp=False,
                                                          train_unembed=False)
    # old logprobs far from the model's (make_trajectory's are about -0.01 to -0.07): ratios well below 1
    datums = [build_datum(make_trajectory(segments, advantage)).datum
              for segments, advantage in (([6, 3, 5, 2], 0.5), ([4, 5], -0.25), ([9, 2, 3, 4], -0.25))]
    output = client.forward_backward(datums, loss_fn="importance_sampling").result()

    width = max(len(d.model_input.to_ints()) for d in datums)
    tensors = {name: np.zeros((len(datums), width)) for name in ("logprobs", "old_logprobs", "advantages", "mask")}
    for i, (datum, out) in enumerate(zip(datums, output.loss_fn_outputs)):
        n = len(datum.model_input.to_ints())
        tensors["logprobs"][i, :n] = out["logprobs"].to_numpy()
        tensors["old_logprobs"][i, :n] = datum.loss_fn_inputs["logprobs"].to_numpy()
        tensors["advantages"][i, :n] = datum.loss_fn_inputs["advantages"].to_numpy()
        tensors["mask"][i, :n] = 1.0
    ratios = np.exp(tensors["logprobs"] - tensors["old_logprobs"])[tensors["advantages"] != 0]
    assert ratios.max() < 0.5  # the ratio is really in play, not 1

    expected = engine_loss(**{k: torch.tensor(v, dtype=torch.float64) for k, v in tensors.items()})
    reported = output.metrics["loss_sum"] / len(datums)  # the call's objective: the mean over its datums
    assert math.isclose(float(expected), reported, rel_tol=1e-3, abs_tol=1e-6)
