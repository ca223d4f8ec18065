"""Efficiency-aware rewards from the second seed (Perplexity's post-training of search agents).

The plain Search-R1 reward only asks "was the answer right?". A policy trained on it has no reason
to stop searching or to stop talking. This module adds the gated reward

    R(tau) = r_base(tau) * s(tau) - pen_eff(tau),      pen_eff = lam_tool * pen_tool + lam_len * pen_len

- r_base in {0, 1}: exact match (the gate: no preference credit without a correct answer);
- s in [0, 1]: a pluggable preference score (default 1, i.e. no preference model);
- pen_tool: a group-anchored tool-call penalty (calls beyond what the group's winners needed);
- pen_len: a length penalty against reference lengths (verbose winners, terse losers).

Design decisions the seed leaves open (each one is tested in tests/test_efficiency.py):

1. The tool-call baseline b_g ~ Unif(min, ceil(mean)) over the winners' effective calls is an
   *integer* uniform, both ends included. Calls are counts, so an integer baseline keeps
   Delta = max(0, c - b_g) a whole number of surplus calls.
2. A group with no winner has no efficient solution to anchor on, so no surplus is measured:
   Delta = 0 for everyone and pen_tool = beta_lose for every member. The penalty is then the same
   constant for the whole group and cancels in the group-mean advantage: a group where nobody
   found the answer is never pushed towards searching less (that would suppress exploration).
3. The hard length cap compares against the group's reference lengths: a trajectory longer than
   every reference generation of its group gets pen_len = 1.
4. When no reference lengths are given, the group's own lengths are the reference (a cheap
   self-anchored fallback; the hard cap then never fires).
5. Effective calls are clipped at 0 (c - failed >= 0 even if a count was recorded oddly).

Also here: budget-forced evaluation (`budget_sweep`, the tool-efficiency curve), a GRPO step with
the gated reward (`reward_step`, `train_with_reward`; an adapter until helpers.train has a reward
hook), the notebook widgets and exercise checkers, and a command line:

    python -m helpers.efficiency compare ...   # GRPO with exact match and with the gated reward
    python -m helpers.efficiency budget ...    # accuracy and tokens vs search budget b = 0..10
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

PreferenceFn = Callable[[Any], float]


@dataclass(frozen=True)
class EfficiencyConfig:
    """Weights of the efficiency penalty. The seed gives no numbers; these are CPU-run defaults."""

    lambda_tool: float = 0.2
    lambda_len: float = 0.1
    alpha_win: float = 1.0
    alpha_lose: float = 0.5
    beta_lose: float = 0.1
    preferred_threshold: float = 0.5  # s >= this makes a winner "preferred" (the set W-hat)
    # Not in the seed's formula: Search-R1's -0.1 for a broken final format. 0 keeps the formula
    # exact; 0.1 makes "gated" differ from the plain reward only by the efficiency terms.
    format_penalty: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("lambda_tool", "lambda_len", "alpha_win", "alpha_lose", "beta_lose", "format_penalty"):
            if getattr(self, name) < 0:
                raise ValueError(f"EfficiencyConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.preferred_threshold <= 1.0:
            raise ValueError("EfficiencyConfig.preferred_threshold must lie in [0, 1]")


# ---------------------------------------------------------------- tool-call penalty


def effective_calls(calls: Sequence[int], failed: Sequence[int] | None = None) -> list[int]:
    """c~ = calls - failed calls, never below 0 (a failed search costs the agent nothing extra)."""
    failed = [0] * len(calls) if failed is None else list(failed)
    if len(failed) != len(calls):
        raise ValueError(f"got {len(calls)} call counts but {len(failed)} failed counts")
    return [max(0, int(c) - int(e)) for c, e in zip(calls, failed)]


def _as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


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
    return int(_as_rng(rng).integers(low, high + 1))


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
    refs = list(lengths) if reference_lengths is None else list(reference_lengths)
    refs = [max(float(r), 1.0) for r in refs]
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
    mean = sum(r.reward for r in rows) / n
    for r in rows:
        r.advantage = r.reward - mean  # the Search-R1 group baseline (seed 000, 8.3.5)
    return rows


# ---------------------------------------------------------------- on Trajectory objects


def failed_calls_of(trajectory: Any) -> int:
    """Failed searches of a Trajectory (0 when the rollout did not record them)."""
    for name in ("failed_searches", "failed_search_calls", "search_failures"):
        value = getattr(trajectory, name, None)
        if value is not None:
            return int(value)
    return 0


def generated_length(trajectory: Any) -> int:
    """Tokens the policy generated (assistant turns only; observations are not its output)."""
    return sum(len(turn.completion_tokens) for turn in trajectory.turns)


def apply_efficiency_rewards(
    group: Sequence[Any],
    *,
    config: EfficiencyConfig = EfficiencyConfig(),
    preference_fn: PreferenceFn | None = None,
    reference_lengths: Sequence[float] | None = None,
    rng: np.random.Generator | int | None = None,
) -> list[EfficiencyBreakdown]:
    """Rewrite reward and advantage of one group of Trajectory objects with the gated reward.

    r_base comes from `trajectory.exact_match` (not from `reward`), so applying this twice
    gives the same result. Returns the per-trajectory breakdown.
    """
    rows = score_group(
        r_base=[int(bool(t.exact_match)) for t in group],
        calls=[int(t.search_calls) for t in group],
        lengths=[generated_length(t) for t in group],
        failed=[failed_calls_of(t) for t in group],
        preferences=None if preference_fn is None else [float(preference_fn(t)) for t in group],
        reference_lengths=reference_lengths,
        valid_format=[bool(getattr(t, "valid_format", True)) for t in group],
        config=config,
        rng=rng,
    )
    for trajectory, row in zip(group, rows):
        trajectory.reward = row.reward
        trajectory.advantage = row.advantage
    return rows


def group_by_question(trajectories: Sequence[Any]) -> dict[int, list[Any]]:
    groups: dict[int, list[Any]] = {}
    for t in trajectories:
        groups.setdefault(t.question_index, []).append(t)
    return groups


def apply_efficiency_rewards_batch(
    trajectories: Sequence[Any],
    *,
    config: EfficiencyConfig = EfficiencyConfig(),
    preference_fn: PreferenceFn | None = None,
    reference_lengths: dict[int, Sequence[float]] | None = None,
    step: int = 0,
) -> list[EfficiencyBreakdown]:
    """Apply the gated reward to every group of a rollout batch (grouped by question_index).

    Each group draws its baseline from its own generator seeded by (config.seed, step, question),
    so a run is reproducible and groups do not share one baseline.
    reference_lengths maps question_index to one reference length per group member.
    """
    rows: list[EfficiencyBreakdown] = []
    for q, group in group_by_question(trajectories).items():
        refs = None if reference_lengths is None else reference_lengths.get(q)
        rng = np.random.default_rng([config.seed, step, q])
        rows.extend(
            apply_efficiency_rewards(
                group, config=config, preference_fn=preference_fn, reference_lengths=refs, rng=rng
            )
        )
    return rows


def make_group_reward_fn(
    config: EfficiencyConfig = EfficiencyConfig(),
    preference_fn: PreferenceFn | None = None,
) -> Callable[..., list[EfficiencyBreakdown]]:
    """A hook for a training loop: call it on a finished rollout batch (and the step number)."""

    def hook(trajectories: Sequence[Any], step: int = 0, reference_lengths=None):
        return apply_efficiency_rewards_batch(
            trajectories,
            config=config,
            preference_fn=preference_fn,
            reference_lengths=reference_lengths,
            step=step,
        )

    return hook


# ---------------------------------------------------------------- budget-forced evaluation

BUDGETS = tuple(range(11))  # b = 0 (no search: parametric knowledge only) ... 10 (generous)


@dataclass
class BudgetPoint:
    """One point of a tool-efficiency curve: a policy's score at one stated and enforced budget."""

    policy: str
    budget: int
    questions: int
    accuracy: float
    valid_format_rate: float
    search_calls_mean: float
    output_tokens_mean: float  # tokens the policy generated per question
    input_tokens_mean: float  # prompt tokens read per question, summed over turns (no prefix cache)
    tokens_per_question: float  # input + output: the cost proxy
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def trajectory_cost(trajectory: Any) -> tuple[int, int]:
    """(input, output) tokens of one trajectory as an uncached API would bill them."""
    output = sum(len(t.completion_tokens) for t in trajectory.turns)
    return sum(len(t.prompt_tokens) for t in trajectory.turns), output


