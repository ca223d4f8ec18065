"""From a batch of questions to one policy update, and the GRPO training loop.

One step, always in this order (Happy-LLM §8.3.7):

    save_weights_and_get_sampling_client -> rollout_groups -> score(groups, reward_fn)
    -> assign_advantages -> build_training_datums -> pack_micro_batches
    -> forward_backward(importance_sampling) per micro-batch -> one optim_step

The algorithm (group advantages without std normalisation, exact zero for groups without signal,
token-level importance sampling, no KL) is told in `helpers.advantages`; datums and their packing
are `helpers.datums`, what a step logs is `helpers.metrics`, which questions a step sees is
`helpers.multihop.mix`. The reward is a function of a group (`helpers.reward`), chosen by name in
`TrainConfig.reward`; observers see every step (`StepContext`, before the update; the metrics row,
after it). From a shell: `python -m helpers.train --help`; from a notebook: `train(TrainConfig(max_steps=2))`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pytrio
from tqdm.auto import tqdm

from helpers import config as course_config
from helpers.advantages import assign_advantages
from helpers.datums import (MAX_TRAIN_CONTEXT_TOKENS, TrainingDatum, build_datum, build_training_datums,
                            pack_micro_batches, padded_tokens, weight_micro_batch_for_global_mean)
from helpers.metrics import (degenerate_groups, output_logprobs, rollout_metrics, sampler_trainer_kl, search_counters,
                             search_metrics)
from helpers.multihop.mix import batch_for_step, extra_questions, step_batch
from helpers.reward import RewardFn, score
from helpers.reward_functions import for_session, make_reward
from helpers.rollout import Group, RolloutConfig, rollout_groups
from helpers.runs import RunDir, add_config_arguments, append_jsonl, config_from_args, materialise_checkpoint, result, updated
from helpers.search import SEARCH_TOPK, check_search_topk
from helpers.session import TrainingSession, open_session, save_checkpoint
from helpers.tracking import DEFAULT_TRACKER, open_tracker, run_name

__all__ = [  # the step's parts live in their own modules; these names stay importable from here
    "MAX_TRAIN_CONTEXT_TOKENS", "StepContext", "TrainConfig", "TrainingDatum", "TrainingSession", "batch_for_step",
    "build_datum", "build_training_datums", "degenerate_groups", "extra_questions", "open_session", "optimise",
    "out_of_time", "output_logprobs", "pack_micro_batches", "padded_tokens", "rollout_metrics", "sampler_trainer_kl",
    "save_checkpoint", "step_questions", "train", "train_step", "weight_micro_batch_for_global_mean",
]


# --------------------------------------------------------------------------- config


@dataclass
class TrainConfig:
    """Everything one GRPO run depends on; the CLI flags are these fields with dashes."""

    model: str | None = None  # None: helpers.config.default_model()
    backend: str | None = None  # 'local' or 'pytrio'; None: COURSE_BACKEND or local
    max_steps: int = 20
    questions_per_batch: int = 16
    # group size, budgets and sampling of every rollout (its seed is set per step from `seed`)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    search_backend: str = "local"
    search_topk: int = SEARCH_TOPK  # passages one search returns (its observation must fit rollout's budget)
    # the reward function, by its registered name (helpers.reward_functions.reward_names()), and its options
    reward: str = "exact_match"
    reward_options: dict = field(default_factory=dict)
    # keep only groups with signal, rolling out more questions until the step has its quota
    dynamic_sampling: bool = False
    dynamic_sampling_rounds: int = 4  # rollouts per step at most, the first included
    # batches the first round rolls out at once (on an H200 beside two other runs 2 made the step slower)
    dynamic_sampling_draw: int = 1
    learning_rate: float = 5e-5
    grad_clip_norm: float = 1.0
    lora_rank: int = 16
    train_unembed: bool = False  # LoRA on lm_head too (PyTRIO's default); off keeps the adapter small
    seed: int = 0
    save_every: int = 5
    micro_batch_datums: int = 16
    micro_batch_tokens: int = 16384
    split: str = "train"
    data_source: str | None = None
    # equal share of every data_source per batch: HotpotQA is 13 % of train, and a second search pays there
    balance_sources: bool = False
    # share of each batch drawn from the synthetic multi-hop split (questions that need a second search)
    synthetic_share: float = 0.0
    # share of questions whose first search returns every gold passage (a reading curriculum: gold_first)
    gold_first_share: float = 0.0
    rubric_share: float = 0.0  # share of each batch that is rubric prompts (helpers.rubrics; the post: 0.1)
    rubric_prompts: str | None = None  # the prompts a pass@k filter kept (its JSON file); None: the rubric set
    limit: int | None = None  # use only the first N questions of the split (tiny runs)
    question_filter: str | None = None  # a pass@k filter's file (helpers.question_filter)
    skip: int = 0  # leave out the first N questions of the split (the ones SFT scripted)
    init_from: str | None = None  # an SFT checkpoint (save_state path) to start from
    out: str = "results/runs/grpo"
    max_minutes: float | None = None  # stop (with a checkpoint) before this wall-clock budget
    resume: bool = True  # continue from the last checkpoint in `out` if there is one
    tracker: str = DEFAULT_TRACKER  # or 'tensorboard' / 'swanlab': every step mirrored there (helpers.tracking)

    def __post_init__(self) -> None:
        if isinstance(self.rollout, dict):  # from JSON (a saved config.json) or a preset
            self.rollout = updated(RolloutConfig(), self.rollout)
        if min(self.dynamic_sampling_rounds, self.dynamic_sampling_draw) < 1:
            raise ValueError(f"dynamic_sampling_rounds and dynamic_sampling_draw must be >= 1, got "
                             f"{self.dynamic_sampling_rounds} and {self.dynamic_sampling_draw}")
        check_search_topk(self.search_topk)
        if not 0 <= self.gold_first_share <= 1:
            raise ValueError(f"gold_first_share is a share of the questions, within [0, 1], got {self.gold_first_share}")

    def rollout_config(self, step: int = 0) -> RolloutConfig:
        # a fixed seed per step: a resumed step resamples the same
        return dataclasses.replace(self.rollout, seed=self.seed * 100_003 + step)

    def resolved_model(self) -> str:
        return self.model or course_config.default_model()

    def reward_fn(self) -> RewardFn:
        """The reward function named by `reward`, built with `reward_options`."""
        return make_reward(self.reward, **self.reward_options)


# --------------------------------------------------------------------------- one step


def optimise(training_client, datums: Sequence[TrainingDatum], total_samples: int, adam_params,
             max_datums: int = 8, max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS) -> dict[str, float]:
    """Micro-batched forward_backward on importance_sampling, then a single optim_step."""
    micro_batches = pack_micro_batches(datums, max_datums=max_datums, max_tokens=max_tokens)
    sent: list[pytrio.Datum] = []
    outputs: list[tuple[Any, int]] = []
    trainer: dict[str, float] = {}
    for micro_batch in micro_batches:
        weighted = weight_micro_batch_for_global_mean(micro_batch, total_samples=total_samples)
        output = result(training_client.forward_backward(weighted, loss_fn="importance_sampling"))
        sent.extend(weighted)
        outputs.append((output, len(weighted)))
        for key, value in (getattr(output, "metrics", None) or {}).items():
            if isinstance(value, (int, float)):
                trainer[f"trainer/{key}"] = trainer.get(f"trainer/{key}", 0.0) + float(value)
    if micro_batches:
        step_output = result(training_client.optim_step(adam_params))
        for key, value in (getattr(step_output, "metrics", None) or {}).items():
            if key == "grad_norm":  # before clipping: spikes flag an unstable update
                trainer["grad_norm"] = float(value)
            if key == "skipped_non_finite":
                trainer["optim_skipped"] = float(value)
    trained = sum(int(np.count_nonzero(d.loss_fn_inputs["advantages"].to_numpy())) for d in sent)
    kl = sampler_trainer_kl(sent, outputs)
    if trainer.get("optim_skipped"):
        print("warning: non-finite gradient, optimiser step skipped (weights unchanged); trainer loss "
              f"{trainer.get('trainer/loss_sum', float('nan')):.4g}, log-ratio range "
              f"[{kl.get('log_ratio_min', float('nan')):.3g}, {kl.get('log_ratio_max', float('nan')):.3g}], "
              f"non-finite logprobs {kl.get('logprob_non_finite', 0):.0f}", flush=True)
    real = sum(item.length for item in datums)
    padded = sum(padded_tokens(batch) for batch in micro_batches)
    return {
        "datums": len(datums),
        "micro_batches": len(micro_batches),
        "trained_tokens": trained,
        "input_tokens": real,
        "padded_tokens": padded,
        "padding_share": (padded - real) / padded if padded else 0.0,
        **kl,
        **trainer,
    }


@dataclass
class StepContext:
    """What an observer's `before_update` sees: the step's scored groups, before any gradient."""

    step: int
    config: TrainConfig
    training_client: Any
    groups: list[Group]  # the groups the step trains on, rewards and advantages assigned
    trajectories: list  # their trajectories, flat, in group order


@dataclass
class Sampled:
    """The groups one step drew and the ones it keeps (all of them unless sampling dynamically)."""

    drawn: list[Group]
    kept: list[Group]
    rounds: int
    reward_metrics: dict[str, float]
    sampling_seconds: float
    search_seconds: float
    end_reasons: dict[str, int]
    informative: int  # kept groups with signal (all the kept under dynamic sampling, which keeps no other)
    without_signal: int  # drawn groups without signal


def sample_groups(sampling_client, tokenizer, search_client, batch: Sequence, config: TrainConfig, step: int,
                  reward_fn: RewardFn, extra: Sequence = (), progress: bool = False) -> Sampled:
    """Roll out, score and assign advantages; with dynamic sampling, repeat on `extra` questions
    (`questions_per_batch` at a time) until that many groups have signal or the rounds run out. The
    first round also rolls out `dynamic_sampling_draw - 1` batches of `extra` beside `batch`."""
    quota = config.questions_per_batch
    rounds_allowed = config.dynamic_sampling_rounds if config.dynamic_sampling else 1
    seen = {getattr(example, "id", None) for example in batch}  # an extra question is never drawn twice
    pending = [example for example in extra if getattr(example, "id", None) not in seen]
    first = quota * (config.dynamic_sampling_draw - 1) if config.dynamic_sampling else 0
    questions, pending = list(batch) + pending[:first], pending[first:]
    drawn: list[Group] = []
    signal: list[Group] = []  # the drawn groups with signal, in draw order
    sums: Counter[str] = Counter()  # each reward component summed over trajectories
    sampling = searching = 0.0
    end_reasons: Counter[str] = Counter()
    rounds = total = 0
    while questions:
        base = config.rollout_config(step)
        rollout = dataclasses.replace(base, seed=base.seed + 1_000_003 * rounds)
        groups = rollout_groups(sampling_client, tokenizer, search_client, questions, rollout, progress=progress)
        offset = len(drawn)
        for position, group in enumerate(groups):
            group.index, group.step = offset + position, step
            for trajectory in group.trajectories:
                trajectory.question_index = group.index
        means = score(groups, reward_fn, sampling=(sampling_client, tokenizer))
        assign_advantages(groups)
        stats = groups.stats  # a round is counted once, here (its trajectories: the rollout's own count)
        sums.update({name: mean * stats.trajectories for name, mean in means.items()})
        total += stats.trajectories
        signal.extend(group for group in groups if not group.degenerate)
        sampling += stats.sampling_seconds
        searching += stats.search_seconds
        end_reasons.update(stats.end_reasons)
        drawn.extend(groups)
        rounds += 1
        if not config.dynamic_sampling or len(signal) >= quota or rounds >= rounds_allowed:
            break
        questions, pending = pending[:quota], pending[quota:]
    kept = signal[:quota] if config.dynamic_sampling else list(drawn)
    informative = len(kept) if config.dynamic_sampling else len(signal)
    reward_metrics = {name: value / total for name, value in sums.items()} if total else {}
    return Sampled(drawn, kept, rounds, reward_metrics, sampling, searching, end_reasons, informative,
                   len(drawn) - len(signal))


def train_step(
    training_client,
    tokenizer,
    search_client,
    batch: Sequence,
    config: TrainConfig,
    step: int = 0,
    adam_params=None,
    progress: bool = False,
    *,
    reward_fn: RewardFn | None = None,
    observers: Sequence = (),
    extra: Sequence = (),
) -> tuple[dict[str, float], list[Group]]:
    """One GRPO step in Happy-LLM §8.3.7's order; returns (metrics, the groups it trained on).

    `reward_fn` defaults to `config.reward_fn()`; `extra` are the questions dynamic sampling may
    draw (`extra_questions`). Observers: `before_update(StepContext)` may return metrics to add;
    then each observer is called with the finished metrics row and the config.
    """
    reward_fn = reward_fn or config.reward_fn()
    adam_params = adam_params or adam_for(config)
    started = time.perf_counter()
    # Export the current LoRA first: the old logprobs must come from the policy before this update.
    sampling_client = training_client.save_weights_and_get_sampling_client()
    synced = time.perf_counter()
    stats_before = search_counters(search_client)
    sampled = sample_groups(sampling_client, tokenizer, search_client, batch, config, step, reward_fn, extra, progress)
    drawn = [t for group in sampled.drawn for t in group.trajectories]
    trajectories = [t for group in sampled.kept for t in group.trajectories]
    rolled = time.perf_counter()
    observed = _before_update(observers, StepContext(step, config, training_client, sampled.kept, trajectories))
    measured = time.perf_counter()
    datums = build_training_datums(trajectories)
    update = optimise(training_client, datums, total_samples=len(trajectories), adam_params=adam_params,
                      max_datums=config.micro_batch_datums, max_tokens=config.micro_batch_tokens)
    done = time.perf_counter()
    metrics = {
        "step": step,
        **rollout_metrics(drawn),
        **sampled.reward_metrics,
        "informative_groups": sampled.informative,
        **update,
        **search_metrics(stats_before, search_counters(search_client)),
        "time_sync_weights": synced - started,
        "time_rollout": rolled - synced,
        # Inside the rollout: wall time spent sampling and waiting on search, turn by turn.
        "time_sampling": sampled.sampling_seconds,
        "time_search": sampled.search_seconds,
        "time_training": done - measured,
        "time_step": done - started,
        "learning_rate": adam_params.learning_rate,
        **observed,
    }
    if observed:
        metrics["time_observers"] = measured - rolled
    if config.dynamic_sampling:
        metrics.update(_dynamic_metrics(sampled))
    metrics.update({f"end/{reason}": count for reason, count in sampled.end_reasons.items()})
    metrics["wall_time"] = time.time()
    for observer in observers:
        notify(observer, metrics, config)
    return metrics, sampled.kept


def _before_update(observers: Sequence, context: StepContext) -> dict[str, Any]:
    """Each observer's `before_update(context)`, its metrics merged (the step's measurements)."""
    observed: dict[str, Any] = {}
    for observer in observers:
        before = getattr(observer, "before_update", None)
        if callable(before):
            observed.update(before(context) or {})
    return observed


def _dynamic_metrics(sampled: Sampled) -> dict[str, float]:
    drawn = len(sampled.drawn)
    return {
        "dynamic/rounds": sampled.rounds,
        "dynamic/questions": drawn,
        "dynamic/kept_groups": len(sampled.kept),
        "dynamic/filtered_group_share": sampled.without_signal / drawn if drawn else 0.0,
    }


def notify(observer, metrics: dict, config: TrainConfig) -> None:
    """Hand a finished metrics row to an observer (a callable, or an object with `on_step`)."""
    on_step = getattr(observer, "on_step", None)
    if callable(on_step):
        on_step(metrics, config)
    elif callable(observer):
        observer(metrics, config)


def adam_for(config: TrainConfig) -> pytrio.AdamParams:
    return pytrio.AdamParams(learning_rate=config.learning_rate, grad_clip_norm=config.grad_clip_norm)


def step_questions(session: "TrainingSession", step: int) -> list:
    """The questions of `step`: the split's order, with the synthetic share (if any) mixed in."""
    return step_batch(session.examples, session.synthetic, step, session.config, session.rubric)


