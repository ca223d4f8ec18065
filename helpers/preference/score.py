"""s(tau) for a GRPO group: how strongly the preference model prefers each trajectory's final
reply over the reference policy's reply to the same question (Perplexity's post: s = P-bar).

`PreferenceScore(preference, reference)` is what `GatedReward(preference=...)` calls once per
group. `reference` gives the reference reply of a question: a mapping from question id to text,
a function of the example, or a `helpers.efficiency.ReferenceLengths`, whose frozen rollouts (the
SFT policy's) also give the length penalty its reference lengths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from helpers.preference.train import Preference


def final_reply(trajectory: Any) -> str:
    """The reply a reader sees: the trajectory's last assistant text (no searches, no observations)."""
    return str(getattr(trajectory, "final_text", "") or "")


class PreferenceScore:
    """s(tau_i) = P-bar(reply_i preferred over the reference reply) for every trajectory of a group."""

    def __init__(self, preference: Preference, reference: Mapping[str, str] | Callable[[Any], str] | Any) -> None:
        self.preference = preference
        self.reference = reference

    @classmethod
    def load(cls, folder: str, reference: Any) -> "PreferenceScore":
        """s from the preference model saved in `folder` (`Preference.save`), against `reference`."""
        return cls(Preference.load(folder), reference)

    def prepare(self, groups: Any) -> None:
        """Sample the reference replies of a step's questions at once, when the reference samples them
        (`ReferenceLengths` keeps them: the same rollouts give the length penalty its L_ref)."""
        for_groups = getattr(self.reference, "for_groups", None)
        if callable(for_groups):
            for_groups(groups)

    def reference_reply(self, example: Any) -> str:
        if isinstance(self.reference, Mapping):
            if example.id not in self.reference:
                raise KeyError(f"no reference reply for question {example.id!r}")
            return self.reference[example.id]
        if hasattr(self.reference, "reply"):
            return self.reference.reply(example)
        return self.reference(example)

    def scores(self, group: Any) -> list[float]:
        """One s in [0, 1] per trajectory, in branch order (both orders read, so the slot never matters)."""
        question = group.example.question
        reference = self.reference_reply(group.example)
        replies = [final_reply(t) for t in group.trajectories]
        items = [(question, reply, reference) for reply in replies] + [(question, reference, reply) for reply in replies]
        from helpers.preference.loss import position_free_probability

        d = self.preference.deltas(items)
        n = len(replies)
        return [float(p) for p in position_free_probability(d[:n], d[n:])]