def budget_point(policy: str, budget: int, trajectories: Sequence[Any], seconds: float = 0.0) -> BudgetPoint:
    n = max(len(trajectories), 1)
    costs = [trajectory_cost(t) for t in trajectories]
    inputs = sum(c[0] for c in costs) / n
    outputs = sum(c[1] for c in costs) / n
    return BudgetPoint(
        policy=policy,
        budget=int(budget),
        questions=len(trajectories),
        accuracy=sum(bool(t.exact_match) for t in trajectories) / n,
        valid_format_rate=sum(bool(t.valid_format) for t in trajectories) / n,
        search_calls_mean=sum(int(t.search_calls) for t in trajectories) / n,
        output_tokens_mean=outputs,
        input_tokens_mean=inputs,
        tokens_per_question=inputs + outputs,
        seconds=seconds,
    )


def budget_config(budget: int, base: Any = None) -> Any:
    """A rollout config whose system prompt states `budget` and whose rollout enforces it.

    One trajectory per question (group_size 1), temperature 0.6 as in the seed's evaluation.
    """
    import dataclasses

    from helpers.rollout import RolloutConfig

    if budget < 0:
        raise ValueError(f"a search budget is a number of calls >= 0, got {budget}")
    base = base if base is not None else RolloutConfig(temperature=0.6)
    # every allowed call is its own turn, plus the turn that answers
    turns = max(base.max_assistant_turns, int(budget) + 1)
    return dataclasses.replace(base, group_size=1, max_search_calls=int(budget), search_budget=int(budget),
                               max_assistant_turns=turns)


