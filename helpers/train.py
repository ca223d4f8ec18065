"""From a batch of questions to one policy update, and the GRPO training loop.

One step, always in this order (Happy-LLM §8.3.7):

    save_weights_and_get_sampling_client -> rollout_groups -> score(groups, reward_fn)
    -> assign_advantages -> build_training_datums -> pack_micro_batches
    -> forward_backward(importance_sampling) per micro-batch -> one optim_step

The reward is a function of a group (`helpers.reward`), chosen by name in `TrainConfig.reward`;
observers see every step (`StepContext`, before the update; the metrics row, after it). Run it
from a shell (`python -m helpers.train --help`) or from a notebook with the same `TrainConfig`:
`train(TrainConfig(max_steps=2), on_step=print)`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import shutil
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
from helpers.data import load_examples
from helpers.multihop.build import SPLIT as SYNTHETIC_SPLIT
from helpers.multihop.mix import batch_with_share, cycle
from helpers.engine import connect
from helpers.reward import RewardFn, assign_advantages, score
from helpers.reward_functions import make_reward
from helpers.rollout import Group, RolloutConfig, groups_of, rollout_groups, stitch
from helpers.runs import (RunDir, add_config_arguments, append_jsonl, config_from_args, materialise_checkpoint,
                          result, resume_checkpoint, updated)
from helpers.search import create_search_client
from helpers.tracking import DEFAULT_TRACKER, open_tracker, run_name

MAX_TRAIN_CONTEXT_TOKENS = 8192


# --------------------------------------------------------------------------- datums


@dataclass
class TrainingDatum:
    """One trajectory as a PyTRIO Datum, plus its input length (what packing sorts by)."""

    datum: pytrio.Datum
    length: int


def build_datum(trajectory, max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS) -> TrainingDatum:
    """Stitch every assistant turn of a trajectory into one shifted training sequence.

    The first prompt and each later observation delta (tool results, chat-template glue) are
    context: old logprob 0 and advantage 0. Sampled assistant tokens keep their sampler logprobs
    and carry the trajectory's advantage. The shift happens once, at the very end.
    """
    if not trajectory.turns:
        raise ValueError("cannot build a training datum from a trajectory with no assistant turns")
    stitched = stitch(trajectory)
    sampled = stitched.sampled
    if not any(sampled):
        raise ValueError("cannot build a training datum from a trajectory with no assistant tokens")
    advantage = float(trajectory.advantage)
    advantages = [advantage if is_sampled else 0.0 for is_sampled in sampled]

    input_tokens = stitched.tokens[:-1]
    if len(input_tokens) > max_tokens:
        raise ValueError(
            f"datum has {len(input_tokens)} input tokens, more than the training context of "
            f"{max_tokens}; lower max_trajectory_tokens in the rollout config"
        )
    datum = pytrio.Datum(
        model_input=pytrio.ModelInput.from_ints(input_tokens),
        loss_fn_inputs={
            "target_tokens": np.asarray(stitched.tokens[1:], dtype=np.int64),
            "logprobs": np.asarray(stitched.logprobs[1:], dtype=np.float32),
            "advantages": np.asarray(advantages[1:], dtype=np.float32),
        },
    )
    return TrainingDatum(datum, len(input_tokens))


def build_training_datums(trajectories: Sequence, max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS) -> list[TrainingDatum]:
    """Datums for every trajectory that carries signal; zero advantage gives zero gradient."""
    return [build_datum(t, max_tokens) for t in trajectories if t.advantage != 0.0]


def padded_tokens(micro_batch: Sequence[TrainingDatum]) -> int:
    """Tokens a padded batch really costs: every row is as long as the longest."""
    return len(micro_batch) * max((item.length for item in micro_batch), default=0)


def pack_micro_batches(
    datums: Sequence[TrainingDatum],
    max_datums: int = 8,
    max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS,
) -> list[list[TrainingDatum]]:
    """First-fit decreasing by length under a cap on datums and on padded tokens per micro-batch.

    Sorting longest first means each micro-batch's first datum sets its padded width, so similar
    lengths end up together and padding stays small. A datum longer than `max_tokens` on its own
    still gets a micro-batch of one (it already passed the training-context check).
    """
    if max_datums < 1 or max_tokens < 1:
        raise ValueError("max_datums and max_tokens must both be at least 1")
    batches: list[list[TrainingDatum]] = []
    for item in sorted(datums, key=lambda d: d.length, reverse=True):
        for batch in batches:
            width = max(batch[0].length, item.length)
            if len(batch) < max_datums and (len(batch) + 1) * width <= max_tokens:
                batch.append(item)
                break
        else:
            batches.append([item])
    return batches


def weight_micro_batch_for_global_mean(
    micro_batch: Sequence[TrainingDatum], total_samples: int
) -> list[pytrio.Datum]:
    """Scale advantages (or SFT weights) by n_k / N so per-call means add up to the global mean.

    forward_backward averages the loss over the datums of one call; importance_sampling is linear
    in the advantages and cross_entropy in the weights, so this weight turns sum_k mean(L_k) into
    mean(L_global). Targets and old logprobs are untouched.
    """
    if total_samples < len(micro_batch) or total_samples < 1:
        raise ValueError(
            f"total_samples ({total_samples}) must count every trajectory of the rollout, "
            f"so it cannot be smaller than the micro-batch ({len(micro_batch)})"
        )
    weight = np.float32(len(micro_batch) / total_samples)
    weighted = []
    for item in micro_batch:
        inputs = {key: value.to_numpy() for key, value in item.datum.loss_fn_inputs.items()}
        for key in {"advantages", "weights"} & set(inputs):
            inputs[key] = inputs[key] * weight
        weighted.append(pytrio.Datum(model_input=item.datum.model_input, loss_fn_inputs=inputs))
    return weighted


# --------------------------------------------------------------------------- metrics


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
    return {
        "kl_sampler_trainer_k1": float(np.mean(-diff)),
        "kl_sampler_trainer_k3": float(np.mean(np.expm1(diff) - diff)),
        "trainer_logprob_mean": float(np.mean(new)),
        "sampler_logprob_mean": float(np.mean(old)),
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
    """What Happy-LLM §8.3.8 asks to log about a batch of trajectories (also used by eval)."""
    n = max(len(trajectories), 1)

    def share(predicate) -> float:
        return sum(1 for t in trajectories if predicate(t)) / n

    def total(name: str) -> int:
        return int(sum(getattr(t, name, 0) or 0 for t in trajectories))

    bad, groups = degenerate_groups(trajectories)
    lengths = [t.total_tokens for t in trajectories]
    assistant = [t.sampled_tokens for t in trajectories]
    return {
        "trajectories": len(trajectories),
        "reward_mean": float(np.mean([t.reward for t in trajectories])) if trajectories else 0.0,
        "exact_match": share(lambda t: bool(t.exact_match)),
        "valid_format_rate": share(lambda t: bool(t.valid_format)),
        "search_calls_mean": total("search_calls") / n,
        "no_search_share": share(lambda t: t.search_calls == 0),
        **_second_searches(trajectories),
        "failed_searches": total("failed_searches"),
        "truncated_observations": total("truncated_observations"),
        "assistant_turns_mean": sum(len(t.turns) for t in trajectories) / n,
        "trajectory_tokens_mean": float(np.mean(lengths)) if lengths else 0.0,
        "trajectory_tokens_max": int(max(lengths, default=0)),
        "assistant_tokens_mean": float(np.mean(assistant)) if assistant else 0.0,
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
    # the reward function, by its registered name (helpers.reward_functions.reward_names()), and its options
    reward: str = "exact_match"
    reward_options: dict = field(default_factory=dict)
    # keep only groups with signal, rolling out more questions until the step has its quota
    dynamic_sampling: bool = False
    dynamic_sampling_rounds: int = 4  # rollouts per step at most, the first included
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
    limit: int | None = None  # use only the first N questions of the split (tiny runs)
    skip: int = 0  # leave out the first N questions of the split (the ones SFT scripted)
    init_from: str | None = None  # an SFT checkpoint (save_state path) to start from
    out: str = "results/runs/grpo"
    max_minutes: float | None = None  # stop (with a checkpoint) before this wall-clock budget
    resume: bool = True  # continue from the last checkpoint in `out` if there is one
    tracker: str = DEFAULT_TRACKER  # or 'tensorboard' / 'swanlab': every step mirrored there (helpers.tracking)

    def __post_init__(self) -> None:
        if isinstance(self.rollout, dict):  # from JSON (a saved config.json) or a preset
            self.rollout = updated(RolloutConfig(), self.rollout)
        if self.dynamic_sampling_rounds < 1:
            raise ValueError(f"dynamic_sampling_rounds must be >= 1, got {self.dynamic_sampling_rounds}")

    def rollout_config(self, step: int = 0) -> RolloutConfig:
        # a fixed seed per step: a resumed step resamples the same
        return dataclasses.replace(self.rollout, seed=self.seed * 100_003 + step)

    def resolved_model(self) -> str:
        return self.model or course_config.default_model()

    def reward_fn(self) -> RewardFn:
        """The reward function named by `reward`, built with `reward_options`."""
        return make_reward(self.reward, **self.reward_options)


# --------------------------------------------------------------------------- data order


def batch_for_step(examples: Sequence, step: int, size: int, seed: int, balance_sources: bool = False) -> list:
    """The questions of one step, a pure function of (step, seed): resuming replays the same order.

    Each pass over the data is a fresh seeded permutation, so a long run sees every question
    once per epoch. With `balance_sources` every data_source gets an equal share of each batch
    (the first sources in name order take the remainder), each cycling through its own questions.
    """
    if not examples:
        raise ValueError("no training examples: run helpers.data.prepare_data() or check the split name")
    if balance_sources:
        by_source: dict[str, list] = {}
        for example in examples:
            by_source.setdefault(getattr(example, "data_source", "unknown"), []).append(example)
        names = sorted(by_source)
        if len(names) > 1:
            if size < len(names):
                raise ValueError(f"balance_sources needs questions_per_batch >= {len(names)} (one per source {names})")
            share, extra = divmod(size, len(names))
            batch = []
            for i, name in enumerate(names):
                batch += batch_for_step(by_source[name], step, share + (i < extra), seed + 7919 * (i + 1))
            return batch
    return cycle(examples, step, size, seed)


def extra_questions(examples: Sequence, step: int, config: TrainConfig) -> list:
    """The questions dynamic sampling may add to `step`, in the order it draws them.

    A second seeded order over the same examples, a pure function of (seed, step) like
    `batch_for_step`, so a resumed run draws the same extra questions.
    """
    if not config.dynamic_sampling or config.dynamic_sampling_rounds < 2:
        return []
    size = config.questions_per_batch * (config.dynamic_sampling_rounds - 1)
    return batch_for_step(examples, step, size, config.seed + 1_000_033, config.balance_sources)


# --------------------------------------------------------------------------- one step


def optimise(
    training_client,
    datums: Sequence[TrainingDatum],
    total_samples: int,
    adam_params,
    max_datums: int = 8,
    max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS,
) -> dict[str, float]:
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
                if value:
                    print("warning: non-finite gradient, optimiser step skipped (weights unchanged)", flush=True)
    trained = sum(int(np.count_nonzero(d.loss_fn_inputs["advantages"].to_numpy())) for d in sent)
    real = sum(item.length for item in datums)
    padded = sum(padded_tokens(batch) for batch in micro_batches)
    return {
        "datums": len(datums),
        "micro_batches": len(micro_batches),
        "trained_tokens": trained,
        "input_tokens": real,
        "padded_tokens": padded,
        "padding_share": (padded - real) / padded if padded else 0.0,
        **sampler_trainer_kl(sent, outputs),
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


def sample_groups(sampling_client, tokenizer, search_client, batch: Sequence, config: TrainConfig, step: int,
                  reward_fn: RewardFn, extra: Sequence = (), progress: bool = False) -> Sampled:
    """Roll out, score and assign advantages; with dynamic sampling, repeat on `extra` questions
    (`questions_per_batch` at a time) until that many groups have signal or the rounds run out."""
    quota = config.questions_per_batch
    rounds_allowed = config.dynamic_sampling_rounds if config.dynamic_sampling else 1
    seen = {getattr(example, "id", None) for example in batch}
    pending = [example for example in extra if getattr(example, "id", None) not in seen]
    questions = list(batch)
    drawn: list[Group] = []
    kept: list[Group] = []
    sums: Counter[str] = Counter()  # each reward component summed over trajectories
    sampling = searching = 0.0
    end_reasons: Counter[str] = Counter()
    rounds = 0
    while questions:
        base = config.rollout_config(step)
        rollout = dataclasses.replace(base, seed=base.seed + 1_000_003 * rounds)
        groups = rollout_groups(sampling_client, tokenizer, search_client, questions, rollout, progress=progress)
        offset = len(drawn)
        for position, group in enumerate(groups):
            group.index, group.step = offset + position, step
            for trajectory in group.trajectories:
                trajectory.question_index = group.index
        means = score(groups, reward_fn)
        count = sum(len(group) for group in groups)
        sums.update({name: mean * count for name, mean in means.items()})
        assign_advantages(groups)
        stats = groups.stats
        sampling += stats.sampling_seconds
        searching += stats.search_seconds
        end_reasons.update(stats.end_reasons)
        drawn.extend(groups)
        rounds += 1
        if not config.dynamic_sampling:
            kept = list(groups)
            break
        kept.extend(group for group in groups if not group.degenerate)
        if len(kept) >= quota or rounds >= rounds_allowed:
            break
        questions, pending = pending[:quota], pending[quota:]
    kept = kept[:quota] if config.dynamic_sampling else kept
    total = sum(len(group) for group in drawn)
    reward_metrics = {name: value / total for name, value in sums.items()} if total else {}
    return Sampled(drawn, kept, rounds, reward_metrics, sampling, searching, end_reasons)


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
    stats_before = _search_stats(search_client)
    sampled = sample_groups(sampling_client, tokenizer, search_client, batch, config, step, reward_fn, extra, progress)
    drawn = [t for group in sampled.drawn for t in group.trajectories]
    trajectories = [t for group in sampled.kept for t in group.trajectories]
    rolled = time.perf_counter()
    stats_after = _search_stats(search_client)
    observed: dict[str, Any] = {}
    context = StepContext(step, config, training_client, sampled.kept, trajectories)
    for observer in observers:
        before = getattr(observer, "before_update", None)
        if callable(before):
            observed.update(before(context) or {})
    measured = time.perf_counter()
    datums = build_training_datums(trajectories)
    update = optimise(
        training_client,
        datums,
        total_samples=len(trajectories),
        adam_params=adam_params,
        max_datums=config.micro_batch_datums,
        max_tokens=config.micro_batch_tokens,
    )
    done = time.perf_counter()
    metrics = {
        "step": step,
        **rollout_metrics(drawn),
        **sampled.reward_metrics,
        "informative_groups": sum(not group.degenerate for group in sampled.kept),
        **update,
        **{f"search_{key}": stats_after.get(key, 0) - stats_before.get(key, 0)
           for key in ("requests", "errors", "timeouts")},
        # Searches run concurrently, so this is summed latency, not wall time.
        "time_search_latency_sum": stats_after.get("total_latency", 0.0) - stats_before.get("total_latency", 0.0),
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
        drawn_groups = len(sampled.drawn)
        metrics.update({
            "dynamic/rounds": sampled.rounds,
            "dynamic/questions": drawn_groups,
            "dynamic/kept_groups": len(sampled.kept),
            "dynamic/filtered_group_share": sum(g.degenerate for g in sampled.drawn) / drawn_groups if drawn_groups else 0.0,
        })
    metrics.update({f"end/{reason}": count for reason, count in sampled.end_reasons.items()})
    metrics["wall_time"] = time.time()
    for observer in observers:
        notify(observer, metrics, config)
    return metrics, sampled.kept


def notify(observer, metrics: dict, config: TrainConfig) -> None:
    """Hand a finished metrics row to an observer (a callable, or an object with `on_step`)."""
    on_step = getattr(observer, "on_step", None)
    if callable(on_step):
        on_step(metrics, config)
    elif callable(observer):
        observer(metrics, config)


def adam_for(config: TrainConfig) -> pytrio.AdamParams:
    return pytrio.AdamParams(learning_rate=config.learning_rate, grad_clip_norm=config.grad_clip_norm)


def _search_stats(search_client) -> dict[str, float]:
    stats = getattr(search_client, "stats", None)
    if stats is None:
        return {}
    values = dict(stats.as_dict())
    values["total_latency"] = getattr(stats, "total_latency", 0.0)
    return values


def step_questions(session: "TrainingSession", step: int) -> list:
    """The questions of `step`: the split's order, with the synthetic share (if any) mixed in."""
    config = session.config
    order = functools.partial(batch_for_step, balance_sources=config.balance_sources)
    return batch_with_share(session.examples, session.synthetic, step, config.questions_per_batch,
                            config.seed, config.synthetic_share, order=order)