# --------------------------------------------------------------------------- the loop


def out_of_time(elapsed: float, step_times: Sequence[float], budget_s: float, first_compiles: bool = True) -> bool:
    """Would another step overrun the budget? Predicted from the slowest of the last three steps.
    Where the first step also compiles the decode step (minutes on a GPU), it predicts nothing; on
    a CPU nothing compiles, and the first step is as long as the next (`first_compiles=False`)."""
    if elapsed >= budget_s:
        return True
    typical = list(step_times[1 if first_compiles else 0:])[-3:]
    return bool(typical) and elapsed + max(typical) > budget_s


def train(
    config: TrainConfig,
    on_step: Callable[[dict], None] | None = None,
    session: TrainingSession | None = None,
    progress: bool = True,
    *,
    reward_fn: RewardFn | None = None,
    observers: Sequence = (),
) -> dict:
    """Run (or resume) GRPO until max_steps or the time budget; returns a summary dict.

    `on_step(metrics)` is called after every step (a live plot, a dashboard, print); observers
    get `before_update`/the metrics row/`close()` (see `train_step`). `reward_fn` overrides
    `config.reward`. Metrics go to <out>/metrics.jsonl, checkpoints every `save_every` steps and
    at the end; with `config.tracker` set, a tracker observes every step too.
    """
    model = config.resolved_model()  # once per run: the tracker and the session name the same model
    tracker = open_tracker(config.tracker, run_name(config.out), {"train": dataclasses.asdict(config), "model": model})
    observers = [*observers, tracker] if tracker.active else list(observers)
    try:
        return _train(config, on_step, session, progress, reward_fn or config.reward_fn(), observers, model)
    finally:
        for observer in observers:
            close = getattr(observer, "close", None)
            if callable(close):
                close()