def budget_sweep(
    sampling_client: Any,
    tokenizer: Any,
    search_client: Any,
    examples: Sequence[Any],
    budgets: Sequence[int] = BUDGETS,
    *,
    policy: str = "policy",
    config: Any = None,
    progress: bool = True,
) -> list[BudgetPoint]:
    """Budget-forced evaluation: the same questions at every budget b (stated and enforced).

    The budgets run concurrently (one thread each), so the engine decodes them in shared
    batches; each point's `seconds` is then its wall time within the concurrent sweep.
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    from helpers.rollout import rollout_batch

    if not examples:
        raise ValueError("budget_sweep needs at least one example question")
    budgets = list(budgets)
    bar = tqdm(total=len(budgets), desc=f"budget sweep ({policy})", disable=not progress)

    def one(b: int) -> BudgetPoint:
        started = time.perf_counter()
        trajectories = rollout_batch(
            sampling_client, tokenizer, search_client, list(examples), budget_config(b, config),
            progress=False,
        )
        point = budget_point(policy, b, trajectories, time.perf_counter() - started)
        bar.update(1)
        return point

    with ThreadPoolExecutor(max_workers=max(1, min(len(budgets), 11))) as pool:
        points = list(pool.map(one, budgets))
    bar.close()
    return points


def plot_tool_efficiency(points: Sequence[BudgetPoint], axes=None):
    """Accuracy vs budget (the tool-efficiency curve) and tokens per question vs budget."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    policies = list(dict.fromkeys(p.policy for p in points))
    for name in policies:
        mine = sorted((p for p in points if p.policy == name), key=lambda p: p.budget)
        xs = [p.budget for p in mine]
        axes[0].plot(xs, [p.accuracy for p in mine], "o-", label=name)
        axes[1].plot(xs, [p.search_calls_mean for p in mine], "o-", label=name)
        axes[2].plot(xs, [p.tokens_per_question for p in mine], "o-", label=name)
    for ax, title in zip(axes, ("exact match vs budget", "search calls used", "tokens per question")):
        ax.set_xlabel("search budget b")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].plot([0, max(p.budget for p in points)], [0, max(p.budget for p in points)],
                 ":", color="grey", lw=0.8, label="b")
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].legend()
    return axes


# ---------------------------------------------------------------- training with the gated reward
# ADAPTER (until helpers.train offers a reward hook): the same step as helpers.train.train_step,
# with the gated reward applied between rollout_batch and build_training_datums, and the
# sampler/trainer mismatch measured (one forward) before the update.

REWARDS = ("exact_match", "gated")


