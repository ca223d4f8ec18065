"""Checks for notebook 10's exercises on choosing a policy: the search-again rule as a function the
learner writes (`check_search_again_rule`), held to `helpers.course.seeds.rule_failures`; and the
paired reading of what a stage's added second searches paid (`check_added_second_searches`), held
to `helpers.course.seeds.added_search_gain`.

A policy meets the rule when HotpotQA's share of questions with a second search is at least
SEARCH_AGAIN_RULE["hotpotqa_min"], NQ's at most SEARCH_AGAIN_RULE["nq_max"] (both bounds included), and
on HotpotQA the strict EM where it searched again is not below the EM where it stopped; the EM
condition only applies when both groups have questions (None marks an empty one).

A question was newly searched again when the policy after searched ≥ 2 times on it and the policy
before < 2 times; rows pair by "id", whatever their order, and a row without a partner is left out.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, run_checks, same
from helpers.course.recorded import eval_rows
from helpers.course.seeds import (SEARCH_AGAIN_RULE, SEEDS, SEEDS_RUN, STAGES, TRIMMED_PAIR, added_search_gain,
                                  rule_failures)

HOTPOT_MIN, NQ_MAX = SEARCH_AGAIN_RULE["hotpotqa_min"], SEARCH_AGAIN_RULE["nq_max"]


def policy_table(hotpot_share: float, nq_share: float, em_again: float | None = 0.35,
                 em_stopped: float | None = 0.25) -> dict[str, dict[str, Any]]:
    """The part of a `search_learned_table` the rule reads."""
    return {"hotpotqa": {"second_search_share": hotpot_share, "em_if_again": em_again, "em_if_stopped": em_stopped},
            "nq": {"second_search_share": nq_share, "em_if_again": 0.2, "em_if_stopped": 0.4},
            "all": {"second_search_share": (hotpot_share + 5 * nq_share) / 6, "em_strict": 0.38}}


def _case(name: str, table: dict, expected: bool) -> Case:
    hotpot, nq = table["hotpotqa"], table["nq"]
    shown = (f"≥2 searches HotpotQA {hotpot['second_search_share']:.0%}, NQ {nq['second_search_share']:.0%}; "
             f"HotpotQA EM searched again {hotpot['em_if_again']}, stopped {hotpot['em_if_stopped']}")
    return Case(name, shown, expected, lambda fn: fn(table))


RULE_CASES = [
    _case("the recorded multi-search agent", policy_table(0.79, 0.10, 0.329, 0.238), True),
    _case("HotpotQA exactly at its bound", policy_table(HOTPOT_MIN, 0.02), True),
    _case("NQ exactly at its bound", policy_table(0.6, NQ_MAX), True),
    _case("too few second searches on HotpotQA", policy_table(0.28, 0.014, 0.43, 0.26), False),
    _case("the habit spread to NQ", policy_table(0.56, 0.22, 0.321, 0.318), False),
    _case("a second search that loses answers", policy_table(0.8, 0.10, 0.275, 0.40), False),
    _case("it never searches again (no EM where it did)", policy_table(0.0, 0.0, None, 0.32), False),
    _case("it always searches again on HotpotQA (no EM where it stopped)", policy_table(1.0, 0.05, 0.3, None), True),
]

_shares = st.sampled_from([0.0, 0.1, HOTPOT_MIN - 0.01, HOTPOT_MIN, NQ_MAX, NQ_MAX + 0.01, 0.5, 1.0])
_ems = st.one_of(st.none(), st.sampled_from([0.2, 0.3, 0.35]))


def _as_the_rule_reads(fn, drawn: tuple) -> None:
    hotpot, nq, again, stopped = drawn
    table = policy_table(hotpot, nq, again if hotpot > 0 else None, stopped if hotpot < 1 else None)
    expected = not rule_failures(table)
    got = fn(table)
    if got is not expected:
        raise Mismatch(f"{expected} for HotpotQA {hotpot:.0%}, NQ {nq:.0%}, EM again {table['hotpotqa']['em_if_again']}"
                       f" / stopped {table['hotpotqa']['em_if_stopped']}", got)


RULE_PROPERTIES = [Property("the rule's three conditions, on any table", st.tuples(_shares, _shares, _ems, _ems),
                            _as_the_rule_reads, examples=150)]


def check_search_again_rule(fn: Any):
    """Run the rule's cases against `fn(table) -> bool` (True when the policy meets the rule)."""
    return run_checks("meets_search_again_rule", fn, RULE_CASES, RULE_PROPERTIES,
                      hint="both bounds include their value (≥ the HotpotQA minimum, ≤ the NQ maximum); compare the "
                           "two EMs only when neither is None; return True or False")


# --------------------------------------------------------------------------- the added second searches


def _row(key: str, source: str, searches: int, right: bool) -> dict[str, Any]:
    return {"id": key, "data_source": source, "search_calls": searches, "exact_match": right}


# before and after of each hand-made question: (source, searches, right) or None where a list lacks it
_QUESTIONS = {
    "gained": (("hotpotqa", 1, False), ("hotpotqa", 2, True)),
    "lost": (("hotpotqa", 1, True), ("hotpotqa", 2, False)),
    "once": (("hotpotqa", 1, True), ("hotpotqa", 1, True)),
    "twice both times": (("hotpotqa", 2, True), ("hotpotqa", 2, True)),
    "two then one": (("hotpotqa", 2, False), ("hotpotqa", 1, True)),
    "only before": (("hotpotqa", 1, True), None),
    "only after": (None, ("hotpotqa", 2, True)),
    "none then three": (("hotpotqa", 0, False), ("hotpotqa", 3, True)),
    "nq added": (("nq", 1, True), ("nq", 2, False)),
}


