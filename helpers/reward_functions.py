"""Every reward function a training run can name (`TrainConfig.reward`, `--reward`).

A reward module registers its functions with `helpers.reward.register_reward` when it is
imported; this module imports each of them here, by name in the source, so the registry is full
before any name is looked up and the ground floor (`helpers.reward`) never reaches up for them:

    exact_match   helpers.reward            Search-R1's outcome reward (the default)
    gated         helpers.efficiency.rewards  Perplexity's gated reward with efficiency penalties
    evidence      helpers.evidence          exact match plus a reward for retrieving gold passages

A new reward: write `group -> GroupRewards(rewards, components)` in its own module, register it
there, and import that module below.
"""

from __future__ import annotations

import inspect
from typing import Any

import helpers.efficiency.rewards  # noqa: F401  registers "gated"
import helpers.evidence  # noqa: F401  registers "evidence"
import helpers.search_gain  # noqa: F401  registers "search_gain"
from helpers.reward import _REGISTRY, RewardFn
from helpers.rubrics import RubricReward, load_rubric_prompts


def reward_names() -> list[str]:
    """Every registered reward name."""
    return sorted(_REGISTRY)


def make_reward(name: str, **options: Any) -> RewardFn:
    """The reward function registered as `name`, built with `options` (its factory's keywords)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown reward {name!r}; registered rewards: {sorted(_REGISTRY)}")
    factory = _REGISTRY[name]
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        raise ValueError(f"reward {name!r} does not take the options {sorted(options)}: {exc}") from None
    return factory(**options)


def for_session(reward_fn: RewardFn, session: Any) -> RewardFn:
    """A run's reward function made ready for its open session: options that name the run's own
    policy bound (`bind(session)`, e.g. the gated reward's reference="initial" or a preference
    model's folder), and rubric prompts (`config.rubric_share` > 0) rewarded by their rubrics."""
    bind = getattr(reward_fn, "bind", None)
    if callable(bind):
        bind(session)
    if session.config.rubric_share > 0:
        reward_fn = RubricReward(reward_fn, load_rubric_prompts(session.config.rubric_prompts))
    return reward_fn