def reward_step(
    session: Any,
    batch: Sequence[Any],
    step: int,
    *,
    reward: str = "gated",
    efficiency: EfficiencyConfig = EfficiencyConfig(format_penalty=0.1),
    mismatch_history: Any = None,
    reference_lengths: dict[int, Sequence[float]] | None = None,
) -> tuple[dict[str, Any], list[Any]]:
    """One GRPO step (seed order) with the chosen reward; returns (metrics, trajectories)."""
    import time

    from helpers import mismatch as mm
    from helpers.rollout import rollout_batch
    from helpers.train import adam_for, build_training_datums, optimise, rollout_metrics

    if reward not in REWARDS:
        raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
    config = session.config
    client = session.training_client
    started = time.perf_counter()
    sampling_client = client.save_weights_and_get_sampling_client()
    trajectories = rollout_batch(
        sampling_client, session.tokenizer, session.search_client, list(batch),
        config.rollout_config(step), progress=False,
    )
    rolled = time.perf_counter()
    metrics: dict[str, Any] = {"step": step, "reward_kind": reward}
    metrics.update(rollout_metrics(trajectories))  # plain-reward view, before any rewrite
    # the gated terms are computed (and logged) for both runs, so the two are comparable
    scoring = apply_efficiency_rewards_batch if reward == "gated" else _score_only
    rows = scoring(trajectories, config=efficiency, reference_lengths=reference_lengths, step=step)
    n = max(len(rows), 1)
    for key in ("pen_tool", "pen_len", "pen_eff", "effective_calls", "length"):
        metrics[f"eff/{key}_mean"] = sum(getattr(r, key) for r in rows) / n
    metrics["eff/gated_reward_mean"] = sum(r.reward for r in rows) / n
    metrics["reward_mean_used"] = float(np.mean([t.reward for t in trajectories])) if trajectories else 0.0
    if mismatch_history is not None:
        stats, new, old = mm.measure_step(client, trajectories, step=step)
        if new.size:
            mismatch_history.add(step, new, old)
        for key in ("tokens", "kl_k1", "kl_k3", "mean_abs_log_ratio", "max_abs_log_ratio", "share_outside_band"):
            metrics[f"mismatch/{key}"] = getattr(stats, key)
        for key, value in stats.ratio_quantiles.items():
            metrics[f"mismatch/ratio_{key}"] = value
    measured = time.perf_counter()
    datums = build_training_datums(trajectories)
    metrics.update(
        optimise(client, datums, total_samples=len(trajectories), adam_params=adam_for(config),
                 max_datums=config.micro_batch_datums, max_tokens=config.micro_batch_tokens)
    )
    done = time.perf_counter()
    metrics.update(time_rollout=rolled - started, time_mismatch=measured - rolled,
                   time_training=done - measured, time_step=done - started)
    return metrics, trajectories


class ReferenceLengths:
    """Generated lengths of a frozen reference policy, group_size samples per question, cached."""

    def __init__(self, sampling_client: Any, tokenizer: Any, search_client: Any) -> None:
        self.sampling_client = sampling_client
        self.tokenizer = tokenizer
        self.search_client = search_client
        self.cache: dict[str, list[int]] = {}

    def for_batch(self, batch: Sequence[Any], rollout_config: Any) -> dict[int, list[int]]:
        from helpers.rollout import rollout_batch

        missing = list({ex.id: ex for ex in batch if ex.id not in self.cache}.values())
        if missing:
            done = rollout_batch(self.sampling_client, self.tokenizer, self.search_client, missing,
                                 rollout_config, progress=False)
            for qi, ex in enumerate(missing):
                self.cache[ex.id] = [max(generated_length(t), 1) for t in done if t.question_index == qi]
        return {qi: self.cache[ex.id] for qi, ex in enumerate(batch)}


def _score_only(trajectories, *, config, reference_lengths=None, step=0):
    """The gated breakdown of a batch without touching rewards/advantages (for the plain run)."""
    import copy

    shadow = [copy.copy(t) for t in trajectories]
    return apply_efficiency_rewards_batch(shadow, config=config, reference_lengths=reference_lengths, step=step)


