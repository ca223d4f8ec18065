"""Checks for notebook 10's exercise on finding against reading (`check_finding_and_reading`), held to
`helpers.evidence.finding_and_reading`.

For one source: a question's gold passages were found when every one of them is among the passages its
searches returned, over all its searches together. A row whose question has no gold passages on record,
or whose evidence lists a search without passage ids (None), is left out. The answer is
(found, right where found, missed, right where missed).

`check_constant_reading` holds notebook 10's second reading exercise to
`helpers.course.reading.constant_reading_em`: the EM at each k if only finding changed with k.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, run_checks, same
from helpers.course.reading import constant_reading_em, recorded_topk_reading
from helpers.course.recorded import eval_rows
from helpers.evidence import finding_and_reading


def _row(key: str, source: str, gold: list[str], read: list | None, right: bool) -> dict[str, Any]:
    return {"id": key, "data_source": source, "gold_passage_ids": gold, "evidence_ids": read, "exact_match": right}


def expected_counts(rows: list[dict], source: str) -> tuple[int, int, int, int]:
    """(found, right where found, missed, right where missed) for `source`, from the course's function."""
    cell = finding_and_reading(rows).get(source)
    if cell is None:
        return 0, 0, 0, 0
    found = round(cell["n"] * cell["found"])
    missed = cell["n"] - found
    right_found = round(found * cell["em_found"]) if found else 0
    right_missed = round(missed * cell["em_missed"]) if missed else 0
    return found, right_found, missed, right_missed


_HAND = [
    _row("both over two searches", "hotpotqa", ["a", "b"], [["a", "x"], ["b", "y"]], True),
    _row("one of two", "hotpotqa", ["a", "b"], [["a", "x", "y"]], True),
    _row("both, read wrong", "hotpotqa", ["a", "b"], [["b", "a", "z"]], False),
    _row("no search", "hotpotqa", ["a", "b"], [], False),
    _row("nq found", "nq", ["c"], [["d", "c"]], True),
    _row("nq missed", "nq", ["c"], [["d"], ["e"]], False),
    _row("nq empty observation", "nq", ["c"], [[]], True),
    _row("no gold on record", "nq", [], [["c"]], True),
    _row("a backend without ids", "nq", ["c"], [None, ["c"]], True),
]


def _hand_case(name: str, keys: list[str], source: str, expected: tuple) -> Case:
    rows = [row for row in _HAND if row["id"] in keys]
    shown = f"source {source!r}; rows " + "; ".join(
        f"{r['data_source']} gold {r['gold_passage_ids']} read {r['evidence_ids']} right {r['exact_match']}" for r in rows)
    return Case(name, shown, expected, lambda fn: tuple(fn(rows, source)))


def _recorded_case(label: str, source: str) -> Case:
    rows = eval_rows(label)
    return Case(f"recorded {label}, {source}", f"the recorded run's {label} rows ({len(rows)} test questions), "
                f"source {source!r}", expected_counts(rows, source), lambda fn: tuple(fn(rows, source)))


def reading_cases() -> list[Case]:
    """The hand-made cases, then the recorded run's rows (read from results/ when the check runs)."""
    return [
        _hand_case("gold passages over two searches count together", ["both over two searches"], "hotpotqa",
                   (1, 1, 0, 0)),
        _hand_case("one of two gold passages is not found", ["one of two", "both, read wrong"], "hotpotqa",
                   (1, 0, 1, 1)),
        _hand_case("no search, nothing found", ["no search", "both over two searches"], "hotpotqa", (1, 1, 1, 0)),
        _hand_case("only the source's questions", ["nq found", "one of two", "nq missed"], "nq", (1, 1, 1, 0)),
        _hand_case("an empty observation finds nothing", ["nq empty observation", "nq found"], "nq", (1, 1, 1, 1)),
        _hand_case("a question without gold is left out", ["no gold on record", "nq missed"], "nq", (0, 0, 1, 0)),
        _hand_case("a search without ids is left out", ["a backend without ids", "nq found"], "nq", (1, 1, 0, 0)),
        _hand_case("no question of the source", ["nq found"], "hotpotqa", (0, 0, 0, 0)),
        *[_recorded_case(label, source) for label in ("sft", "sft_grpo") for source in ("hotpotqa", "nq")],
    ]


_passages = st.sampled_from(["a", "b", "c", "d", "e"])
_drawn_row = st.tuples(st.sampled_from(["hotpotqa", "nq"]), st.lists(_passages, max_size=2, unique=True),
                       st.lists(st.one_of(st.lists(_passages, max_size=3), st.none()), max_size=3), st.booleans())


