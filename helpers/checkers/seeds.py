"""Checks for notebook 10's exercise on choosing a policy: the search-again rule as a function the
learner writes (`check_search_again_rule`), held to `helpers.course.seeds.rule_failures`.

A policy meets the rule when HotpotQA's share of questions with a second search is at least
SEARCH_AGAIN_RULE["hotpotqa_min"], NQ's at most SEARCH_AGAIN_RULE["nq_max"] (both bounds included), and
on HotpotQA the strict EM where it searched again is not below the EM where it stopped; the EM
condition only applies when both groups have questions (None marks an empty one).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, run_checks
from helpers.course.seeds import SEARCH_AGAIN_RULE, rule_failures

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