def train_with_reward(
    config: Any,
    reward: str = "gated",
    *,
    efficiency: EfficiencyConfig = EfficiencyConfig(format_penalty=0.1),
    measure_mismatch: bool = True,
    length_reference: str = "group",
    on_step: Callable[[dict], None] | None = None,
    progress: bool = True,
    session: Any = None,
    work: str | None = None,
) -> dict[str, Any]:
    """A short GRPO run with `reward` ('exact_match' or 'gated'); metrics to <out>/metrics.jsonl.

    length_reference: 'group' (the group's own lengths, no extra cost) or 'initial' (the seed's
    definition: a frozen copy of the starting policy generates group_size answers per question,
    once per question, and their lengths are the references — one extra rollout per new question).
    Starts fresh every time (no resume); the final weights are saved for a sampler and their path
    is in the returned summary (for the budget sweep).
    """
    import dataclasses
    import json
    import time
    from pathlib import Path

    from tqdm.auto import tqdm

    from helpers import mismatch as mm
    from helpers.train import batch_for_step, open_session

    config = dataclasses.replace(config, resume=False)
    session = session or open_session(config)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"
    metrics_path.write_text("")
    history = mm.MismatchHistory() if measure_mismatch else None
    if length_reference not in ("group", "initial"):
        raise ValueError(f"length_reference must be 'group' or 'initial', got {length_reference!r}")
    reference = None
    if length_reference == "initial":
        reference = ReferenceLengths(session.training_client.save_weights_and_get_sampling_client(),
                                     session.tokenizer, session.search_client)
    rows: list[dict] = []
    started = time.perf_counter()
    for step in tqdm(range(config.max_steps), desc=f"GRPO ({reward})", disable=not progress):
        if config.max_minutes is not None and rows:
            if time.perf_counter() - started + rows[-1]["time_step"] > config.max_minutes * 60:
                break
        batch = batch_for_step(session.examples, step, config.questions_per_batch, config.seed)
        refs = None if reference is None else reference.for_batch(batch, config.rollout_config(step))
        metrics, _ = reward_step(session, batch, step, reward=reward, efficiency=efficiency,
                                 mismatch_history=history, reference_lengths=refs)
        rows.append(metrics)
        with metrics_path.open("a") as f:
            f.write(json.dumps(metrics, default=float) + "\n")
        if on_step is not None:
            on_step(metrics)
    if history is not None and history.log_ratios:
        np.savez_compressed(out / "log_ratios.npz", **{f"step{k}": v for k, v in history.log_ratios.items()})
    from helpers.train import materialise_checkpoint

    response = session.training_client.save_weights_for_sampler(f"{out.name}-final")
    response = response.result() if hasattr(response, "result") else response
    # weights go to the git-ignored runs/ folder, metrics to `out`
    sampler_path = materialise_checkpoint(str(getattr(response, "path", response)),
                                          Path(work or Path("runs") / "efficiency" / out.name) / "sampler")
    summary = {
        "reward": reward,
        "steps_done": len(rows),
        "seconds": time.perf_counter() - started,
        "sampler_path": sampler_path,
        "model": config.resolved_model(),
        "efficiency": asdict(efficiency),
        "train": {k: v for k, v in asdict(config).items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def load_metrics(out: str | Any) -> list[dict]:
    import json
    from pathlib import Path

    path = Path(out) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_reward_comparison(runs: dict[str, Sequence[dict]], axes=None):
    """Search calls per trajectory, generated tokens, exact match and KL, one line per run."""
    import matplotlib.pyplot as plt

    panels = (
        ("search_calls_mean", "search calls per trajectory"),
        ("assistant_tokens_mean", "generated tokens per trajectory"),
        ("exact_match", "exact match (training batches)"),
        ("eff/pen_eff_mean", "efficiency penalty (mean)"),
    )
    if axes is None:
        _, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5))
    for label, rows in runs.items():
        steps = [r["step"] for r in rows]
        for ax, (key, _) in zip(axes, panels):
            ax.plot(steps, [r.get(key, np.nan) for r in rows], "o-", label=label)
    for ax, (_, title) in zip(axes, panels):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    return axes


# ---------------------------------------------------------------- widgets (notebooks 11, 12)


def breakdown_html(rows: Sequence[EfficiencyBreakdown], labels: Sequence[str] | None = None) -> str:
    """A table of every term of R, with a bar for the advantage. All text is escaped."""
    import html

    labels = list(labels) if labels is not None else [f"τ{i}" for i in range(len(rows))]
    scale = max([abs(r.advantage) for r in rows] + [1e-9])
    head = ("trajectory", "r_base", "calls", "c~", "L", "L_ref", "pen_tool", "pen_len", "pen_eff", "R", "A")
    out = ['<table class="eff-table" style="border-collapse:collapse;font-family:monospace">',
           "<tr>" + "".join(f'<th style="padding:2px 8px;text-align:right">{html.escape(h)}</th>' for h in head)
           + '<th style="padding:2px 8px">advantage</th></tr>']
    for label, r in zip(labels, rows):
        cells = (label, r.r_base, r.calls, r.effective_calls, r.length, f"{r.reference_length:.0f}",
                 f"{r.pen_tool:.3f}", f"{r.pen_len:.3f}", f"{r.pen_eff:.3f}", f"{r.reward:+.3f}",
                 f"{r.advantage:+.3f}")
        width = int(60 * abs(r.advantage) / scale)
        colour = "#2a9d8f" if r.advantage >= 0 else "#e76f51"
        block = f'<div style="width:{width}px;background:{colour}">&nbsp;</div>'
        left, right = ("", block) if r.advantage >= 0 else (block, "")
        bar = ('<div style="display:flex;width:120px">'
               f'<div style="width:60px;display:flex;justify-content:flex-end">{left}</div>'
               f'<div style="width:60px">{right}</div></div>')
        out.append("<tr>" + "".join(f'<td style="padding:2px 8px;text-align:right">{html.escape(str(c))}</td>'
                                    for c in cells) + f"<td>{bar}</td></tr>")
    out.append("</table>")
    return "".join(out)