# --------------------------------------------------------------------------- the loop


@dataclass
class TrainingSession:
    """The long-lived objects of a run, so a notebook can step it by hand."""

    config: TrainConfig
    service: Any
    training_client: Any
    tokenizer: Any
    search_client: Any
    examples: list
    run: RunDir
    start_step: int = 0
    history: list[dict] = field(default_factory=list)
    optimised: bool = False  # an optim_step ran (or was restored), so save_state holds optimiser state
    synthetic: list = field(default_factory=list)  # the synthetic split, when config.synthetic_share > 0


def open_session(config: TrainConfig, service=None, search_client=None, examples=None) -> TrainingSession:
    """Connect, create the LoRA trainer, load data; resume from `config.out` if it has a checkpoint."""
    run = RunDir(config.out)
    service = service or connect(config.backend)
    model = config.resolved_model()
    training_client = service.create_lora_training_client(
        base_model=model, rank=config.lora_rank, seed=config.seed, train_unembed=config.train_unembed
    )

    def load(path: str, row: dict) -> None:
        if row.get("has_optimizer", True) and hasattr(training_client, "load_state_with_optimizer"):
            result(training_client.load_state_with_optimizer(path))
        else:  # saved before any optim_step (every group degenerate so far): weights only
            result(training_client.load_state(path))

    last = resume_checkpoint(run, load) if config.resume else None  # newest that loads
    start_step = int(last["step"]) if last is not None else 0
    if last is None and config.init_from:
        result(training_client.load_state(config.init_from))  # weights only: fresh optimiser for RL
    if start_step == 0 and not config.resume:
        for stale in (run.metrics, run.checkpoints):
            stale.unlink(missing_ok=True)
    run.keep_metrics_before(start_step)
    tokenizer = training_client.get_tokenizer()
    if search_client is None:
        search_client = create_search_client(config.search_backend)
    if examples is None:
        examples = load_examples(config.split, data_source=config.data_source, limit=config.limit,
                                 skip=config.skip)
    run.write_json("config.json", {"train": dataclasses.asdict(config), "model": model})
    session = TrainingSession(config, service, training_client, tokenizer, search_client, list(examples), run, start_step)
    session.optimised = bool(last and last.get("has_optimizer", True))
    if config.synthetic_share > 0:
        session.synthetic = load_examples(SYNTHETIC_SPLIT)
    return session


