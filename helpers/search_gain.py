"""Pay a second search only where it changes the answer: the reward registered as "search_gain".

GRPO's advantage compares trajectories of the same question, so a second search is reinforced
wherever the trajectories that made one were right more often than the group, whether or not the
search is what made them right. A policy can learn to search again on questions its first search
already settled, and EM where it searched again against EM where it stopped cannot tell: those are
different questions. The question to ask of one trajectory is paired: would this policy have been
right had it answered right after its first search?

`first_search_answers` asks it. For every trajectory that searched at least twice, the policy that
sampled it (the step's sampler) continues from the point where it read its first search's results,
made to answer there (its turn starts with "Answer:"), greedily. The reward is then

    R(tau) = outcome(tau) + gain * (EM(tau) - EM(first-search answer of tau))   if tau searched again
    R(tau) = outcome(tau)                                                        otherwise

so a second search that turned a wrong answer right earns `gain`, one that lost a right answer costs it,
and one that changed nothing is worth what stopping was. With `pay=False` the term only charges
(R = outcome + gain * min(0, ...)): no trajectory earns more than its outcome, and a second search is
charged where it lost the answer its first search had found. The paying form lets a policy profit from
a first search that finds less (its counterfactual gets worse, so its second search "gains"); the
charging form cannot be gamed that way, and only trims. A per-question baseline (the gain over plain
retrieval that s3 rewards) would not do this: the group-relative advantage cancels any constant a
question adds to all of its trajectories; this term differs between trajectories of one question.

    TrainConfig(reward="search_gain", reward_options={"gain": 0.5})               # pays and charges
    TrainConfig(reward="search_gain", reward_options={"gain": 0.5, "pay": False}) # charges only

The counterfactual costs one short greedy generation per trajectory that searched again, sampled
beside the others in one batch. Each step logs `outcome`, `second_search_gain` (the term before
`gain`), `first_search_right` (1 where the first-search answer was right, among those that searched
again) and `counterfactuals` (1 where one was sampled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers.reward import GroupRewards, outcome_reward, register_reward, score_answer

# the answer a policy gives after its first search: one short line, greedy
ANSWER_PREFIX = "Answer:"
ANSWER_TOKENS = 32


@dataclass(frozen=True)
class SearchGainConfig:
    gain: float = 0.5
    pay: bool = True  # False: only charge (never above the outcome)

    def __post_init__(self) -> None:
        if not 0 <= self.gain <= 1:
            raise ValueError(f"search_gain: gain {self.gain} must lie in [0, 1] (a share of the outcome reward)")


def searched_again(trajectory: Any) -> bool:
    """A second search was made and read: a later assistant turn saw its first search's results."""
    return trajectory.search_calls >= 2 and len(trajectory.turns) >= 2


def first_search_prompt(trajectory: Any, tokenizer: Any) -> list[int]:
    """The tokens the policy read before its second assistant turn (the question and the first search's
    results), then "Answer:": the turn it would have written had it answered there."""
    return list(trajectory.turns[1].prompt_tokens) + list(tokenizer.encode(ANSWER_PREFIX, add_special_tokens=False))


def first_search_answers(sampling_client: Any, tokenizer: Any, trajectories: Sequence[Any],
                         max_tokens: int = ANSWER_TOKENS) -> int:
    """Write `first_search_right` (True / False) on every trajectory that searched again: whether the
    policy, made to answer right after its first search, answers right. Returns how many were sampled.
    A sampler that fails leaves the trajectories without one (their reward is then the outcome alone)."""
    from helpers.protocol import stop_sequences
    from helpers.rollout.loop import _LoopThread, sample_requests_async
    from helpers.rollout.turns import SampleRequest
    from helpers.trajectory import RolloutConfig

    wanted = [t for t in trajectories if searched_again(t)]
    for trajectory in trajectories:
        trajectory.first_search_right = None
    if not wanted:
        return 0
    requests = [SampleRequest(i, first_search_prompt(t, tokenizer), 1, 0, max_tokens) for i, t in enumerate(wanted)]
    greedy = RolloutConfig(temperature=0.0)  # the policy's most likely answer, one line
    try:
        with _LoopThread() as runner:  # also inside a notebook's running loop
            responses = runner.run(sample_requests_async(sampling_client, requests, greedy, tokenizer,
                                                         stops=[*stop_sequences(tokenizer), "\n"]))
    except Exception:  # the counterfactuals are missing, not the step
        return 0
    for trajectory, response in zip(wanted, responses):
        text = tokenizer.decode(response.sequences[0].tokens, skip_special_tokens=True)
        first_line = text.split("\n", 1)[0]
        trajectory.first_search_right = score_answer(f"{ANSWER_PREFIX}{first_line}", trajectory.example.answers).exact_match
    return len(wanted)


def search_gain_reward(gain: float = SearchGainConfig.gain, pay: bool = SearchGainConfig.pay):
    """The reward registered as "search_gain" (see the module's docstring). The step samples the
    counterfactuals through `sample_counterfactuals(sampling_client, tokenizer, groups)` before it
    scores the groups."""
    config = SearchGainConfig(gain, bool(pay))

    def reward(group) -> GroupRewards:
        outcomes = [outcome_reward(t.valid_format, t.exact_match) for t in group.trajectories]
        firsts = [getattr(t, "first_search_right", None) for t in group.trajectories]
        terms = [0.0 if right is None else float(bool(t.exact_match)) - float(right)
                 for t, right in zip(group.trajectories, firsts)]
        applied = terms if config.pay else [min(term, 0.0) for term in terms]
        return GroupRewards([base + config.gain * term for base, term in zip(outcomes, applied)], {
            "outcome": outcomes, "second_search_gain": terms,
            "first_search_right": [float(bool(right)) for right in firsts],
            "counterfactuals": [float(right is not None) for right in firsts]})

    def sample_counterfactuals(sampling_client, tokenizer, groups) -> int:
        return first_search_answers(sampling_client, tokenizer, [t for g in groups for t in g.trajectories])

    reward.sample_counterfactuals = sample_counterfactuals
    return reward


register_reward("search_gain", search_gain_reward)