def group_numbers(group: Sequence[Any]) -> dict[str, list]:
    """The inputs of `score_group` read off a group of Trajectory objects."""
    return {
        "r_base": [int(bool(t.exact_match)) for t in group],
        "calls": [int(t.search_calls) for t in group],
        "failed": [failed_calls_of(t) for t in group],
        "lengths": [generated_length(t) for t in group],
        "valid_format": [bool(getattr(t, "valid_format", True)) for t in group],
    }


def penalty_explorer(
    group: Sequence[Any] | None = None,
    *,
    numbers: dict[str, Sequence[Any]] | None = None,
    labels: Sequence[str] | None = None,
    config: EfficiencyConfig = EfficiencyConfig(),
):
    """Sliders for lambda_tool, lambda_len, alpha_win, alpha_lose, beta_lose and the baseline seed,
    recomputing every penalty, reward and advantage of one group as they move.

    Give either a group of Trajectory objects or `numbers` (keys of `score_group`).
    """
    import ipywidgets as widgets

    if (group is None) == (numbers is None):
        raise ValueError("give exactly one of `group` (Trajectory objects) or `numbers`")
    if group is not None:
        numbers = group_numbers(group)
    style = {"description_width": "90px"}
    sliders = {
        name: widgets.FloatSlider(value=getattr(config, name), min=0.0, max=high, step=0.05,
                                  description=name, continuous_update=True, style=style,
                                  layout=widgets.Layout(width="360px"))
        for name, high in (("lambda_tool", 1.0), ("lambda_len", 1.0), ("alpha_win", 2.0),
                           ("alpha_lose", 2.0), ("beta_lose", 1.0))
    }
    sliders["seed"] = widgets.IntSlider(value=config.seed, min=0, max=20, description="baseline seed",
                                        style=style, layout=widgets.Layout(width="360px"))
    table = widgets.HTML()
    note = widgets.HTML()

    def recompute(_=None):
        cfg = EfficiencyConfig(**{k: s.value for k, s in sliders.items()},
                               preferred_threshold=config.preferred_threshold,
                               format_penalty=config.format_penalty)
        rows = score_group(config=cfg, **numbers)
        table.value = breakdown_html(rows, labels)
        baseline = rows[0].tool_baseline if rows else None
        bounds = baseline_range(effective_calls(numbers["calls"], numbers.get("failed")),
                                [bool(r) for r in numbers["r_base"]])
        note.value = (f"<b>b_g = {baseline}</b> drawn from {bounds}" if bounds
                      else "<b>no winner</b>: no baseline, every member pays beta_lose only")
        explorer.rows = rows

    explorer = widgets.VBox([widgets.HBox([widgets.VBox(list(sliders.values())[:3]),
                                           widgets.VBox(list(sliders.values())[3:])]), note, table])
    explorer.sliders = sliders
    for slider in sliders.values():
        slider.observe(recompute, names="value")
    recompute()
    return explorer


