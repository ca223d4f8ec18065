"""Check a reward the learner plugs in (notebook 11): exact match plus a bonus for a first query
that the policy rewrote and that brought a gold passage.

The rule, stated here and not read from any implementation: a trajectory's reward is the outcome
reward (1 right, 0 wrong, −0.1 without a valid answer) plus `BONUS` when (a) it ended with a valid
answer, (b) its first search's query is not the question (case, punctuation and articles ignored,
`helpers.evidence.query_differs`) and (c) the passages that first search put in its observation
(`SearchRecord.passage_ids`) include one of the question's gold passages
(`metadata["gold_passage_ids"]`). A later search never earns it: the bonus is for the first query.
"""

from __future__ import annotations

from typing import Any, Sequence

from helpers.checkers._runner import Case, run_checks
from helpers.data import SearchExample
from helpers.rollout import Group, SearchRecord, Trajectory

BONUS = 0.1
QUESTION = "Which city hosted the 1900 Summer Olympics?"
GOLD = ["p-paris-1900", "p-olympics"]


def _example(gold: Sequence[str] = GOLD) -> SearchExample:
    return SearchExample("check-reward", QUESTION, ["Paris"], "hotpotqa", metadata={"gold_passage_ids": list(gold)})


def _trajectory(index: int, queries: Sequence[tuple[str, Sequence[str]]], valid: bool, right: bool,
                example: SearchExample) -> Trajectory:
    searches = [SearchRecord(turn_index=turn, call_id=f"call-{turn}", query=query, ok=True, error=None, latency=0.0,
                             items_returned=len(ids), items_kept=len(ids), fitted=bool(ids), passage_ids=list(ids))
                for turn, (query, ids) in enumerate(queries)]
    return Trajectory(example=example, group_index=index, messages=[], searches=searches, search_calls=len(searches),
                      valid_format=valid, exact_match=right and valid, done=True,
                      end_reason="answer" if valid else "invalid")


# (what the trajectory did, its searches, valid answer, right answer, expected reward)
ROWS = [
    ("right, the question as its first query, gold retrieved", [(QUESTION, ["p-paris-1900", "x"])], True, True, 1.0),
    ("right, a rewritten first query, gold retrieved", [("1900 Olympics host city", ["p-paris-1900"])], True, True,
     1.0 + BONUS),
    ("wrong, a rewritten first query, gold retrieved", [("1900 Olympics", ["x", "p-olympics"])], True, False, BONUS),
    ("no valid answer, a rewritten first query, gold retrieved", [("1900 Olympics", ["p-olympics"])], False, False, -0.1),
    ("wrong, a rewritten first query, no gold", [("Olympic games list", ["x", "y"])], True, False, 0.0),
    ("right, no search", [], True, True, 1.0),
    ("wrong, gold only in the second search", [("Olympic games list", ["x"]), ("Paris 1900", ["p-paris-1900"])],
     True, False, 0.0),
    ("right, the question in other case and punctuation", [(QUESTION.upper().rstrip("?"), ["p-paris-1900"])], True,
     True, 1.0),
]


def _case(name: str, rows: Sequence[tuple], gold: Sequence[str] = GOLD, expected: list[float] | None = None) -> Case:
    example = _example(gold)

    def run(fn: Any) -> list[float]:
        group = Group(example, [_trajectory(i, searches, valid, right, example)
                                for i, (_, searches, valid, right, _) in enumerate(rows)])
        result = fn(group)
        rewards = getattr(result, "rewards", None)
        if rewards is None:
            raise TypeError(f"a reward function returns GroupRewards(rewards, components), got {type(result).__name__}")
        return [round(float(r), 9) for r in rewards]

    shown = "a group of " + "; ".join(f"[{row[0]}]" for row in rows) + (f"; gold {list(gold)}" if gold else "; no gold on record")
    return Case(name, shown, expected if expected is not None else [row[4] for row in rows], run)


REWARD_CASES = [
    _case("the rule, trajectory by trajectory", ROWS),
    _case("one group of the two that differ only by the rewrite", [ROWS[0], ROWS[1]]),
    _case("a question without gold passages on record: exact match only", [ROWS[1], ROWS[2]], gold=[],
          expected=[1.0, 0.0]),
]


def check_rewrite_bonus(fn: Any):
    """Run the reward cases against `fn(group) -> GroupRewards` (one reward per trajectory)."""
    return run_checks("rewrite_bonus", fn, REWARD_CASES,
                      hint=f"outcome reward (1 / 0 / -0.1), plus {BONUS} only with a valid answer, when the FIRST "
                           "search's query differs from the question (query_differs) and its passage_ids hold a "
                           "gold id (gold_passage_ids(group.example))")
