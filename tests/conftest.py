"""Shared test set-up. Area-specific fixtures live in each area's own test files."""

from __future__ import annotations

import os

import pytest

# Tests never reach the network and never need more than the small model unless they say so.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def small_model_name() -> str:
    return "smollm2-135m"