def save_checkpoint(session: TrainingSession, steps_done: int, keep: int = 2) -> str:
    """save_state (weights + optimiser) and record it; `steps_done` steps are inside it."""
    name = f"{Path(session.config.out).name}-step{steps_done:05d}"
    response = result(session.training_client.save_state(name))
    path = materialise_checkpoint(response, session.run.path / "checkpoints" / f"step{steps_done:05d}")
    session.run.record_checkpoint(steps_done, path, time=time.time(), has_optimizer=session.optimised)
    _prune_checkpoints(session.run, keep)
    return path


def _prune_checkpoints(run: RunDir, keep: int) -> None:
    folder = run.path / "checkpoints"
    if not folder.is_dir() or keep < 1:
        return
    wanted = {str(Path(row["path"]).resolve()) for row in run.checkpoint_rows()[-keep:]}
    for child in folder.iterdir():
        if child.is_dir() and str(child.resolve()) not in wanted:
            shutil.rmtree(child, ignore_errors=True)


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
    tracker = open_tracker(config.tracker, run_name(config.out),
                           {"train": dataclasses.asdict(config), "model": config.resolved_model()})
    observers = [*observers, tracker] if tracker.active else list(observers)
    try:
        return _train(config, on_step, session, progress, reward_fn or config.reward_fn(), observers)
    finally:
        for observer in observers:
            close = getattr(observer, "close", None)
            if callable(close):
                close()


def _train(config, on_step, session, progress, reward_fn, observers) -> dict:
    session = session or open_session(config)
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
            reward_fn=reward_fn, observers=observers, extra=extra_questions(session.examples, step, config),
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
    summary = {
        "steps_done": step,
        "finished": step >= config.max_steps,
        "stopped_for_time": stopped_for_time,
        "seconds": time.perf_counter() - started,
        "checkpoint": (run.last_checkpoint() or {}).get("path"),
    }
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