def _rows(keys: list[str], reverse_after: bool = False) -> tuple[list[dict], list[dict]]:
    before = [_row(k, *_QUESTIONS[k][0]) for k in keys if _QUESTIONS[k][0]]
    after = [_row(k, *_QUESTIONS[k][1]) for k in keys if _QUESTIONS[k][1]]
    return before, after[::-1] if reverse_after else after


def _added_case(name: str, keys: list[str], source: str, expected: tuple, reverse_after: bool = False) -> Case:
    before, after = _rows(keys, reverse_after)
    shown = (f"source {source!r}; before {[(r['id'], r['search_calls'], r['exact_match']) for r in before]}; "
             f"after {[(r['id'], r['search_calls'], r['exact_match']) for r in after]} (id, searches, right)")
    return Case(name, shown, expected, lambda fn: tuple(fn(before, after, source)))


def _expected(before: list[dict], after: list[dict], source: str) -> tuple[int, int, int]:
    gain = added_search_gain(before, after).get(source)
    return (gain["added"], gain["right_before"], gain["right_after"]) if gain else (0, 0, 0)


def _recorded_case(seed: int, source: str) -> Case:
    before, after = (eval_rows(f"seed{seed}_{stage}", SEEDS_RUN) for stage in (STAGES[0], STAGES[-1]))
    return Case(f"recorded seed {seed}, {source}", f"seed {seed}'s rows after {STAGES[0]} and after {STAGES[-1]} "
                f"({len(before)} test questions each), source {source!r}", _expected(before, after, source),
                lambda fn: tuple(fn(before, after, source)))


def _trimmed_case() -> Case:
    """A stage that dropped many second searches and added none: nothing to count as added."""
    before, after = (eval_rows("fullwiki", run) for run in TRIMMED_PAIR)
    source = "hotpotqa_fullwiki"
    return Case("recorded search_gain stage, fullwiki", f"{TRIMMED_PAIR[0]}'s rows and {TRIMMED_PAIR[1]}'s "
                f"({len(before)} fullwiki questions each), source {source!r}", _expected(before, after, source),
                lambda fn: tuple(fn(before, after, source)))


def added_cases() -> list[Case]:
    """The hand-made cases, then every recorded seed's rows and the recorded stage that only dropped second
    searches (read from results/ when the check runs)."""
    return [
        _added_case("one question gained, one lost", ["gained", "lost", "once"], "hotpotqa", (2, 1, 1)),
        _added_case("the after rows in another order", ["gained", "lost", "once"], "hotpotqa", (2, 1, 1),
                    reverse_after=True),
        _added_case("searched twice before and after: not added", ["gained", "lost", "twice both times"],
                    "hotpotqa", (2, 1, 1)),
        _added_case("a question in one list only", ["only before", "gained", "lost", "only after"], "hotpotqa",
                    (2, 1, 1)),
        _added_case("two searches before, one after: not added", ["gained", "two then one", "lost"], "hotpotqa",
                    (2, 1, 1)),
        _added_case("no search before, three after", ["none then three", "gained", "once"], "hotpotqa", (2, 0, 2)),
        _added_case("an NQ question, source hotpotqa", ["gained", "nq added", "lost"], "hotpotqa", (2, 1, 1)),
        _added_case("the same rows, source nq", ["gained", "nq added", "lost"], "nq", (1, 1, 0)),
        _added_case("no second search added", ["once", "twice both times", "two then one"], "hotpotqa", (0, 0, 0)),
        *[_recorded_case(seed, source) for seed in SEEDS for source in ("hotpotqa", "nq")],
        _trimmed_case(),
    ]


# a question: its source, searches and rightness before and after, and which lists hold it
_question = st.tuples(st.sampled_from(["hotpotqa", "nq"]), st.integers(0, 3), st.integers(0, 3), st.booleans(),
                      st.booleans(), st.sampled_from(["both", "both", "before", "after"]))
_drawn_rows = st.lists(_question, min_size=1, max_size=12).flatmap(
    lambda qs: st.tuples(st.just(qs), st.permutations(range(len(qs))), st.sampled_from(["hotpotqa", "nq"])))


def _as_paired(fn, drawn: tuple) -> None:
    questions, order, source = drawn
    questions = [questions[0][:5] + ("both",), *questions[1:]]  # the first in both lists: one pair at least
    before = [_row(f"q{i}", kind, searches, right) for i, (kind, searches, _, right, _, held) in enumerate(questions)
              if held != "after"]
    after = [_row(f"q{i}", questions[i][0], questions[i][2], questions[i][4]) for i in order
             if questions[i][5] != "before"]
    expected, got = _expected(before, after, source), tuple(fn(before, after, source))
    if not same(expected, got):
        raise Mismatch(f"{expected} for source {source!r}, before {before}, after {after}", got)


ADDED_PROPERTIES = [Property("any rows, in any order", _drawn_rows, _as_paired, examples=150)]


def check_added_second_searches(fn: Any):
    """Run the cases against `fn(before_rows, after_rows, source) -> (added, right_before, right_after)`."""
    return run_checks("added_second_searches", fn, added_cases(), ADDED_PROPERTIES,
                      hint="pair the rows by their \"id\" (not their position), keep the source's questions in both "
                           "lists, count those with ≥ 2 searches after and < 2 before, then count the right answers "
                           "among those same questions in each list")
