"""Checks for the train/inference mismatch (notebook 13): token ratios, the k3 estimate of the KL,
truncated importance weights, on three tokens whose log-probs are given here.

Expected answers are worked out from the formulas, not with helpers.mismatch, so a solution that
uses those functions also checks them.
"""

from __future__ import annotations

import math
from typing import Any

from helpers.checkers.exercises import report

EXERCISE_SAMPLER = (-1.0, -0.5, -2.0)
EXERCISE_TRAINER = (-1.1, -0.5, -1.8)


def _three(guess: Any) -> list[float] | None:
    try:
        values = [float(x) for x in guess]
    except (TypeError, ValueError):
        return None
    return values if len(values) == 3 else None


def check_ratios(guess: Any) -> bool:
    expected = [math.exp(t - s) for t, s in zip(EXERCISE_TRAINER, EXERCISE_SAMPLER)]
    values = _three(guess)
    if values is None:
        return report(False, "three numbers: r = exp(logp_train - logp_infer) per token")
    return report(all(abs(a - b) < 1e-6 for a, b in zip(values, expected)),
                   f"you gave {values}; the first token's log-ratio is -1.1 - (-1.0) = -0.1")


def check_k3(guess: Any) -> bool:
    d = [t - s for t, s in zip(EXERCISE_TRAINER, EXERCISE_SAMPLER)]
    expected = sum(math.exp(x) - 1 - x for x in d) / 3
    if guess is None or guess is Ellipsis:
        return report(False, "mean over tokens of r - 1 - log r")
    return report(abs(float(guess) - expected) < 1e-6, f"you gave {guess}; average r - 1 - log r over the three")


def check_truncated(guess: Any, cap: float = 1.1) -> bool:
    expected = [min(math.exp(t - s), cap) for t, s in zip(EXERCISE_TRAINER, EXERCISE_SAMPLER)]
    values = _three(guess)
    if values is None:
        return report(False, f"three numbers: min(r, {cap})")
    return report(all(abs(a - b) < 1e-6 for a, b in zip(values, expected)),
                   f"you gave {values}; only the third ratio exceeds {cap}")
