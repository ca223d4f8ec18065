"""The outcome reward of Search-R1: exact match on one ``Answer:`` line.

    1.0   the format is valid and the normalised answer equals a normalised reference
    0.0   the format is valid, the answer is wrong
   -0.1   no single ``Answer:`` line, or the final turn still holds tool-call markup

Nothing is given for searching: the reward sees only the end of the trajectory.

Also here, because every stage that asks "is this the answer?" must ask it the same way:
`matching_answer` / `contains_answer` / `find_answer_in` (a gold answer inside a text); what a reward
function of a GRPO step returns and how one is registered (`GroupRewards`, `register_reward`,
`exact_match_reward`; `helpers.reward_functions` fills the registry by explicit imports and looks
rewards up by name); and `score`, which checks the answers of a step's groups and rewards them. What
GRPO makes of the rewards, the group advantage, is the next stage: `helpers.advantages`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMAT_PENALTY = -0.1
ARTICLE_PATTERN = re.compile(r"\b(a|an|the)\b")
# Matched against one line at a time, split by str.splitlines: every Unicode line break ends a
# line (\r alone, U+0085, U+2028 too), so two answers cannot hide on one "line". The letters are
# spelled out: re.IGNORECASE would also let "ſ" (long s) stand in for "s".
ANSWER_PATTERN = re.compile(r"\s*[Aa][Nn][Ss][Ww][Ee][Rr]:\s*(.*?)\s*")


@dataclass(frozen=True)
class RewardResult:
    reward: float
    valid_format: bool
    exact_match: bool
    answer: str | None


def normalize_answer(text: str) -> str:
    """Lowercase, drop every Unicode punctuation character, drop a/an/the, collapse spaces."""
    lowered = str(text).lower()
    no_punct = "".join(ch for ch in lowered if not unicodedata.category(ch).startswith("P"))
    return " ".join(ARTICLE_PATTERN.sub(" ", no_punct).split())


def extract_answer(text: str) -> str | None:
    """The text of the only ``Answer:`` line, or None (no such line, several, or empty)."""
    matches = [m.group(1) for line in str(text).splitlines() if (m := ANSWER_PATTERN.fullmatch(line))]
    if len(matches) != 1:
        return None
    return matches[0].strip() or None


def score_answer(text: str, references: Iterable[str]) -> RewardResult:
    text = str(text)
    if "<tool_call>" in text or "</tool_call>" in text:
        # A turn that (also) calls the tool is not a final answer, whatever else it says.
        return RewardResult(FORMAT_PENALTY, False, False, None)
    answer = extract_answer(text)
    if answer is None:
        return RewardResult(FORMAT_PENALTY, False, False, None)
    normalized = normalize_answer(answer)
    # An answer that normalises to nothing ("the", "...") matches nothing.
    exact = bool(normalized) and any(normalized == normalize_answer(ref) for ref in references)
    return RewardResult(float(exact), True, exact, answer)


def matching_answer(text: str, answers: Iterable[str], normalized: bool = False) -> str | None:
    """The first gold answer that occurs in `text` on word boundaries, both normalised as above.

    The one matcher for "is the answer in there?": the data preparation (is an answer in the
    corpus?), retrieval quality (answer@k), the SFT teacher (is it in the evidence?) and lenient
    evaluation (is it anywhere in the final text?) all ask it this way. `normalized=True` says
    `text` already went through `normalize_answer` (a corpus searched for many questions).
    """
    haystack = f" {text if normalized else normalize_answer(text or '')} "
    for answer in answers:
        gold = normalize_answer(answer)
        if gold and f" {gold} " in haystack:
            return answer
    return None


def contains_answer(text: str, answers: Iterable[str], normalized: bool = False) -> bool:
    """Some gold answer occurs in `text` (normalised, whole words): see `matching_answer`."""
    return matching_answer(text, answers, normalized) is not None


def find_answer_in(text: str, answers: Iterable[str]) -> str | None:
    """The gold answer `matching_answer` finds in `text`, spelled as `text` spells it ("Eiffel Tower").

    The scripted teacher answers with the evidence's own spelling, which the reward then accepts
    (it normalises both sides the same way). None where `matching_answer` finds nothing.
    """
    gold = matching_answer(text, answers)
    if gold is None:
        return None
    literal = re.search(r"(?<!\w)" + re.escape(gold.strip()) + r"(?!\w)", text, flags=re.IGNORECASE)
    if literal and normalize_answer(literal.group(0)) == normalize_answer(gold):
        return literal.group(0)
    return _written_span(text, normalize_answer(gold)) or gold


def _written_span(text: str, target: str) -> str | None:
    """The first run of whole words of `text` that normalises to `target`, edge punctuation trimmed."""
    words = list(re.finditer(r"\S+", text))
    for i, first in enumerate(words):
        for last in words[i:]:
            normalized = normalize_answer(text[first.start():last.end()])
            if normalized == target:
                span = text[first.start():last.end()]
                return _trim_punctuation(span)
            if len(normalized) > len(target):
                break
    return None


def _trim_punctuation(span: str) -> str:
    start, end = 0, len(span)
    while start < end and unicodedata.category(span[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(span[end - 1]).startswith("P"):
        end -= 1
    return span[start:end]


# --------------------------------------------------------------------------- reward functions


@dataclass
class GroupRewards:
    """What a reward function returns for one group: a reward per trajectory, in group order, and
    optional named terms (one value per trajectory) that the step logs as their mean."""

    rewards: list[float]
    components: dict[str, list[float]] = field(default_factory=dict)


RewardFn = Callable[[Any], GroupRewards]  # Group -> GroupRewards

# name -> factory(**options) -> reward function. Filled by `register_reward` in each module that
# defines a reward; `helpers.reward_functions` imports every such module and looks names up.
_REGISTRY: dict[str, Callable[..., RewardFn]] = {}


def register_reward(name: str, factory: Callable[..., RewardFn]) -> None:
    """Make `factory(**options) -> reward function` available as `name` (TrainConfig.reward, CLI)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a reward needs a non-empty name, got {name!r}")
    _REGISTRY[name] = factory


