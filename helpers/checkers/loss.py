"""Check the loss the course optimises (notebook 08): token-level importance sampling, reduced the
way the engine reduces one `forward_backward` call.

The expected values come from the engine itself: `helpers.engine.losses.token_losses` gives the
loss of every token, and the reduction is the one the local engine's `forward_backward` applies (a
sum over each datum's tokens, then a mean over the datums of the call). Every case compares the
learner's loss and its gradient with respect to the current log-probabilities, so a loss that is
right in value but wrong in shape (or the reverse) does not pass.

The datums are those of Happy-LLM §8.3.5's paper trajectory (prompt 50, turn 20, observation 300,
turn 8), built by the course's `build_datum`, in a group of four with rewards [1, 0, 1, 0].
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from helpers.checkers._runner import Case, run_checks
from helpers.checkers.train import make_trajectory
from helpers.engine.losses import token_losses
from helpers.train import build_datum

PAPER_SEGMENTS = (50, 20, 300, 8)
PAPER_REWARDS = (1.0, 0.0, 1.0, 0.0)
PADDING_JUNK = 0.7  # what a padded position holds: only the mask says it does not count


def paper_group(segments: Sequence[int] = PAPER_SEGMENTS, rewards: Sequence[float] = PAPER_REWARDS) -> list:
    """The Datums (pytrio) of a group of paper trajectories, advantages = reward - group mean."""
    mean = sum(rewards) / len(rewards)
    return [build_datum(make_trajectory(segments, r - mean)).datum for r in rewards]


def call_tensors(datums: Sequence[Any], drift: float = 0.0) -> dict[str, torch.Tensor]:
    """One call's [B, T] tensors: current and old logprobs, advantages and the mask, padded to T.

    `drift` moves the current log-probabilities away from the sampler's (as after an update), by a
    deterministic wave of that amplitude; 0 is the first forward_backward after sampling (ratio 1).
    Padded positions hold junk, as a padded batch may: the mask (1 = a real position) decides.
    """
    rows = [{name: np.asarray(d.loss_fn_inputs[name].to_numpy(), dtype=np.float64)
             for name in ("logprobs", "advantages")} for d in datums]
    width = max(len(r["logprobs"]) for r in rows)
    old = np.full((len(rows), width), -PADDING_JUNK)
    advantages = np.full((len(rows), width), PADDING_JUNK)
    mask = np.zeros((len(rows), width))
    for i, row in enumerate(rows):
        n = len(row["logprobs"])
        old[i, :n], advantages[i, :n], mask[i, :n] = row["logprobs"], row["advantages"], 1.0
    wave = drift * np.sin(np.arange(width) * 0.37 + np.arange(len(rows))[:, None])
    current = old + wave
    return {name: torch.tensor(value, dtype=torch.float64)
            for name, value in (("logprobs", current), ("old_logprobs", old), ("advantages", advantages), ("mask", mask))}


def engine_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
    """The engine's objective for one call: its per-token loss, summed per datum, averaged over datums."""
    per_token = token_losses("importance_sampling", logprobs,
                             {"logprobs": old_logprobs, "advantages": advantages, "active": mask}, {})
    return per_token.sum(dim=1).sum() / per_token.shape[0]


def loss_and_gradient(fn: Callable, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """fn's loss and d loss / d logprobs, on fresh copies (a function that edits its inputs cannot leak)."""
    logprobs = tensors["logprobs"].clone().requires_grad_(True)
    loss = fn(logprobs, tensors["old_logprobs"].clone(), tensors["advantages"].clone(), tensors["mask"].clone())
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise TypeError(f"the loss must be one number, a 0-d torch.Tensor; got {type(loss).__name__}"
                        + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""))
    (gradient,) = torch.autograd.grad(loss, logprobs, allow_unused=True)
    if gradient is None:
        raise ValueError("the loss does not depend on logprobs: no gradient can reach the policy")
    return {"loss": round(float(loss.detach()), 9), "gradient": [round(float(g), 9) for g in gradient.flatten()]}


def _case(name: str, shown: str, datums: Sequence[Any], drift: float) -> Case:
    tensors = call_tensors(datums, drift)
    return Case(name, shown, loss_and_gradient(engine_loss, tensors), lambda fn: loss_and_gradient(fn, tensors))


LOSS_CASES = [
    _case("Happy-LLM §8.3.5's group, the first call after sampling (ratio 1)",
          "4 paper trajectories (prompt 50, turn 20, observation 300, turn 8), rewards [1, 0, 1, 0], "
          "logprobs = old_logprobs", paper_group(), 0.0),
    _case("the same group after an update (ratios away from 1)",
          "the paper group, logprobs = old_logprobs + a wave of amplitude 0.4 (ratios 0.67–1.49)", paper_group(), 0.4),
    _case("one right answer of four, ratios near 1",
          "4 paper trajectories, rewards [1, 0, 0, 0], a wave of amplitude 0.05", paper_group(rewards=(1, 0, 0, 0)), 0.05),
    _case("a padded micro-batch of different lengths",
          "3 datums of 7, 13 and 377 positions with advantages 0.5, -0.25, -0.25, padded to 377 "
          "(padding holds junk, the mask is 0 there)",
          [build_datum(make_trajectory(s, a)).datum for s, a in (((5, 3), 0.5), ((5, 3, 4, 2), -0.25),
                                                                 (PAPER_SEGMENTS, -0.25))], 0.2),
]


def check_importance_sampling_loss(fn: Any):
    """Run the loss cases against `fn(logprobs, old_logprobs, advantages, mask) -> 0-d tensor`."""
    return run_checks("importance_sampling_loss", fn, LOSS_CASES,
                      hint="per token: -exp(logprobs - old_logprobs) * advantages, times the mask; sum over each "
                           "row's tokens, then the mean over the rows (not over the tokens)")
