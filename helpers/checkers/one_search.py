"""Checks for notebook 01's exercise on questions one search settles (`one_search_enough`).

The rule, stated independently of `helpers.multihop.verify`: search once, with the question itself as
the query (not a rewording of it: the measure is of the question, not of a policy's queries); the
question is settled when every one of its gold passages is among the results, in any order, whatever
else came back; a question without gold passages cannot be judged and is refused.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, Raises, run_checks

QUESTION = "Who directed the film whose score won the 1975 Oscar?"


class FakeSearch:
    """A search that answers from a table (query -> passage ids) and records every query it is asked."""

    def __init__(self, table: dict[str, Sequence[str]]) -> None:
        self.table, self.queries = dict(table), []

    def __call__(self, query: str) -> list[str]:
        self.queries.append(query)
        return list(self.table.get(query, []))


def _case(name: str, returned: Sequence[str], gold: Sequence[str], expected: Any,
          table: dict[str, Sequence[str]] | None = None) -> Case:
    shown = f"search(question) returns {list(returned)}, gold {list(gold)}"
    return Case(name, shown, expected, lambda fn: fn(QUESTION, list(gold), FakeSearch(table or {QUESTION: returned})))


def _queries(fn: Callable) -> list[str]:
    search = FakeSearch({QUESTION: ["p1", "p2", "p3"]})
    fn(QUESTION, ["p1"], search)
    return search.queries


CASES = [
    _case("every gold passage among the results", ["p1", "p7", "p2"], ["p1", "p2"], True),
    _case("one of two gold passages missing", ["p1", "p7", "p9"], ["p1", "p2"], False),
    _case("gold in another order than the results", ["p2", "p1"], ["p1", "p2"], True),
    _case("nothing came back", [], ["p1"], False),
    _case("only a rewritten query would find it: the question's own search decides",
          ["p7"], ["p1"], False, table={QUESTION: ["p7"], "film score 1975 Oscar director": ["p1"]}),
    Case("one search, with the question as it is", f"question {QUESTION!r}", [QUESTION], _queries),
    Case("no gold passages", "search(question) returns ['p1'], gold []", Raises(ValueError),
         lambda fn: fn(QUESTION, [], FakeSearch({QUESTION: ["p1"]}))),
]

_ids = st.sampled_from([f"p{i}" for i in range(6)])


def _settled_rule(fn: Any, drawn: tuple[list[str], list[str]]) -> None:
    returned, gold = drawn
    got = fn(QUESTION, list(gold), FakeSearch({QUESTION: returned}))
    expected = set(gold) <= set(returned)
    if got is not expected:
        raise Mismatch(expected, got)


PROPERTIES = [Property("settled exactly when every gold passage came back",
                       # a search returns at most its top 3, each passage once
                       st.tuples(st.lists(_ids, max_size=3, unique=True), st.lists(_ids, min_size=1, max_size=3)),
                       _settled_rule)]


def check_one_search_enough(fn: Any):
    """Run the cases against `fn(question, gold_ids, search) -> bool`, `search(query) -> passage ids`."""
    return run_checks("one_search_enough", fn, CASES, PROPERTIES,
                      hint="search once with the question itself; True when every gold id is among the ids that "
                           "came back (any order); refuse an empty gold list with ValueError")
