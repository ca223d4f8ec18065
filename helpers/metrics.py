"""What a batch of finished trajectories says, in one definition for every stage that reports it.

`batch_summary` is the arithmetic of a batch (exact match, format, searches, tokens), read from
one mapping of facts per trajectory (`trajectory_facts`; an evaluation row has the same keys).
Training logs it per step with what only training has (advantages, degenerate groups, the
sampler-trainer KL, Happy-LLM §8.3.8); evaluation summarises its rows with it
(`helpers.analyse.summary_of`); the budget sweep prices its points with it
(`helpers.efficiency.budget`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pytrio

from helpers.runs import result
from helpers.trajectory import groups_of


def trajectory_facts(trajectory: Any) -> dict[str, Any]:
    """The numbers of one finished trajectory that batch summaries read (an evaluation row's keys)."""
    return {
        "reward": trajectory.reward,
        "valid_format": bool(trajectory.valid_format),
        "exact_match": bool(trajectory.exact_match),
        "search_calls": getattr(trajectory, "search_calls", 0),
        "failed_searches": getattr(trajectory, "failed_searches", 0),
        "truncated_observations": getattr(trajectory, "truncated_observations", 0),
        "assistant_turns": len(trajectory.turns),
        "sampled_tokens": trajectory.sampled_tokens,
        "trajectory_tokens": trajectory.total_tokens,
    }


def batch_summary(facts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Shares, means and counts over a batch; every mean is 0 for an empty batch."""
    n = max(len(facts), 1)

    def share(key: str) -> float:
        return sum(bool(f.get(key)) for f in facts) / n

    def values(key: str) -> list[float]:
        return [float(f.get(key) or 0) for f in facts]

    calls = [int(f.get("search_calls") or 0) for f in facts]
    lengths = values("trajectory_tokens")
    return {
        "trajectories": len(facts),
        "reward_mean": sum(values("reward")) / n,
        "exact_match": share("exact_match"),
        "valid_format_rate": share("valid_format"),
        "search_calls_mean": sum(calls) / n,
        "no_search_share": sum(c == 0 for c in calls) / n,
        "multi_search_share": sum(c >= 2 for c in calls) / n,
        "failed_searches": int(sum(values("failed_searches"))),
        "truncated_observations": int(sum(values("truncated_observations"))),
        "assistant_turns_mean": sum(values("assistant_turns")) / n,
        "sampled_tokens_mean": sum(values("sampled_tokens")) / n,
        "trajectory_tokens_mean": sum(lengths) / n,
        "trajectory_tokens_max": int(max(lengths, default=0)),
    }


def output_logprobs(output: Any, index: int) -> np.ndarray | None:
    """Trainer logprobs of datum `index` from a forward / forward_backward result (None if absent)."""
    output = result(output)
    outputs = getattr(output, "loss_fn_outputs", None)
    if outputs is None and isinstance(output, dict):
        outputs = output.get("loss_fn_outputs")
    if not outputs or index >= len(outputs):
        return None
    item = outputs[index]
    value = item.get("logprobs") if isinstance(item, dict) else getattr(item, "logprobs", None)
    if value is None:
        return None
    array = value.to_numpy() if hasattr(value, "to_numpy") else np.asarray(value)
    return np.asarray(array, dtype=np.float64).reshape(-1)


def sampler_trainer_kl(datums: Sequence[pytrio.Datum], outputs: Sequence) -> dict[str, float]:
    """KL between the sampler that generated the tokens and the trainer that scores them.

    Measured on sampled assistant tokens only (advantage != 0): k1 = mean(old - new) and the
    always-positive k3 = mean(exp(new - old) - (new - old) - 1). Both are ~0 when sampler and
    trainer agree; a large value means the importance ratio is doing real work (or a bug).
    """
    old_all, new_all = [], []
    for datum, output, index in _pairs(datums, outputs):
        new = output_logprobs(output, index)
        if new is None:
            continue
        inputs = datum.loss_fn_inputs
        mask = inputs["advantages"].to_numpy().reshape(-1) != 0
        old = inputs["logprobs"].to_numpy().reshape(-1).astype(np.float64)
        if len(new) != len(old):
            continue
        old_all.append(old[mask])
        new_all.append(new[mask])
    if not old_all:
        return {}
    old = np.concatenate(old_all)
    new = np.concatenate(new_all)
    if old.size == 0:
        return {}
    diff = new - old
    finite = np.isfinite(diff)
    return {
        "kl_sampler_trainer_k1": float(np.mean(-diff)),
        "kl_sampler_trainer_k3": float(np.mean(np.expm1(diff) - diff)),
        "trainer_logprob_mean": float(np.mean(new)),
        "sampler_logprob_mean": float(np.mean(old)),
        # the extremes of log(ratio) = new - old: exp() of the loss overflows past ~88, and a token the
        # sampler drew at a probability the trainer calls ~0 (or the reverse) shows up here first
        "logprob_non_finite": float(np.count_nonzero(~finite)),
        **({"log_ratio_max": float(np.max(diff[finite])), "log_ratio_min": float(np.min(diff[finite]))}
           if finite.any() else {}),
    }


def _pairs(datums, outputs):
    """(datum, output-of-its-call, index-inside-that-call) for micro-batched results."""
    position = 0
    for output, size in outputs:
        for index in range(size):
            yield datums[position + index], output, index
        position += size


def degenerate_groups(trajectories: Sequence) -> tuple[int, int]:
    """(groups whose advantages are all zero, groups) — a degenerate group teaches nothing."""
    groups = groups_of(trajectories)
    return sum(group.degenerate for group in groups), len(groups)


def rollout_metrics(trajectories: Sequence) -> dict[str, float]:
    """What Happy-LLM §8.3.8 asks to log about a training batch: `batch_summary` under the names a
    metrics row uses, the second searches' advantage, degenerate groups, and EM per data source."""
    summary = batch_summary([trajectory_facts(t) for t in trajectories])
    bad, groups = degenerate_groups(trajectories)
    return {
        **{key: summary[key] for key in ("trajectories", "reward_mean", "exact_match", "valid_format_rate",
                                         "search_calls_mean", "no_search_share")},
        **_second_searches(trajectories),
        **{key: summary[key] for key in ("failed_searches", "truncated_observations", "assistant_turns_mean",
                                         "trajectory_tokens_mean", "trajectory_tokens_max")},
        "assistant_tokens_mean": summary["sampled_tokens_mean"],
        "degenerate_groups": bad,
        "degenerate_group_share": bad / groups if groups else 0.0,
        **_per_source(trajectories),
    }


def _second_searches(trajectories: Sequence, suffix: str = "") -> dict[str, float | None]:
    """Share of trajectories with >= 2 searches, and their mean group advantage
    (> 0: GRPO pushes towards searching again; < 0: away from it)."""
    multi = [t.advantage for t in trajectories if t.search_calls >= 2]
    return {f"multi_search_share{suffix}": len(multi) / max(len(trajectories), 1),
            f"multi_search_advantage_mean{suffix}": float(np.mean(multi)) if multi else None}


def _per_source(trajectories: Sequence) -> dict[str, float | None]:
    """EM and second searches per data_source, when a batch mixes sources."""
    by_source: dict[str, list] = {}
    for t in trajectories:
        by_source.setdefault(t.example.data_source, []).append(t)
    if len(by_source) < 2:
        return {}
    out: dict[str, float | None] = {}
    for name, items in sorted(by_source.items()):
        out[f"exact_match/{name}"] = sum(bool(t.exact_match) for t in items) / len(items)
        out.update(_second_searches(items, f"/{name}"))
    return out


def search_counters(search_client) -> dict[str, float]:
    """The search client's counters now (empty for a client that keeps none)."""
    stats = getattr(search_client, "stats", None)
    if stats is None:
        return {}
    values = dict(stats.as_dict())
    values["total_latency"] = getattr(stats, "total_latency", 0.0)
    if hasattr(search_client, "handed"):  # a reading curriculum's searches answered with gold passages
        values["gold_handed"] = search_client.handed
    return values


def search_metrics(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The search client's counters over one step."""
    metrics = {
        **{f"search_{key}": after.get(key, 0) - before.get(key, 0) for key in ("requests", "errors", "timeouts")},
        # Searches run concurrently, so this is summed latency, not wall time.
        "time_search_latency_sum": after.get("total_latency", 0.0) - before.get("total_latency", 0.0),
    }
    if "gold_handed" in after:
        metrics["search_gold_handed"] = after["gold_handed"] - before.get("gold_handed", 0)
    return metrics
