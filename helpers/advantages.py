"""The group-relative advantage: how GRPO turns a group's rewards into a training signal.

The GRPO used in this course, all in one place:

- **Groups.** One question is sampled ``group_size`` times (`helpers.rollout`); its trajectories
  form a group, and the group's mean reward is the baseline: no value network.
- **Advantages without std normalisation.** ``A_i = r_i - mean(r)`` over the group
  (Happy-LLM §8.3.5). Nothing divides by the group's standard deviation: a group right 7 times out
  of 8 does not push as hard as one right 4 times out of 8, and the advantage stays in the
  reward's own units.
- **Exact zero for groups without signal.** When every reward of a group is equal (within
  ``EQUAL_REWARDS``), every advantage is exactly ``0.0``. Eight rewards of -0.1 have a float mean
  a hair away from -0.1, and advantages of 1e-17 would pass a ``!= 0`` filter and train on a group
  that teaches nothing. `no_signal` is that one rule; training, the exercises and the widgets ask it.
- **One advantage per trajectory.** Every token the policy sampled carries its trajectory's
  advantage; prompt and observation tokens carry 0 and are not trained (`helpers.datums`).
- **Token-level importance sampling, no KL, no clipping.** The loss is ``importance_sampling``:
  ``-(pi_theta / pi_old) * A`` per sampled token, against the sampler's own logprobs recorded in
  the rollout, summed over a trajectory's tokens and averaged over every trajectory of the step
  (`helpers.train`, `helpers.engine.losses`). No KL penalty to a reference model, no PPO clipping
  of the ratio: one update per batch keeps the ratio near 1, and the step logs the
  sampler-trainer KL to show it. (The gradient norm is clipped, `TrainConfig.grad_clip_norm`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EQUAL_REWARDS = 1e-12  # rewards closer than this count as equal: their group carries no signal


def no_signal(rewards: Sequence[float]) -> bool:
    """Every reward of the group is the same (an empty group too): GRPO learns nothing from it.

    Such a group is called degenerate: all its advantages are exactly zero.
    """
    rewards = [float(r) for r in rewards]
    return not rewards or max(rewards) - min(rewards) <= EQUAL_REWARDS


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """reward - mean reward of the group, and exactly 0.0 for all when the group has no signal."""
    rewards = [float(r) for r in rewards]
    if no_signal(rewards):
        return [0.0] * len(rewards)
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def assign_advantages(groups: Sequence[Any]) -> int:
    """Write each trajectory's group advantage (`group_advantages`); returns the degenerate groups."""
    degenerate = 0
    for group in groups:
        rewards = [t.reward for t in group.trajectories]
        degenerate += no_signal(rewards)
        for trajectory, value in zip(group.trajectories, group_advantages(rewards)):
            trajectory.advantage = value
    return degenerate
