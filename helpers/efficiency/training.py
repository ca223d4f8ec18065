"""A GRPO step and a short run with the gated reward; metrics loading and plots."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from helpers.efficiency.rewards import EfficiencyConfig, apply_efficiency_rewards_batch, generated_length

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

    length_reference: 'group' (the group's own lengths, no extra cost) or 'initial' (Perplexity's post's
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
    from helpers.train import batch_for_step, open_session, out_of_time

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
        if config.max_minutes is not None and out_of_time(time.perf_counter() - started,
                                                          [r["time_step"] for r in rows], config.max_minutes * 60):
            break
        batch = batch_for_step(session.examples, step, config.questions_per_batch, config.seed,
                               config.balance_sources)
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