def _as_counted(fn, drawn: tuple) -> None:
    rows_drawn, source = drawn
    rows = [_row(f"q{i}", *row) for i, row in enumerate(rows_drawn)]
    expected, got = expected_counts(rows, source), tuple(fn(rows, source))
    if not same(expected, got):
        raise Mismatch(f"{expected} for source {source!r}, rows {rows}", got)


READING_PROPERTIES = [Property("any rows", st.tuples(st.lists(_drawn_row, max_size=10),
                                                      st.sampled_from(["hotpotqa", "nq"])), _as_counted, examples=150)]


def check_finding_and_reading(fn: Any):
    """Run the cases against `fn(rows, source) -> (found, right_found, missed, right_missed)`."""
    return run_checks("finding_and_reading", fn, reading_cases(), READING_PROPERTIES,
                      hint="keep the source's rows that have gold passages and ids for every search; a question's "
                           "gold is found when all its gold passages are in the union of its searches' passages; "
                           "then count the rows and their right answers on each side")


# ----------------------------------------------------------------- reading held constant over k

def _cell(found: float, em_found: float | None, em_missed: float | None) -> dict[str, Any]:
    return {"found": found, "em_found": em_found, "em_missed": em_missed}


def _topk_case(name: str, by_k: dict, reference: int, source: str) -> Case:
    shown = f"reference k {reference}, source {source!r}; by_k " + "; ".join(
        f"k {k}: {table[source]}" for k, table in sorted(by_k.items()))
    return Case(name, shown, constant_reading_em(by_k, reference, source), lambda fn: fn(by_k, reference, source))


_THREE = {3: {"nq": _cell(0.7, 0.55, 0.08)}, 5: {"nq": _cell(0.8, 0.47, 0.10)}, 8: {"nq": _cell(0.86, 0.43, 0.10)}}


def constant_reading_cases() -> list[Case]:
    """Hand-made tables, then the recorded evaluations at 1-8 passages (read from results/ when run)."""
    recorded = recorded_topk_reading()
    return [
        _topk_case("the reference k predicts its own EM", {3: _THREE[3]}, 3, "nq"),
        _topk_case("more found, read at the reference's rates", _THREE, 3, "nq"),
        _topk_case("another reference", _THREE, 5, "nq"),
        _topk_case("everything found at the reference: no rate for the missed",
                   {3: {"nq": _cell(1.0, 0.6, None)}, 5: {"nq": _cell(0.9, 0.5, 0.1)}, 8: {"nq": _cell(1.0, 0.4, None)}},
                   3, "nq"),
        _topk_case("only the source asked for", {3: {"nq": _cell(0.7, 0.55, 0.08), "hotpotqa": _cell(0.5, 0.4, 0.2)},
                                                 5: {"nq": _cell(0.8, 0.5, 0.1), "hotpotqa": _cell(0.6, 0.3, 0.2)}},
                   3, "hotpotqa"),
        *[_topk_case(f"recorded, {source}", recorded, 3, source) for source in ("nq", "hotpotqa")],
    ]


_share = st.floats(0.0, 1.0).map(lambda x: round(x, 3))
_drawn_cell = st.tuples(_share, _share, _share)


def _as_constant(fn, drawn: tuple) -> None:
    cells, reference = drawn
    by_k = {k: {"nq": _cell(*cell)} for k, cell in zip((1, 2, 3, 5, 8), cells)}
    reference = sorted(by_k)[reference % len(by_k)]
    expected, got = constant_reading_em(by_k, reference, "nq"), fn(by_k, reference, "nq")
    if not same(expected, got):
        raise Mismatch(f"{expected} for reference k {reference}, by_k {by_k}", got)


CONSTANT_READING_PROPERTIES = [Property("any tables", st.tuples(st.lists(_drawn_cell, min_size=1, max_size=5),
                                                                 st.integers(0, 4)), _as_constant, examples=150)]


def check_constant_reading(fn: Any):
    """Run the cases against `fn(by_k, reference, source) -> {k: predicted EM or None}`."""
    return run_checks("constant_reading_em", fn, constant_reading_cases(), CONSTANT_READING_PROPERTIES,
                      hint="at each k: the share found at k times the reference's EM where found, plus the share "
                           "missed at k times the reference's EM where missed; None when a side with a share has no "
                           "EM at the reference")
