"""The reference policy's lengths and replies: what the length penalty and s(tau) compare against.

Perplexity's post anchors the length penalty on the reference model's lengths L_ref and scores a
reply against the reference model's reply for the same prompt. Both come from rollouts of a frozen
policy (the run's starting one: the SFT adapter), sampled once per question and kept. Here, below
`helpers.efficiency.rewards`, so the gated reward can build one from a training session without
importing the training loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from helpers.rollout import rollout_groups


def generated_length(trajectory: Any) -> int:
    """Tokens the policy generated (assistant turns only; observations are not its output)."""
    return trajectory.sampled_tokens


class ReferenceLengths:
    """Generated lengths of a frozen reference policy, group_size samples per question, cached."""

    def __init__(self, sampling_client: Any, tokenizer: Any, search_client: Any,
                 rollout_config: Callable[[int], Any] | None = None) -> None:
        self.sampling_client = sampling_client
        self.tokenizer = tokenizer
        self.search_client = search_client
        self.rollout_config = rollout_config  # step -> RolloutConfig, for `for_groups`
        self.cache: dict[str, list[int]] = {}
        self.replies: dict[str, list[str]] = {}  # the same rollouts' final replies (preference references)

    @classmethod
    def of_session(cls, session: Any) -> "ReferenceLengths":
        """The run's starting policy, frozen: the adapter it started from (`init_from`), or the base.

        A resumed run samples it again from `init_from`, not from the weights it resumed with, so
        the reference never drifts with the policy it judges.
        """
        config = session.config
        if session.start_step == 0:  # nothing trained yet: the trainer holds the starting weights
            sampler = session.training_client.save_weights_and_get_sampling_client()
        elif config.init_from:
            start = session.service.create_training_client_from_state(config.init_from)
            sampler = start.save_weights_and_get_sampling_client()
        else:
            sampler = session.service.create_sampling_client(base_model=config.resolved_model())
        return cls(sampler, session.tokenizer, session.search_client, config.rollout_config)

    def for_batch(self, batch: Sequence[Any], rollout_config: Any) -> dict[int, list[int]]:
        """Reference lengths per position in `batch`; questions not seen before are sampled at once."""
        missing = list({ex.id: ex for ex in batch if ex.id not in self.cache}.values())
        if missing:
            groups = rollout_groups(self.sampling_client, self.tokenizer, self.search_client, missing,
                                    rollout_config, progress=False)
            for ex, group in zip(missing, groups, strict=True):
                self.cache[ex.id] = [max(generated_length(t), 1) for t in group]
                self.replies[ex.id] = [t.final_text for t in group]
        return {qi: self.cache[ex.id] for qi, ex in enumerate(batch)}

    def reply(self, example: Any) -> str:
        """The reference policy's first reply to `example` (sampled by `for_batch`/`for_groups`)."""
        if example.id not in self.replies:
            raise KeyError(f"no reference rollout for question {example.id!r} yet")
        return self.replies[example.id][0]

    def for_groups(self, groups: Sequence[Any]) -> dict[str, list[int]]:
        """Reference lengths by question id for a step's groups (the `GatedReward.prepare` hook)."""
        if self.rollout_config is None:
            raise ValueError("ReferenceLengths needs rollout_config (step -> RolloutConfig) to sample for groups")
        examples = [group.example for group in groups]
        step = groups[0].step if groups else 0
        self.for_batch(examples, self.rollout_config(step))
        return {ex.id: self.cache[ex.id] for ex in examples}