def check_answer(trajectory: Any) -> RewardResult:
    """The answer check of one finished trajectory, written onto it (answer, valid_format, exact_match).

    A trajectory that did not end on an answer turn (it ended on a search call, an invalid turn or
    a budget) has no valid final answer, whatever its last text says.
    """
    result = score_answer(trajectory.final_text, trajectory.example.answers)
    if trajectory.end_reason != "answer":
        result = RewardResult(FORMAT_PENALTY, False, False, result.answer)
    trajectory.answer = result.answer
    trajectory.valid_format = result.valid_format
    trajectory.exact_match = result.exact_match
    return result


def outcome_reward(valid_format: bool, exact_match: bool) -> float:
    """Search-R1's outcome reward from the two facts: 1 right, 0 wrong, FORMAT_PENALTY no answer."""
    if not valid_format:
        return FORMAT_PENALTY
    return 1.0 if exact_match else 0.0


def exact_match_reward(group: Any) -> GroupRewards:
    """The default reward: exact match of the final answer (1 / 0 / FORMAT_PENALTY)."""
    return GroupRewards([outcome_reward(t.valid_format, t.exact_match) for t in group.trajectories])


register_reward("exact_match", lambda: exact_match_reward)


def score(groups: Sequence[Any], reward_fn: RewardFn = exact_match_reward,
          sampling: tuple[Any, Any] | None = None) -> dict[str, float]:
    """Check every answer, then reward each group with `reward_fn`; returns the components' means.

    Writes `answer`, `valid_format`, `exact_match` (facts a reward may read) and `reward` on every
    trajectory. A reward function with a `prepare(groups)` method gets all groups first (to batch
    work such as sampling reference lengths); one with `sample_counterfactuals(sampling_client,
    tokenizer, groups)` gets `sampling`, the (sampling client, tokenizer) that rolled the groups out,
    to ask the same policy what it would have done elsewhere (`helpers.search_gain`). Each component
    becomes one metric: its mean over every trajectory of the step, and over each data source's
    trajectories as `<component>/<source>` when the step mixes sources.
    """
    groups = list(groups)
    counterfactuals = getattr(reward_fn, "sample_counterfactuals", None)
    if callable(counterfactuals):
        if sampling is None:
            raise ValueError("this reward compares each trajectory with what its policy would have done: "
                             "pass score(..., sampling=(sampling_client, tokenizer))")
        counterfactuals(*sampling, groups)
    for group in groups:
        for trajectory in group.trajectories:
            check_answer(trajectory)
    prepare = getattr(reward_fn, "prepare", None)
    if callable(prepare):
        prepare(groups)
    sums: dict[str, float] = {}
    count = 0
    # also per data source when a batch mixes them: a term that pays on one source and charges on
    # another reads as a small mean
    per_source: dict[tuple[str, str], float] = {}
    counts: dict[str, int] = {}
    for group in groups:
        result = reward_fn(group)
        n = len(group.trajectories)
        if not isinstance(result, GroupRewards) or len(result.rewards) != n:
            raise ValueError(
                f"a reward function must return GroupRewards with one reward per trajectory "
                f"({n} here), got {result!r:.200}"
            )
        for trajectory, value in zip(group.trajectories, result.rewards):
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"reward {value} for question {group.index} is not a finite number")
            trajectory.reward = value
        source = getattr(getattr(group.trajectories[0], "example", None), "data_source", "") if n else ""
        for name, values in result.components.items():
            if len(values) != n:
                raise ValueError(f"reward component {name!r} has {len(values)} values for {n} trajectories")
            total = float(sum(values))
            sums[name] = sums.get(name, 0.0) + total
            per_source[name, source] = per_source.get((name, source), 0.0) + total
        count += n
        counts[source] = counts.get(source, 0) + n
    means = {name: total / count for name, total in sums.items()} if count else {}
    if len(counts) > 1:
        means.update({f"{name}/{source}": total / counts[source] for (name, source), total in per_source.items()})
    return means
