"""Checks for Perplexity's efficiency rewards and budget-forced evaluation (notebooks 11 and 12).

The group-anchored tool-call penalty, as a function the learner writes (`check_tool_penalty`):

pen_tool = alpha_win * p for a winner, alpha_lose * p + beta_lose for anyone else, with
p = 1 - exp(-max(0, c~ - b_g)); no winner (b_g None) means no surplus, so p = 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Callable

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, run_checks
from helpers.checkers.exercises import report
from helpers.efficiency.budget import BudgetPoint


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


# --------------------------------------------------------------------------- worked numbers
# Expected answers are worked out here from the formulas of Perplexity's post, not with rewards.py,
# so a solution that uses those functions also checks them.


def _numbers(guess: Any, n: int) -> list[float] | None:
    try:
        values = [float(x) for x in guess]
    except (TypeError, ValueError):
        return None
    return values if len(values) == n else None


def check_tool_penalties(guess: Any) -> bool:
    e = math.exp
    expected = [0.0, 0.0, 1.0 * (1 - e(-2)), 0.5 * (1 - e(-1)) + 0.1]
    values = _numbers(guess, 4)
    if values is None:
        return report(False, "give four numbers: p = 1 - exp(-max(0, c - b_g)); winners alpha_win*p, "
                              "the loser alpha_lose*p + beta_lose")
    ok = all(abs(a - b) < 1e-6 for a, b in zip(values, expected))
    return report(ok, f"you gave {[round(v, 4) for v in values]}; surplus calls over b_g = 2 are 0, 0, 2 "
                       "and 1 — and the loser also pays beta_lose")


def check_no_winner_advantages(guess: Any) -> bool:
    values = _numbers(guess, 4)
    if values is None:
        return report(False, "give four advantages (reward minus the group's mean reward)")
    return report(all(abs(v) < 1e-9 for v in values),
                   "with no winner there is no baseline: everyone pays the same beta_lose, and a "
                   "constant cancels in reward - mean")


def check_length_penalty(guess: Any) -> bool:
    if guess is None or guess is Ellipsis:
        return report(False, "compute 1 - exp(-max(0, L / b_win - 1)) (300 is not above the cap 320)")
    return report(abs(float(guess) - (1 - math.exp(-0.5))) < 1e-6,
                   f"you gave {guess}; L / b_win - 1 = 300 / 200 - 1 = 0.5")


def check_best_budget(points: Sequence[BudgetPoint], policy: str, guess: Any) -> bool:
    mine = sorted((p for p in points if p.policy == policy), key=lambda p: p.budget)
    if not mine:
        return report(False, f"no points for policy {policy!r}")
    top = max(p.accuracy for p in mine)
    best = next(p.budget for p in mine if p.accuracy == top)
    if guess is None or guess is Ellipsis:
        return report(False, "the smallest budget whose accuracy equals the curve's maximum")
    return report(int(guess) == best, f"you said {guess}; look for the first budget reaching {top:.3f}")


def check_tokens_per_correct(points: Sequence[BudgetPoint], policy: str, budget: int, guess: Any) -> bool:
    point = next((p for p in points if p.policy == policy and p.budget == budget), None)
    if point is None:
        return report(False, f"no point for {policy!r} at budget {budget}")
    expected = math.inf if point.accuracy == 0 else point.tokens_per_question / point.accuracy
    if guess is None or guess is Ellipsis:
        return report(False, "tokens per question divided by the share answered correctly (inf if none)")
    ok = (math.isinf(expected) and math.isinf(float(guess))) or (
        not math.isinf(expected) and abs(float(guess) - expected) <= 1e-6 * max(1.0, expected))
    return report(ok, f"you said {guess}; divide tokens_per_question by accuracy")


def check_turns_for_budget(budget: int, guess: Any) -> bool:
    if guess is None or guess is Ellipsis:
        return report(False, "one assistant turn per search call, plus the turn that answers")
    return report(int(guess) == budget + 1, f"you said {guess}; each call is its own turn, then one more")
