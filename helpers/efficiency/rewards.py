"""The gated reward R = r_base * s - pen_eff with group-anchored tool-call and length penalties.

The design decisions Perplexity's post leaves open are listed in the package docstring.
`GatedReward` is the reward as a reward function of a group, registered as "gated" for
`TrainConfig.reward`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from helpers.advantages import group_advantages
from helpers.efficiency.reference import ReferenceLengths, generated_length
from helpers.reward import GroupRewards, outcome_reward, register_reward

PreferenceFn = Callable[[Any], float]
# the weights of R, each >= 0 (and a flag of `python -m helpers.efficiency compare`)
WEIGHTS = ("lambda_tool", "lambda_len", "alpha_win", "alpha_lose", "beta_lose", "format_penalty")


@dataclass(frozen=True)
class EfficiencyConfig:
    """Weights of the efficiency penalty. Perplexity's post gives no numbers; these are CPU-run defaults."""

    lambda_tool: float = 0.2
    lambda_len: float = 0.1
    alpha_win: float = 1.0
    alpha_lose: float = 0.5
    beta_lose: float = 0.1
    preferred_threshold: float = 0.5  # s >= this makes a winner "preferred" (the set W-hat)
    # Not in the post's formula: Search-R1's -0.1 for a broken final format. 0 keeps the formula
    # exact; 0.1 makes "gated" differ from the plain reward only by the efficiency terms.
    format_penalty: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in WEIGHTS:
            if getattr(self, name) < 0:
                raise ValueError(f"EfficiencyConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.preferred_threshold <= 1.0:
            raise ValueError("EfficiencyConfig.preferred_threshold must lie in [0, 1]")


REFERENCES = ("group", "initial")  # the lengths pen_len anchors on, by name (GatedReward's reference)


# ---------------------------------------------------------------- tool-call penalty


def effective_calls(calls: Sequence[int], failed: Sequence[int] | None = None) -> list[int]:
    """c~ = calls - failed calls, never below 0 (a failed search costs the agent nothing extra)."""
    failed = [0] * len(calls) if failed is None else list(failed)
    if len(failed) != len(calls):
        raise ValueError(f"got {len(calls)} call counts but {len(failed)} failed counts")
    return [max(0, int(c) - int(e)) for c, e in zip(calls, failed)]


def baseline_range(eff_calls: Sequence[int], winners: Sequence[bool]) -> tuple[int, int] | None:
    """(min, ceil(mean)) of the winners' effective calls, or None when the group has no winner."""
    won = [c for c, w in zip(eff_calls, winners) if w]
    if not won:
        return None
    return min(won), math.ceil(sum(won) / len(won))


def sample_tool_baseline(
    eff_calls: Sequence[int], winners: Sequence[bool], rng: np.random.Generator | int | None = None
) -> int | None:
    """b_g drawn uniformly from the integers min..ceil(mean) of the winners (both included)."""
    bounds = baseline_range(eff_calls, winners)
    if bounds is None:
        return None
    low, high = bounds
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return int(rng.integers(low, high + 1))


def tool_penalties(
    eff_calls: Sequence[int],
    winners: Sequence[bool],
    baseline: int | None,
    alpha_win: float = 1.0,
    alpha_lose: float = 0.5,
    beta_lose: float = 0.1,
) -> list[float]:
    """pen_tool per member: alpha_win*p for winners, alpha_lose*p + beta_lose for the rest.

    p = 1 - exp(-max(0, c~ - b_g)). baseline None (no winner) means no surplus: p = 0.
    """
    if len(eff_calls) != len(winners):
        raise ValueError("eff_calls and winners must have the same length")
    out = []
    for c, won in zip(eff_calls, winners):
        surplus = 0 if baseline is None else max(0, c - baseline)
        p = 1.0 - math.exp(-surplus)
        out.append(alpha_win * p if won else alpha_lose * p + beta_lose)
    return out


# ---------------------------------------------------------------- length penalty


def length_baselines(
    reference_lengths: Sequence[float], preferred: Sequence[bool]
) -> tuple[float | None, float | None]:
    """(b_win, b_lose): mean reference length over preferred winners and over everyone else."""
    win = [r for r, p in zip(reference_lengths, preferred) if p]
    lose = [r for r, p in zip(reference_lengths, preferred) if not p]
    b_win = sum(win) / len(win) if win else None
    b_lose = sum(lose) / len(lose) if lose else None
    return b_win, b_lose


def length_penalties(
    lengths: Sequence[float],
    preferred: Sequence[bool],
    reference_lengths: Sequence[float] | None = None,
) -> list[float]:
    """pen_len per member (token lengths of the candidate generations).

    - 1 (hard cap) when longer than every reference length of the group;
    - preferred winners: 1 - exp(-max(0, L / b_win - 1))   (verbose winners pay);
    - everyone else:     1 - exp(-max(0, b_lose / L - 1))  (terse losers pay: a quick wrong
      answer must not look cheaper than a careful attempt).
    """
    if len(lengths) != len(preferred):
        raise ValueError("lengths and preferred must have the same length")
    refs = list(lengths) if reference_lengths is None else list(reference_lengths)
    if len(refs) != len(lengths):
        raise ValueError(
            f"need one reference length per trajectory: got {len(refs)} for {len(lengths)}"
        )
    if any(r <= 0 for r in refs):
        raise ValueError("reference lengths must be positive token counts")
    cap = max(refs)
    b_win, b_lose = length_baselines(refs, preferred)
    out = []
    for length, pref in zip(lengths, preferred):
        length = max(float(length), 1.0)  # an empty generation still counts as one token
        if length > cap:
            out.append(1.0)
        elif pref:
            out.append(1.0 - math.exp(-max(0.0, length / b_win - 1.0)))
        else:
            out.append(1.0 - math.exp(-max(0.0, b_lose / length - 1.0)))
    return out


# ---------------------------------------------------------------- the gated reward


def gated_reward(r_base: float, preference: float, pen_eff: float) -> float:
    """R = r_base * s - pen_eff: preference only counts when the answer is correct."""
    if r_base not in (0, 1):
        raise ValueError(f"r_base must be 0 or 1 (exact match), got {r_base}")
    if not 0.0 <= preference <= 1.0:
        raise ValueError(f"the preference score s must lie in [0, 1], got {preference}")
    return r_base * preference - pen_eff


@dataclass
class EfficiencyBreakdown:
    """Every term of R for one trajectory, so a notebook can show where the reward came from."""

    r_base: int
    preference: float
    calls: int
    failed_calls: int
    effective_calls: int
    tool_baseline: int | None
    pen_tool: float
    length: int
    reference_length: float
    pen_len: float
    pen_eff: float
    reward: float
    advantage: float = 0.0
    valid_format: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_group(
    r_base: Sequence[int],
    calls: Sequence[int],
    lengths: Sequence[int],
    *,
    failed: Sequence[int] | None = None,
    preferences: Sequence[float] | None = None,
    reference_lengths: Sequence[float] | None = None,
    valid_format: Sequence[bool] | None = None,
    config: EfficiencyConfig = EfficiencyConfig(),
    rng: np.random.Generator | int | None = None,
) -> list[EfficiencyBreakdown]:
    """The gated reward and its group-mean advantage for one GRPO group, from plain numbers.

    valid_format only matters when config.format_penalty > 0 (then a broken final format costs
    that much on top; a correct answer always has a valid format).
    """
    n = len(r_base)
    if not (len(calls) == len(lengths) == n):
        raise ValueError("r_base, calls and lengths must have one entry per trajectory")
    if n == 0:
        return []
    prefs = [1.0] * n if preferences is None else [float(s) for s in preferences]
    valid = [True] * n if valid_format is None else [bool(v) for v in valid_format]
    failed = [0] * n if failed is None else list(failed)
    winners = [bool(r) for r in r_base]
    preferred = [w and s >= config.preferred_threshold for w, s in zip(winners, prefs)]
    eff = effective_calls(calls, failed)
    baseline = sample_tool_baseline(eff, winners, config.seed if rng is None else rng)
    pen_tool = tool_penalties(
        eff, winners, baseline, config.alpha_win, config.alpha_lose, config.beta_lose
    )
    refs = [max(float(r), 1.0) for r in (lengths if reference_lengths is None else reference_lengths)]
    pen_len = length_penalties(lengths, preferred, refs)
    rows = []
    for i in range(n):
        pen_eff = config.lambda_tool * pen_tool[i] + config.lambda_len * pen_len[i]
        rows.append(
            EfficiencyBreakdown(
                r_base=int(winners[i]),
                preference=prefs[i],
                calls=int(calls[i]),
                failed_calls=int(failed[i]),
                effective_calls=eff[i],
                tool_baseline=baseline,
                pen_tool=pen_tool[i],
                length=int(lengths[i]),
                reference_length=refs[i],
                pen_len=pen_len[i],
                pen_eff=pen_eff,
                reward=gated_reward(int(winners[i]), prefs[i], pen_eff)
                - (0.0 if valid[i] else config.format_penalty),
                valid_format=valid[i],
            )
        )
    # the group baseline of Happy-LLM §8.3.5, exactly 0 for a group whose rewards are all equal
    for r, advantage in zip(rows, group_advantages([r.reward for r in rows])):
        r.advantage = advantage
    return rows


# ---------------------------------------------------------------- on Trajectory objects


def failed_calls_of(trajectory: Any) -> int:
    """Failed searches of a Trajectory (0 when the rollout did not record them)."""
    return int(getattr(trajectory, "failed_searches", 0) or 0)


def group_numbers(group: Sequence[Any]) -> dict[str, list]:
    """The inputs of `score_group` read off a group of Trajectory objects.

    r_base comes from `exact_match` (not from `reward`), so scoring twice gives the same result.
    """
    return {
        "r_base": [int(bool(t.exact_match)) for t in group],
        "calls": [int(t.search_calls) for t in group],
        "failed": [failed_calls_of(t) for t in group],
        "lengths": [generated_length(t) for t in group],
        "valid_format": [bool(getattr(t, "valid_format", True)) for t in group],
    }


def group_rng(config: EfficiencyConfig, group: Any) -> np.random.Generator:
    """The tool baseline's generator of one group: seeded by (config.seed, step, question), so a run
    is reproducible and groups do not share one baseline."""
    return np.random.default_rng([config.seed, group.step, group.index])


# ---------------------------------------------------------------- as a reward function

COMPONENTS = ("preference", "pen_tool", "pen_len", "pen_eff", "effective_calls", "length", "reference_length")


class GatedReward:
    """The gated reward as a reward function of a group (`helpers.reward.score` calls it).

    `use=False` keeps the plain exact-match reward and only logs the gated terms (the baseline run
    of a comparison, so both runs log the same metrics). `reference` (a `ReferenceLengths`) gives
    the reference lengths of Perplexity's post, sampled once per question by a frozen policy;
    without it each group's own lengths are the reference. `preference` (an object whose
    `scores(group)` gives s per trajectory, e.g. `helpers.preference.PreferenceScore`) or
    `preference_fn` (trajectory -> s) gives the preference score; without either, s = 1.

    From a config (text, so a run's config.json and `--reward-options` hold them): `reference=
    "initial"` (the run's starting policy, sampled once per question: the post's L_ref) or "group";
    `preference="<folder>"` (a model saved by `python -m helpers.preference train`, scoring against
    the starting policy's reply). `bind(session)` turns them into objects when the run's session
    is open (`helpers.train.train` calls it); before that the reward refuses to score.
    """

    def __init__(self, config: EfficiencyConfig = EfficiencyConfig(), *, preference_fn: PreferenceFn | None = None,
                 preference: Any = None, reference: Any = None, use: bool = True) -> None:
        if preference is not None and preference_fn is not None:
            raise ValueError("give the gated reward either preference or preference_fn, not both")
        if isinstance(reference, str) and reference not in REFERENCES:
            raise ValueError(f"the gated reward's reference is one of {REFERENCES} (or a ReferenceLengths), "
                             f"got {reference!r}")
        self.config = config
        self.preference_fn = preference_fn
        self.preference = preference
        self.reference = None if reference == "group" else reference
        self.use = use
        self.references: dict[str, list[float]] = {}

    def unbound(self) -> list[str]:
        """The options still given as text (they need `bind(session)`)."""
        return [name for name in ("preference", "reference") if isinstance(getattr(self, name), str)]

    def bind(self, session: Any) -> None:
        """Text options become objects: the session's policy before its first update is the reference."""
        if not self.unbound():
            return
        frozen = ReferenceLengths.of_session(session)
        if self.reference == "initial":
            self.reference = frozen
        if isinstance(self.preference, str):
            from helpers.preference.score import PreferenceScore  # torch and a backbone: only when asked for

            self.preference = PreferenceScore.load(self.preference, frozen)

    def prepare(self, groups: Sequence[Any]) -> None:
        if self.unbound():
            raise ValueError(f"the gated reward's {' and '.join(self.unbound())} given as text need the run's "
                             "session: call bind(session) first (helpers.train.train does)")
        if self.reference is not None:
            self.references = self.reference.for_groups(groups)
        prepare = getattr(self.preference, "prepare", None)  # e.g. the reference replies s compares against
        if callable(prepare):
            prepare(groups)

    def breakdown(self, group: Any) -> list[EfficiencyBreakdown]:
        """Every term of R for each trajectory of `group`, with its advantage."""
        preferences = None
        if self.preference is not None:
            preferences = [float(s) for s in self.preference.scores(group)]
        elif self.preference_fn is not None:
            preferences = [float(self.preference_fn(t)) for t in group.trajectories]
        return score_group(**group_numbers(group.trajectories), preferences=preferences,
                           reference_lengths=self.references.get(group.example.id), config=self.config,
                           rng=group_rng(self.config, group))

    def __call__(self, group: Any) -> GroupRewards:
        rows = self.breakdown(group)
        trajectories = group.trajectories
        components = {f"eff/{name}_mean": [float(getattr(row, name)) for row in rows] for name in COMPONENTS}
        components["eff/gated_reward_mean"] = [row.reward for row in rows]
        if self.use:
            rewards = [row.reward for row in rows]
        else:
            rewards = [outcome_reward(t.valid_format, t.exact_match) for t in trajectories]
        return GroupRewards(rewards, components)


def gated_reward_fn(*, preference: Any = None, reference: Any = None, **options: Any) -> GatedReward:
    """The registered factory: `options` are EfficiencyConfig fields (`lambda_tool=0.3`, ...);
    `preference` (s from a preference model: a `helpers.preference.PreferenceScore`, or the folder
    of a saved one) and `reference` (the reference model's lengths: a `ReferenceLengths`, or
    "initial" / "group") are objects from Python or text from a config (see `GatedReward`).
    Without them s = 1 and each group's own lengths are the reference. A number for `preference` is a
    constant s (e.g. 0.5: the scale a preference model's s gives a right answer, without its judgement,
    the control of an ablation against s from the model)."""
    constant = None
    if isinstance(preference, (int, float)) and not isinstance(preference, bool):
        if not 0.0 <= preference <= 1.0:
            raise ValueError(f"a constant preference score s must lie in [0, 1], got {preference}")
        constant, preference = float(preference), None
    names = {f.name for f in fields(EfficiencyConfig)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise ValueError(f"the gated reward has no option {unknown}; options: "
                         f"{sorted(names | {'preference', 'reference'})}")
    return GatedReward(EfficiencyConfig(**options), preference=preference, reference=reference,
                       preference_fn=None if constant is None else (lambda trajectory: constant))


register_reward("gated", gated_reward_fn)
