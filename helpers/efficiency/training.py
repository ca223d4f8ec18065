"""GRPO with the plain and with the gated reward, through the one training step; metrics plots.

A comparison run is `helpers.train.train` with a reward function: `GatedReward(use=False)` for
the plain run (exact match, with every gated term logged so both runs are comparable) and
`GatedReward()` for the gated one, plus a `MismatchObserver` that measures the sampler/trainer
mismatch before each update.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from helpers.efficiency.reference import ReferenceLengths
from helpers.efficiency.rewards import EfficiencyConfig, GatedReward
from helpers.mismatch import MismatchObserver
from helpers.runs import RunDir, read_jsonl, write_json
from helpers.train import open_session, train

REWARDS = ("exact_match", "gated")
COMPARISON = EfficiencyConfig(format_penalty=0.1)  # with the plain run's format penalty: only efficiency differs


def comparison_reward(reward: str, efficiency: EfficiencyConfig, reference: Any = None) -> GatedReward:
    """The reward function of one comparison run: 'exact_match' (gated terms only logged) or 'gated'."""
    if reward not in REWARDS:
        raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
    return GatedReward(efficiency, reference=reference, use=reward == "gated")


def train_with_reward(
    config: Any,
    reward: str = "gated",
    *,
    efficiency: EfficiencyConfig = COMPARISON,
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
    Starts fresh every time (no resume). The run's heavy state (checkpoints, final sampler weights)
    goes to `work` (default runs/efficiency/<out name>), what is worth keeping to `out`: metrics,
    log_ratios.npz, summary.json, whose `sampler_path` the budget sweep reads.
    """
    if length_reference not in ("group", "initial"):
        raise ValueError(f"length_reference must be 'group' or 'initial', got {length_reference!r}")
    out = Path(config.out)
    work_dir = Path(work or Path("runs") / "efficiency" / out.name)
    # the recorded config names the reward the run trains on
    options = asdict(efficiency) if reward == "gated" else {}
    run_config = dataclasses.replace(config, resume=False, out=str(work_dir), save_every=0, reward=reward,
                                     reward_options=options)
    if session is None:
        session = open_session(run_config)
    else:  # a session opened by the caller: run it fresh in the work folder
        session.config, session.run, session.start_step = run_config, RunDir(work_dir), 0
        for stale in (session.run.metrics, session.run.checkpoints):
            stale.unlink(missing_ok=True)
    reference = None
    if length_reference == "initial":
        reference = ReferenceLengths.of_session(session)
    observer = MismatchObserver()
    started = time.perf_counter()
    summary = train(run_config, on_step=on_step, session=session, progress=progress,
                    reward_fn=comparison_reward(reward, efficiency, reference),
                    observers=[observer])
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(work_dir / "metrics.jsonl", out / "metrics.jsonl")
    if observer.history.log_ratios:
        np.savez_compressed(out / "log_ratios.npz",
                            **{f"step{k}": v for k, v in observer.history.log_ratios.items()})
    result = {
        "reward": reward,
        "steps_done": summary["steps_done"],
        "seconds": time.perf_counter() - started,
        "sampler_path": summary.get("sampler_path"),
        "model": config.resolved_model(),
        "efficiency": asdict(efficiency),
        "train": asdict(dataclasses.replace(run_config, out=config.out)),
    }
    write_json(out / "summary.json", result)
    return result


def load_metrics(out: str | Path) -> list[dict]:
    """The metrics rows of a recorded run folder ([] when it has none).

    `reward_mean` is the mean of the reward the run trained on. The folders recorded under
    results/efficiency write it as `reward_mean_used` (beside the exact-match reward's mean), so a
    row with that field is read with it as `reward_mean`.
    """
    rows = read_jsonl(Path(out) / "metrics.jsonl")
    for row in rows:
        if "reward_mean_used" in row:
            row["reward_mean"] = row.pop("reward_mean_used")
    return rows


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
