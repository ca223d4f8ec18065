"""Glue the notebooks share: one engine per kernel, a small rollout from budget values, and a
place to hand results from one notebook to the next.

Handing over is only a shortcut: every notebook recomputes what it needs when the earlier
notebook has not been run (or was run with another profile or model).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from helpers import config
from helpers.data import load_examples
from helpers.engine import connect
from helpers.models import load_tokenizer
from helpers.protocol import build_messages, build_prompt, stop_token_ids, template_family
from helpers.reward import score
from helpers.rollout import RolloutConfig, Trajectory, consume_assistant, finish_search, groups_of, rollout_batch
from helpers.runs import updated
from helpers.search import create_search_client
from helpers.widgets.budgets import budgets, rollout_kwargs


@dataclass
class Engine:
    model: str
    service: Any
    sampler: Any
    tokenizer: Any


@lru_cache(maxsize=2)
def engine(model: str | None = None) -> Engine:
    """A sampling client on the base model (loaded once per kernel) and its tokenizer."""

    name = model or config.default_model()
    service = connect()
    sampler = service.create_sampling_client(base_model=name)
    return Engine(name, service, sampler, sampler.get_tokenizer())


@lru_cache(maxsize=2)
def tokenizer(model: str | None = None):
    """Just the tokenizer (no model weights): enough for notebooks that only count or show tokens."""

    return load_tokenizer(model or config.default_model())


@lru_cache(maxsize=1)
def search_client(backend: str = "local"):
    return create_search_client(backend)


def rollout_config(values: dict[str, Any], seed: int = 0, **overrides: Any):
    """The RolloutConfig of a profile's budgets (or the sliders' values), then `overrides` by name."""

    return updated(RolloutConfig(), {**rollout_kwargs(values), "seed": seed, **overrides})


def run_rollout(examples: Sequence[Any], values: dict[str, Any], *, sampler: Any = None, tokenizer: Any = None,
                search: Any = None, seed: int = 0, progress: bool = True, **overrides: Any) -> list[Any]:
    """rollout_batch on `examples` with the budgets in `values` (the sliders' current values)."""

    if sampler is None or tokenizer is None:
        current = engine()
        sampler, tokenizer = sampler or current.sampler, tokenizer or current.tokenizer
    return rollout_batch(sampler, tokenizer, search or search_client(), list(examples),
                         rollout_config(values, seed, **overrides), progress=progress)


def state_dir() -> Path:
    path = config.cache_dir() / "course-state" / f"{config.profile()}-{config.default_model()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def remember(name: str, value: Any) -> Path:
    """Keep a result (e.g. notebook 05's rollout) for the notebooks that follow."""
    path = state_dir() / f"{name}.pkl"
    with path.open("wb") as handle:
        pickle.dump(value, handle)
    return path


def recall(name: str) -> Any | None:
    """What an earlier notebook remembered, or None (then recompute it)."""
    path = state_dir() / f"{name}.pkl"
    if not path.exists():
        return None
    try:
        with path.open("rb") as handle:
            return pickle.load(handle)
    except Exception:  # written by another version of the code: recompute
        return None


def _call_text(query: str) -> str:
    import json

    return "<tool_call>\n" + json.dumps({"name": "search", "arguments": {"query": query}}) + "\n</tool_call>"


def forced_trajectory(example: Any, queries: Sequence[str], answer: str, *, sampler: Any = None, tokenizer: Any = None,
                      search: Any = None, values: dict[str, Any] | None = None, group_index: int = 0) -> Any:
    """A multi-turn Trajectory whose assistant turns are *given* (teacher-forced) instead of sampled.

    Each turn is fed through the rollout's own state machine (consume_assistant, finish_search,
    build_next_prompt), and its "old logprobs" are what the model assigns to those tokens
    (compute_logprobs), i.e. what the sampler would have reported had it sampled them. Used when
    the untrained model does not search on its own but a notebook needs a search trajectory.
    """
    from types import SimpleNamespace

    import pytrio as trio


    if sampler is None or tokenizer is None:
        current = engine()
        sampler, tokenizer = sampler or current.sampler, tokenizer or current.tokenizer
    search = search or search_client()
    config = rollout_config(values or {}, max_search_calls=len(queries) + 1, max_assistant_turns=len(queries) + 2)
    if values is None:
        config.max_tool_response_tokens, config.max_trajectory_tokens = 512, 4096
    trajectory = Trajectory(example=example, group_index=group_index,
                            messages=build_messages(example.question, None, template_family(tokenizer)))
    prompt = build_prompt(tokenizer, trajectory.messages)
    end = stop_token_ids(tokenizer)[:1]
    for text in [*(_call_text(q) for q in queries), f"Answer: {answer}"]:
        completion = list(tokenizer.encode(text, add_special_tokens=False)) + end
        scored = sampler.compute_logprobs(trio.ModelInput.from_ints(prompt + completion)).result()
        logprobs = [float(x) for x in scored[len(prompt):]]
        sequence = SimpleNamespace(tokens=completion, logprobs=logprobs, stop_reason="stop")
        pending = consume_assistant(trajectory, prompt, sequence, tokenizer, config)
        if pending is None:
            break
        if finish_search(pending, search.search(pending.query), tokenizer, config):
            break
        prompt = trajectory.next_prompt_tokens
    score(groups_of([trajectory]))
    return trajectory


def search_trajectory(values: dict[str, Any] | None = None) -> tuple[Any, str]:
    """A trajectory with at least one search turn, and where it came from.

    Prefers a sampled one from notebook 05's rollout (recomputed when missing); when the model
    never searched there, falls back to a teacher-forced trajectory on the same question.
    """

    values = values or budgets()
    kept = recall("search_trajectory")
    if kept is not None:
        return kept
    sampled = recall("rollout_05")
    if sampled is None:
        sampled = list(run_rollout(load_examples("train", limit=values["questions"]), values))
        remember("rollout_05", sampled)
    searched = [t for t in sampled if len(t.turns) >= 2 and t.searches]
    if searched:
        found = (searched[0], "sampled")
    else:
        example = sampled[0].example
        found = (forced_trajectory(example, [example.question], example.answers[0]), "teacher-forced")
    remember("search_trajectory", found)
    return found
