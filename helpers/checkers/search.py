"""Checks for notebook 04's exercises on search as the environment: how much evidence an
observation budget lets in (`blocks_that_fit`) and which gold passages each search brings in for
the first time (`new_gold_per_search`).

The expected values are stated from the rules: evidence blocks enter in rank order, whole, while
the running total stays within the budget, and the first block that does not fit ends the
observation (a later, smaller one is not slipped in: the ranking is the backend's); a gold passage
counts for the search that first shows it, never again (`helpers.evidence`, the evidence reward).
"""

from __future__ import annotations

from typing import Any, Sequence

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, Raises, run_checks


def _fit_case(name: str, sizes: Sequence[int], budget: int, expected: Any) -> Case:
    return Case(name, f"blocks of {list(sizes)} tokens, budget {budget}", expected, lambda fn: fn(list(sizes), budget))


FIT_CASES = [
    _fit_case("everything fits", [120, 80, 200], 400, 3),
    _fit_case("exactly at the budget", [120, 80, 200], 200, 2),
    _fit_case("the first block is too long: nothing fits", [300, 40], 256, 0),
    _fit_case("rank order: a small block after one that does not fit stays out", [100, 300, 50], 200, 1),
    _fit_case("no results", [], 256, 0),
    Case("a budget below 0", "blocks of [10], budget -1", Raises(ValueError), lambda fn: fn([10], -1)),
]

_sizes = st.lists(st.integers(1, 400), max_size=8)


def _fit_rule(fn: Any, drawn: tuple[list[int], int]) -> None:
    sizes, budget = drawn
    kept = fn(list(sizes), budget)
    if not isinstance(kept, int) or not 0 <= kept <= len(sizes):
        raise Mismatch(f"a count between 0 and {len(sizes)}", kept)
    if sum(sizes[:kept]) > budget:
        raise Mismatch(f"the first {kept} blocks within {budget} tokens", f"{sum(sizes[:kept])} tokens")
    if kept < len(sizes) and sum(sizes[: kept + 1]) <= budget:
        raise Mismatch(f"block {kept + 1} fits too ({sum(sizes[: kept + 1])} ≤ {budget})", kept)


FIT_PROPERTIES = [Property("the longest prefix within the budget", st.tuples(_sizes, st.integers(0, 1200)), _fit_rule)]


def check_blocks_that_fit(fn: Any):
    """Run the budget cases against `fn(block_tokens, budget) -> number of blocks kept`."""
    return run_checks("blocks_that_fit", fn, FIT_CASES, FIT_PROPERTIES,
                      hint="add blocks in rank order while the total stays within the budget; stop at the first "
                           "that does not fit; refuse a negative budget")


def _gold_case(name: str, searches: Sequence[Sequence[str]], gold: Sequence[str], expected: Any) -> Case:
    shown = f"passages per search {[list(s) for s in searches]}, gold {list(gold)}"
    return Case(name, shown, expected, lambda fn: fn([list(s) for s in searches], list(gold)))


GOLD_CASES = [
    _gold_case("a two-hop question, one gold passage per hop", [["film", "x", "y"], ["actress", "x", "z"]],
               ["film", "actress"], [1, 1]),
    _gold_case("the same gold passage again brings nothing", [["film", "x"], ["film", "y"]], ["film", "actress"], [1, 0]),
    _gold_case("both gold passages in the first search", [["film", "actress", "x"], ["actress"]], ["film", "actress"],
               [2, 0]),
    _gold_case("a passage twice in one result counts once", [["film", "film"]], ["film"], [1]),
    _gold_case("no search", [], ["film"], []),
    _gold_case("a search that showed nothing", [[], ["film"]], ["film"], [0, 1]),
]


def check_new_gold_per_search(fn: Any):
    """Run the gold cases against `fn(passages_per_search, gold_ids) -> new gold passages per search`."""
    return run_checks("new_gold_per_search", fn, GOLD_CASES,
                      hint="walk the searches in order, remember every passage already read, and count for each "
                           "search the gold passages it shows for the first time")
