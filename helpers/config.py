"""Paths, the run profile and the torch device, in one place.

Everything a learner might want to move lives behind an environment variable:
- COURSE_PROFILE  'full' (default), 'fast' (small model, small budgets; used by the tests) or
                  'gpu' (the full profile's budgets; the course's training run is the GPU
                  recipe, helpers.course.recipe, and its evaluation evaluates that run)
- COURSE_SHARED   the offline data pack (default: ../shared beside the checkout)
- COURSE_CACHE    where models and indexes are cached (default: ~/.cache/search-r1-course)
- COURSE_RUNS     this checkout's own runs: notebook checkpoints, tracker files and what one
                  notebook hands the next (default: runs/ in the checkout, git-ignored)
- COURSE_BACKEND  'local' (default) or 'pytrio'
- COURSE_MODEL    overrides the profile's default model
- COURSE_DTYPE    'float32' or 'bfloat16' (default: bf16 on CUDA, fp32 elsewhere)
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("COURSE_DATA", PROJECT_ROOT / "data"))
RESULTS_DIR = PROJECT_ROOT / "results"
# Beside the checkout, not in the shared cache: what is kept here names paths inside it.
RUNS_DIR = Path(os.environ.get("COURSE_RUNS", PROJECT_ROOT / "runs"))

MODELS = ("qwen2.5-0.5b", "smollm2-135m")

SETUP_COMMAND = "`make setup` (or `python -m helpers setup`)"


class SetupRequired(FileNotFoundError):
    """Something the set-up provides (data, the search index) is missing. A run stops with this
    before its first rollout: a missing index is the machine's fault, not the policy's, and must
    not reach the model as an observation."""


def shared_dir() -> Path:
    return Path(os.environ.get("COURSE_SHARED", PROJECT_ROOT.parent / "shared"))


def cache_dir() -> Path:
    path = Path(os.environ.get("COURSE_CACHE", Path.home() / ".cache" / "search-r1-course"))
    path.mkdir(parents=True, exist_ok=True)
    return path


PROFILES = ("full", "fast", "gpu")


def profile() -> str:
    value = os.environ.get("COURSE_PROFILE", "full").strip().lower()
    if value not in PROFILES:
        raise ValueError(f"COURSE_PROFILE must be one of {', '.join(PROFILES)}, got {value!r}")
    return value


def is_fast() -> bool:
    return profile() == "fast"


def is_gpu() -> bool:
    """The gpu profile: the course's training run is the real recipe, and its evaluation evaluates it."""
    return profile() == "gpu"


def default_model() -> str:
    return os.environ.get("COURSE_MODEL") or ("smollm2-135m" if is_fast() else "qwen2.5-0.5b")


@lru_cache(maxsize=1)
def device() -> str:
    import torch

    if torch.cuda.is_available():
        fraction = cuda_memory_fraction()
        if fraction is not None:
            torch.cuda.set_per_process_memory_fraction(fraction)
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def cuda_memory_fraction() -> float | None:
    """COURSE_CUDA_MEMORY_FRACTION (0 < f <= 1): the share of the GPU's memory this process may hold.

    Several training processes sharing one GPU each keep freed blocks cached for themselves, so one
    of them can starve the others into out-of-memory; with a cap, a process that reaches it releases
    its own cache and retries first. Unset: no cap."""
    value = os.environ.get("COURSE_CUDA_MEMORY_FRACTION", "").strip()
    if not value:
        return None
    try:
        fraction = float(value)
    except ValueError:
        fraction = float("nan")
    if not 0 < fraction <= 1:
        raise ValueError(f"COURSE_CUDA_MEMORY_FRACTION must be a number in (0, 1], e.g. 0.3, got {value!r}")
    return fraction


DTYPES = ("bfloat16", "float32")


def dtype():
    """bf16 on CUDA, fp32 elsewhere; COURSE_DTYPE=float32 makes a GPU compute as a CPU does.
    Sampler and trainer must share it (their logprobs differ by ~1 nat across the two)."""
    import torch

    name = os.environ.get("COURSE_DTYPE", "").strip().lower()
    if name and name not in DTYPES:
        raise ValueError(f"COURSE_DTYPE must be one of {DTYPES}, got {name!r}")
    if name:
        return getattr(torch, name)
    return torch.bfloat16 if device() == "cuda" else torch.float32