def budget_curve_widget(points: Sequence[BudgetPoint]):
    """Pick policies and a y-axis; the tool-efficiency curve redraws."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(p.policy for p in points))
    pick = widgets.SelectMultiple(options=policies, value=tuple(policies), description="policies")
    metric = widgets.Dropdown(options=[("exact match", "accuracy"), ("search calls", "search_calls_mean"),
                                       ("tokens / question", "tokens_per_question"),
                                       ("valid format", "valid_format_rate")],
                              value="accuracy", description="y axis")
    out = widgets.Output()

    def redraw(_=None):
        out.clear_output(wait=True)
        with out:
            fig, ax = plt.subplots(figsize=(6, 3.6))
            for name in pick.value:
                mine = sorted((p for p in points if p.policy == name), key=lambda p: p.budget)
                ax.plot([p.budget for p in mine], [getattr(p, metric.value) for p in mine], "o-", label=name)
            ax.set_xlabel("search budget b")
            ax.set_ylabel(metric.label)
            ax.grid(alpha=0.3)
            if pick.value:
                ax.legend()
            plt.show()

    pick.observe(redraw, names="value")
    metric.observe(redraw, names="value")
    redraw()
    box = widgets.VBox([widgets.HBox([pick, metric]), out])
    box.controls = {"policies": pick, "metric": metric}
    return box


# ---------------------------------------------------------------- exercises (notebooks 11, 12)
# Expected answers are worked out here from the seed's formulas, not with the functions above,
# so a solution that uses those functions also checks them.


def _report(ok: bool, hint: str) -> bool:
    from helpers.widgets.exercises import report

    return report(ok, hint)


def _numbers(guess: Any, n: int) -> list[float] | None:
    try:
        values = [float(x) for x in guess]
    except (TypeError, ValueError):
        return None
    return values if len(values) == n else None


def check_tool_penalties(guess: Any) -> bool:
    e = math.exp
    expected = [0.0, 0.0, 1.0 * (1 - e(-2)), 0.5 * (1 - e(-1)) + 0.1]
    values = _numbers(guess, 4)
    if values is None:
        return _report(False, "give four numbers: p = 1 - exp(-max(0, c - b_g)); winners alpha_win*p, "
                              "the loser alpha_lose*p + beta_lose")
    ok = all(abs(a - b) < 1e-6 for a, b in zip(values, expected))
    return _report(ok, f"you gave {[round(v, 4) for v in values]}; surplus calls over b_g = 2 are 0, 0, 2 "
                       "and 1 — and the loser also pays beta_lose")


def check_no_winner_advantages(guess: Any) -> bool:
    values = _numbers(guess, 4)
    if values is None:
        return _report(False, "give four advantages (reward minus the group's mean reward)")
    return _report(all(abs(v) < 1e-9 for v in values),
                   "with no winner there is no baseline: everyone pays the same beta_lose, and a "
                   "constant cancels in reward - mean")


def check_length_penalty(guess: Any) -> bool:
    if guess is None or guess is Ellipsis:
        return _report(False, "compute 1 - exp(-max(0, L / b_win - 1)) (300 is not above the cap 320)")
    return _report(abs(float(guess) - (1 - math.exp(-0.5))) < 1e-6,
                   f"you gave {guess}; L / b_win - 1 = 300 / 200 - 1 = 0.5")


def check_best_budget(points: Sequence[BudgetPoint], policy: str, guess: Any) -> bool:
    mine = sorted((p for p in points if p.policy == policy), key=lambda p: p.budget)
    if not mine:
        return _report(False, f"no points for policy {policy!r}")
    top = max(p.accuracy for p in mine)
    best = next(p.budget for p in mine if p.accuracy == top)
    if guess is None or guess is Ellipsis:
        return _report(False, "the smallest budget whose accuracy equals the curve's maximum")
    return _report(int(guess) == best, f"you said {guess}; look for the first budget reaching {top:.3f}")


def check_tokens_per_correct(points: Sequence[BudgetPoint], policy: str, budget: int, guess: Any) -> bool:
    point = next((p for p in points if p.policy == policy and p.budget == budget), None)
    if point is None:
        return _report(False, f"no point for {policy!r} at budget {budget}")
    expected = math.inf if point.accuracy == 0 else point.tokens_per_question / point.accuracy
    if guess is None or guess is Ellipsis:
        return _report(False, "tokens per question divided by the share answered correctly (inf if none)")
    ok = (math.isinf(expected) and math.isinf(float(guess))) or (
        not math.isinf(expected) and abs(float(guess) - expected) <= 1e-6 * max(1.0, expected))
    return _report(ok, f"you said {guess}; divide tokens_per_question by accuracy")


def check_turns_for_budget(budget: int, guess: Any) -> bool:
    if guess is None or guess is Ellipsis:
        return _report(False, "one assistant turn per search call, plus the turn that answers")
    return _report(int(guess) == budget + 1, f"you said {guess}; each call is its own turn, then one more")


# ---------------------------------------------------------------- command line


def sampling_client_for(service: Any, model: str, checkpoint: str | None) -> Any:
    """A sampler for the base model (checkpoint None), a sampler export, or a save_state path."""
    if not checkpoint:
        return service.create_sampling_client(base_model=model)
    try:
        return service.create_sampling_client(base_model=model, model_path=checkpoint)
    except Exception:  # a training state the service will not sample from directly
        return service.create_training_client_from_state(checkpoint).save_weights_and_get_sampling_client()


def main(argv: Sequence[str] | None = None) -> Any:
    """python -m helpers.efficiency compare | budget  (see --help of each)."""
    import argparse
    import json
    from pathlib import Path

    from helpers.train import TrainConfig, add_config_arguments, config_from_args

    parser = argparse.ArgumentParser(prog="python -m helpers.efficiency")
    sub = parser.add_subparsers(dest="command", required=True)
    compare = sub.add_parser("compare", help="GRPO with the plain and with the gated reward")
    add_config_arguments(compare, TrainConfig, TrainConfig(max_steps=10, questions_per_batch=4,
                                                            group_size=4, out="results/efficiency"))
    compare.add_argument("--rewards", default="exact_match,gated")
    compare.add_argument("--length-reference", default="group", choices=("group", "initial"))
    for f in ("lambda_tool", "lambda_len", "alpha_win", "alpha_lose", "beta_lose", "format_penalty"):
        compare.add_argument("--" + f.replace("_", "-"), dest=f, type=float,
                             default=getattr(EfficiencyConfig(format_penalty=0.1), f))
    budget = sub.add_parser("budget", help="budget-forced evaluation, b = 0 .. 10")
    budget.add_argument("--model", default=None)
    budget.add_argument("--policy", action="append", default=[],
                        help="NAME=CHECKPOINT (sampler weights or save_state path); NAME= for the base")
    budget.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    budget.add_argument("--split", default="test")
    budget.add_argument("--limit", type=int, default=50)
    budget.add_argument("--max-assistant-tokens", type=int, default=256)
    budget.add_argument("--max-tool-response-tokens", type=int, default=512)
    budget.add_argument("--max-trajectory-tokens", type=int, default=8192)
    budget.add_argument("--temperature", type=float, default=0.6)
    budget.add_argument("--out", default="results/efficiency/budget_sweep.json")
    args = parser.parse_args(argv)

    if args.command == "compare":
        train_config = config_from_args(TrainConfig, args)
        eff_config = EfficiencyConfig(**{f: getattr(args, f) for f in (
            "lambda_tool", "lambda_len", "alpha_win", "alpha_lose", "beta_lose", "format_penalty")})
        summaries = {}
        for reward in args.rewards.split(","):
            import dataclasses

            cfg = dataclasses.replace(train_config, out=str(Path(train_config.out) / reward))
            summaries[reward] = train_with_reward(cfg, reward, efficiency=eff_config,
                                                  length_reference=args.length_reference)
        print(json.dumps(summaries, indent=2, default=str))
        return summaries

    from helpers import config as course_config
    from helpers.data import load_examples
    from helpers.engine import connect
    from helpers.rollout import RolloutConfig
    from helpers.search import create_search_client

    model = args.model or course_config.default_model()
    service = connect()
    examples = load_examples(args.split, limit=args.limit)
    search_client = create_search_client("local")
    base = RolloutConfig(temperature=args.temperature, max_assistant_tokens=args.max_assistant_tokens,
                         max_tool_response_tokens=args.max_tool_response_tokens,
                         max_trajectory_tokens=args.max_trajectory_tokens, max_assistant_turns=12)
    budgets = [int(b) for b in args.budgets.split(",")]
    # one command per policy is fine: points already in --out for other policies are kept
    points = load_budget_points(args.out)
    for spec in args.policy or ["base="]:
        name, _, checkpoint = spec.partition("=")
        sampler = sampling_client_for(service, model, checkpoint or None)
        tokenizer = sampler.get_tokenizer()
        mine = budget_sweep(sampler, tokenizer, search_client, examples, budgets, policy=name, config=base)
        points = [p for p in points if p.policy != name] + mine
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps([p.as_dict() for p in points], indent=1))
    print(json.dumps([p.as_dict() for p in points], indent=1))
    return points


def load_budget_points(path: str | Any) -> list[BudgetPoint]:
    import json
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        return []
    return [BudgetPoint(**row) for row in json.loads(path.read_text())]


if __name__ == "__main__":
    main()
