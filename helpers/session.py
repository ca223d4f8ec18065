"""A GRPO run's long-lived objects: the trainer, the data and the run folder, resumed and checkpointed.

`open_session` connects, creates the LoRA trainer and resumes from the newest checkpoint of
`config.out` that loads; `save_checkpoint` keeps the last few. The loop that steps a session is
`helpers.train.train`; a notebook can also step one by hand with `helpers.train.train_step`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.data import load_examples
from helpers.engine import connect
from helpers.multihop.build import SPLIT as SYNTHETIC_SPLIT
from helpers.rubrics import as_example, load_rubric_prompts
from helpers.runs import RunDir, materialise_checkpoint, result, resume_checkpoint
from helpers.search import check_client_topk, create_search_client
from helpers.search.gold_first import gold_first_search


@dataclass
class TrainingSession:
    """The long-lived objects of a run, so a notebook can step it by hand."""

    config: Any  # the run's helpers.train.TrainConfig
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
    rubric: list = field(default_factory=list)  # rubric prompts as questions, when config.rubric_share > 0


def open_session(config: Any, service=None, search_client=None, examples=None,
                 model: str | None = None) -> TrainingSession:
    """Connect, create the LoRA trainer, load data; resume from `config.out` if it has a checkpoint.

    `model`: the base model when the caller already resolved it (`train` does, for its tracker too,
    so both name the same model); None resolves `config.resolved_model()` here.
    """
    if search_client is not None:  # before anything is created or removed
        check_client_topk(search_client, config.search_topk)
    run = RunDir(config.out)
    service = service or connect(config.backend)
    model = model or config.resolved_model()
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
        search_client = create_search_client(config.search_backend, topk=config.search_topk)
    if examples is None:
        examples = training_examples(config)
    run.write_json("config.json", {"train": dataclasses.asdict(config), "model": model})
    session = TrainingSession(config, service, training_client, tokenizer, search_client, list(examples), run, start_step)
    session.optimised = bool(last and last.get("has_optimizer", True))
    if config.synthetic_share > 0:
        session.synthetic = filtered(load_examples(SYNTHETIC_SPLIT), config)
    if getattr(config, "gold_first_share", 0) > 0:  # the reading curriculum: after the questions are known
        session.search_client = gold_first_search(session.examples + session.synthetic, search_client,
                                                  share=config.gold_first_share, fill=True)
    if config.rubric_share > 0:
        session.rubric = [as_example(p) for p in load_rubric_prompts(config.rubric_prompts)]
    return session


def training_examples(config: Any) -> list:
    """The run's questions: its split (data source, skip, limit), less what its question filter drops."""
    return filtered(split_examples(config), config)


def split_examples(config: Any) -> list:
    """The run's split as its config selects it (data source, skip, limit), unfiltered."""
    return load_examples(config.split, data_source=config.data_source, limit=config.limit, skip=config.skip)


def question_pool(config: Any, limit: int | None = None) -> list:
    """The questions a run draws from, before its question filter: its split's (data source, skip,
    limit) and, when `config.synthetic_share` is above zero, the synthetic multi-hop split's, which the
    run filters with the same file. `limit`: only the first N of each."""
    parts = [split_examples(config)]
    if config.synthetic_share > 0:
        parts.append(load_examples(SYNTHETIC_SPLIT))
    return [ex for part in parts for ex in (part if limit is None else part[:limit])]


def filtered(examples: list, config: Any) -> list:
    """`examples` through `config.question_filter` (helpers.question_filter), if the run has one."""
    if not getattr(config, "question_filter", None):
        return list(examples)
    from helpers import question_filter

    kept = question_filter.apply(examples, question_filter.load(config.question_filter))
    if examples and not kept:
        raise ValueError(f"the question filter {config.question_filter} leaves none of {len(examples)} questions: "
                         "no judged group had signal (a policy that is always or never right; judge with "
                         "the run's starting policy and its group size)")
    return kept


def save_checkpoint(session: TrainingSession, steps_done: int, keep: int = 2) -> str:
    """save_state (weights + optimiser) and record it; `steps_done` steps are inside it."""
    name = f"{Path(session.config.out).name}-step{steps_done:05d}"
    response = result(session.training_client.save_state(name))
    path = materialise_checkpoint(response, session.run.path / "checkpoints" / f"step{steps_done:05d}")
    session.run.record_checkpoint(steps_done, path, time=time.time(), has_optimizer=session.optimised)
    session.run.prune_checkpoints(keep)
    return path
