"""Kernel state: one engine, tokenizer and search client per kernel, and what one notebook hands
the next.

Handing over is only a shortcut: every notebook recomputes what it needs when the earlier
notebook has not been run (or was run with another profile or model). What is handed over is
kept under `config.RUNS_DIR/course-state/<profile>-<model>`: per checkout, since the paths it
keeps point into the checkout.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from helpers import config
from helpers.engine import connect
from helpers.models import load_tokenizer
from helpers.search import create_search_client


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


def state_dir() -> Path:
    """This checkout's hand-overs between notebooks, per profile and model."""
    path = config.RUNS_DIR / "course-state" / f"{config.profile()}-{config.default_model()}"
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
