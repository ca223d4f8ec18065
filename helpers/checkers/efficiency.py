"""Checks for the group-anchored tool-call penalty (notebook 11).

pen_tool = alpha_win * p for a winner, alpha_lose * p + beta_lose for anyone else, with
p = 1 - exp(-max(0, c~ - b_g)); no winner (b_g None) means no surplus, so p = 0.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, run_checks


def _case(name: str, calls: list[int], winners: list[bool], baseline: int | None, expected: list[float],
          **weights: float) -> Case:
    shown = f"effective calls {calls}, winners {winners}, baseline {baseline}" + (f", {weights}" if weights else "")
    return Case(name, shown, expected, lambda fn: list(fn(calls, winners, baseline, **weights)))


TOOL_CASES = [
    _case("the unit test's group", [1, 3, 0, 4], [True, True, False, False], 1,
          [0.0, 1 - math.exp(-2), 0.1, 0.5 * (1 - math.exp(-3)) + 0.1],
          alpha_win=1.0, alpha_lose=0.5, beta_lose=0.1),
    _case("the exercise's group", [1, 2, 4, 3], [True, True, True, False], 2,
          [0.0, 0.0, 1 - math.exp(-2), 0.5 * (1 - math.exp(-1)) + 0.1]),
    _case("no winner: everyone pays only beta", [0, 2, 9], [False, False, False], None, [0.3, 0.3, 0.3], beta_lose=0.3),
    _case("other weights", [5, 5], [True, False], 3,
          [2.0 * (1 - math.exp(-2)), 0.25 * (1 - math.exp(-2)) + 0.05], alpha_win=2.0, alpha_lose=0.25, beta_lose=0.05),
]

_groups = st.tuples(st.lists(st.integers(0, 8), min_size=1, max_size=8), st.integers(0, 8),
                    st.floats(0, 2), st.floats(0, 2), st.floats(0, 1))


def _bounded_and_growing(fn: Callable, example: tuple) -> None:
    calls, baseline, aw, al, bl = example
    for won in (True, False):
        pens = list(fn(calls, [won] * len(calls), baseline, alpha_win=aw, alpha_lose=al, beta_lose=bl))
        low, high = (0.0, aw) if won else (bl, al + bl)
        for c, p in zip(calls, pens):
            if not low - 1e-9 <= p <= high + 1e-9:
                raise Mismatch(f"{'winner' if won else 'loser'} with {c} calls: a penalty in [{low:.3f}, {high:.3f}]", p)
        ordered = [p for _, p in sorted(zip(calls, pens), key=lambda pair: pair[0])]
        if any(a > b + 1e-9 for a, b in zip(ordered, ordered[1:])):
            raise Mismatch("more calls never cost less", pens)


TOOL_PROPERTIES = [Property("bounded by the weights, and never cheaper with more calls", _groups, _bounded_and_growing,
                            examples=200)]


def check_tool_penalty(fn: Any):
    """Run the cases against `fn(eff_calls, winners, baseline, alpha_win=1, alpha_lose=0.5, beta_lose=0.1)`."""
    return run_checks("tool_penalties", fn, TOOL_CASES, TOOL_PROPERTIES,
                      hint="p = 1 - exp(-max(0, calls - baseline)), 0 when baseline is None; "
                           "winners pay alpha_win * p, the rest alpha_lose * p + beta_lose")