def _train(config, on_step, session, progress, reward_fn, observers, model) -> dict:
    session = session or open_session(config, model=model)
    reward_fn = for_session(reward_fn, session)  # options bound to the run's policy, rubric prompts scored
    run = session.run
    adam = adam_for(config)
    started = time.perf_counter()
    step = session.start_step
    last_saved = session.start_step
    step_times: list[float] = []
    bar = tqdm(total=config.max_steps, initial=step, desc="GRPO steps", disable=not progress)
    stopped_for_time = False
    while step < config.max_steps:
        if config.max_minutes is not None and out_of_time(time.perf_counter() - started, step_times,
                                                          config.max_minutes * 60,
                                                          first_compiles=course_config.device() == "cuda"):
            stopped_for_time = True
            break
        batch = step_questions(session, step)
        metrics, _ = train_step(
            session.training_client, session.tokenizer, session.search_client, batch, config, step, adam,
            reward_fn=reward_fn, observers=observers, extra=extra_questions(session.examples, step, config, session.synthetic),
        )
        session.optimised = session.optimised or metrics["micro_batches"] > 0
        append_jsonl(run.metrics, metrics)
        session.history.append(metrics)
        step_times.append(metrics["time_step"])
        step += 1
        bar.update(1)
        bar.set_postfix(reward=f"{metrics['reward_mean']:.2f}", em=f"{metrics['exact_match']:.2f}",
                        searches=f"{metrics['search_calls_mean']:.1f}")
        if on_step is not None:
            on_step(metrics)
        if config.save_every and step % config.save_every == 0:
            save_checkpoint(session, step)
            last_saved = step
    bar.close()
    if step != last_saved:
        save_checkpoint(session, step)
    summary = {"steps_done": step, "finished": step >= config.max_steps, "stopped_for_time": stopped_for_time,
               "seconds": time.perf_counter() - started, "checkpoint": (run.last_checkpoint() or {}).get("path")}
    if summary["finished"]:
        response = result(session.training_client.save_weights_for_sampler(f"{Path(config.out).name}-final"))
        summary["sampler_path"] = materialise_checkpoint(response, run.path / "final")
    run.write_json("summary.json", summary)
    return summary


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m helpers.train", description=__doc__.split("\n")[0])
    add_config_arguments(parser, TrainConfig)
    config = config_from_args(TrainConfig, parser.parse_args(argv))
    RunDir(config.out).write_json("command.json", {"argv": ["python", "-m", "helpers.train", *(argv or sys.argv[1:])]})
    summary = train(config)
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
