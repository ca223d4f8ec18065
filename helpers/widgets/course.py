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
from helpers.widgets.budgets import rollout_kwargs


@dataclass
class Engine:
    model: str
    service: Any
    sampler: Any
    tokenizer: Any


@lru_cache(maxsize=2)
def engine(model: str | None = None) -> Engine:
    """A sampling client on the base model (loaded once per kernel) and its tokenizer."""
    from helpers.engine import connect

    name = model or config.default_model()
    service = connect()
    sampler = service.create_sampling_client(base_model=name)
    return Engine(name, service, sampler, sampler.get_tokenizer())


@lru_cache(maxsize=1)
def search_client(backend: str = "local"):
    from helpers.search import create_search_client

    return create_search_client(backend)


def rollout_config(values: dict[str, Any], seed: int = 0, **overrides: Any):
    from helpers.rollout import RolloutConfig

    kwargs = rollout_kwargs(values)
    kwargs.update(seed=seed, **overrides)
    return RolloutConfig(**kwargs)


def run_rollout(examples: Sequence[Any], values: dict[str, Any], *, sampler: Any = None, tokenizer: Any = None,
                search: Any = None, seed: int = 0, **overrides: Any) -> list[Any]:
    """rollout_batch on `examples` with the budgets in `values` (the sliders' current values)."""
    from helpers.rollout import rollout_batch

    if sampler is None or tokenizer is None:
        current = engine()
        sampler, tokenizer = sampler or current.sampler, tokenizer or current.tokenizer
    return rollout_batch(sampler, tokenizer, search or search_client(), list(examples), rollout_config(values, seed, **overrides))


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
