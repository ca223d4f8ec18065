"""Checks for `normalize_answer` and `score_answer` (notebook 03): the reward's unit examples
and its properties (three levels only; normalising twice changes nothing)."""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, run_checks
from helpers.reward import normalize_answer

PENALTY = -0.1

NORMALIZE_EXAMPLES = [
    ("The Eiffel Tower.", "eiffel tower"),
    ("  A   tale of  Two Cities! ", "tale of two cities"),
    ("«Lyon», France", "lyon france"),
    ("anthem", "anthem"),  # 'an' only as a whole word
    ("Théâtre—de l’Odéon", "théâtrede lodéon"),  # every Unicode punctuation mark goes
    ("", ""),
]


def _normalize_case(raw: str, expected: str) -> Case:
    return Case(repr(raw), repr(raw), expected, lambda fn: fn(raw))


NORMALIZE_CASES = [_normalize_case(raw, expected) for raw, expected in NORMALIZE_EXAMPLES]


def _idempotent(fn: Callable, text: str) -> None:
    once = fn(text)
    twice = fn(once)
    if twice != once:
        raise Mismatch(f"normalising {once!r} again gives it back", twice)


NORMALIZE_PROPERTIES = [Property("normalising twice changes nothing", st.text(max_size=40), _idempotent)]

# (final turn, references) -> (reward, valid_format, exact_match, answer)
SCORE_EXAMPLES = [
    ("Answer: The Eiffel Tower.", ["eiffel tower"], (1.0, True, True, "The Eiffel Tower.")),
    ("I searched twice.\n  answer:   Lyon, France  \n", ["lyon france"], (1.0, True, True, "Lyon, France")),
    ("ANSWER:France", ["France"], (1.0, True, True, "France")),
    ("Answer: Lyon", ["Paris", "France"], (0.0, True, False, "Lyon")),
    ("Answer: JFK", ["John F. Kennedy", "jfk"], (1.0, True, True, "JFK")),
    ("Answer: the", ["a"], (0.0, True, False, "the")),  # normalises to nothing: matches nothing
    ("Lyon", ["Lyon"], (PENALTY, False, False, None)),
    ("The answer: Paris", ["Paris"], (PENALTY, False, False, None)),  # not at the start of a line
    ("Answer: Lyon\nanswer: Lyon", ["Lyon"], (PENALTY, False, False, None)),
    ("Answer:   ", ["Paris"], (PENALTY, False, False, None)),
    ("Answer:\nParis", ["Paris"], (PENALTY, False, False, None)),  # the answer is on its line
    ('<tool_call>{"name": "search"}</tool_call>\nAnswer: Paris', ["Paris"], (PENALTY, False, False, None)),
]


def _fields(result: Any) -> tuple[Any, ...]:
    return tuple(getattr(result, name, "<missing>") for name in ("reward", "valid_format", "exact_match", "answer"))


def _score_case(text: str, references: list[str], expected: tuple[Any, ...]) -> Case:
    return Case(repr(text), f"{text!r}, references={references}", expected, lambda fn: _fields(fn(text, references)))


SCORE_CASES = [_score_case(*example) for example in SCORE_EXAMPLES]

_lines = st.sampled_from(["Answer:", "answer: ", "Answer: Paris", "\n", " ", "the", "an", ".", "<tool_call>", "é"])
_finals = st.one_of(st.text(max_size=50), st.lists(st.one_of(_lines, st.text(max_size=5)), max_size=10).map("".join))
_references = st.lists(st.text(max_size=12), max_size=3)


def _three_levels(fn: Callable, example: tuple[str, list[str]]) -> None:
    reward, valid, exact, _ = _fields(fn(*example))
    if reward not in (1.0, 0.0, PENALTY):
        raise Mismatch("a reward of 1, 0 or -0.1", reward)
    if valid != (reward != PENALTY) or exact != (reward == 1.0):
        raise Mismatch("valid_format == (reward != -0.1) and exact_match == (reward == 1)",
                       {"reward": reward, "valid_format": valid, "exact_match": exact})


def _case_and_punctuation(fn: Callable, answer: str) -> None:
    # Only one-line answers (any Unicode line break ends a line, as str.splitlines has it) with
    # something left after normalising (the course's normaliser decides which).
    if len(f"x{answer}x".splitlines()) > 1 or "<tool_call>" in answer or not normalize_answer(answer):
        return
    reward = _fields(fn(f"Answer: {answer}", [f"'{answer.upper() if answer.isascii() else answer}'!"]))[0]
    if reward not in (1.0, PENALTY):
        raise Mismatch("an answer matches its own upper-cased, quoted form (or the format is invalid)", reward)


SCORE_PROPERTIES = [
    Property("any final turn scores 1, 0 or -0.1, and the flags agree", st.tuples(_finals, _references), _three_levels),
    Property("case and punctuation never matter", st.text(max_size=30), _case_and_punctuation),
]


def check_normalize_answer(fn: Any):
    """Run the normalisation examples and idempotence against `fn(text) -> str`."""
    return run_checks("normalize_answer", fn, NORMALIZE_CASES, NORMALIZE_PROPERTIES,
                      hint="lower-case, drop every character whose Unicode category starts with 'P', "
                           "drop the words a/an/the, collapse whitespace")


def check_score_answer(fn: Any):
    """Run the reward examples and properties against `fn(text, references) -> RewardResult`."""
    return run_checks("score_answer", fn, SCORE_CASES, SCORE_PROPERTIES,
                      hint="exactly one non-empty line that starts with 'Answer:' (any case) and no call markup "
                           "is a valid format; then the normalised answer must equal a normalised reference")
