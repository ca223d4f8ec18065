"""Run a learner's function against cases and properties, and say what passed.

A checker never raises on a wrong answer (or on a function that raises): it prints one line per
case, the first failing input with what was expected and what came back, and ends with
"correct" or "not yet: <hint>". It returns a Verdict (True/False) so tests can use it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from hypothesis import HealthCheck, Verbosity, given, settings
from hypothesis import strategies as st

from helpers.checkers.exercises import Verdict, report

SHOWN_CHARS = 160


@dataclass(frozen=True)
class Raised:
    """What a call that raised came back as: shown as the exception, compared by type."""

    error: BaseException

    def __repr__(self) -> str:
        return f"raised {type(self.error).__name__}: {str(self.error)[:120]}"


@dataclass(frozen=True)
class Raises:
    """An expected exception: any instance of `kind` whose message holds `words`."""

    kind: type[BaseException]
    words: str = ""

    def __repr__(self) -> str:
        return f"raises {self.kind.__name__}" + (f" (saying {self.words!r})" if self.words else "")

    def matches(self, got: Any) -> bool:
        return isinstance(got, Raised) and isinstance(got.error, self.kind) and self.words.lower() in str(got.error).lower()


@dataclass(frozen=True)
class Case:
    """One input: `run(fn)` calls the learner's function and returns what is compared."""

    name: str
    shown: str  # the input as a learner reads it
    expected: Any
    run: Callable[[Callable], Any]


@dataclass(frozen=True)
class Property:
    """A rule for every input `strategy` draws; `check(fn, example)` raises Mismatch when broken."""

    name: str
    strategy: st.SearchStrategy
    check: Callable[[Callable, Any], None]
    examples: int = 300


class Mismatch(AssertionError):
    def __init__(self, expected: Any, got: Any) -> None:
        super().__init__(f"expected {expected!r}, got {got!r}")
        self.expected, self.got = expected, got


def same(expected: Any, got: Any, tol: float = 1e-6) -> bool:
    """Equality that reads floats with a tolerance, through lists, tuples and dicts."""
    if isinstance(expected, Raises):
        return expected.matches(got)
    if isinstance(got, Raised):
        return False
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(float(expected), float(got), rel_tol=0, abs_tol=tol)
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(expected) == len(got) and all(same(e, g, tol) for e, g in zip(expected, got))
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(same(expected[k], got[k], tol) for k in expected)
    return expected == got


def first_difference(expected: Any, got: Any) -> str | None:
    """Where two dicts of lists first differ ("advantages[49]: expected 0.5, got 0.0"), else None."""
    if not (isinstance(expected, dict) and isinstance(got, dict)):
        return None
    for key in expected:
        if key not in got:
            return f"{key}: missing"
        e, g = expected[key], got[key]
        if isinstance(e, (list, tuple)) and isinstance(g, (list, tuple)):
            for index, (a, b) in enumerate(zip(e, g)):
                if not same(a, b):
                    return f"{key}[{index}]: expected {a!r}, got {b!r}"
            if len(e) != len(g):
                return f"{key}: expected {len(e)} entries, got {len(g)}"
        elif not same(e, g):
            return f"{key}: expected {_short(e)}, got {_short(g)}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _call(case: Case, fn: Callable) -> Any:
    try:
        return case.run(fn)
    except Exception as error:  # the learner's function raising is a result to show, not a crash
        return Raised(error)


def _falsify(prop: Property, fn: Callable) -> tuple[Any, str] | None:
    """The smallest input hypothesis finds that breaks the property, and why; None when none."""
    last: list[Any] = []

    @settings(max_examples=prop.examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, print_blob=False)
    @given(prop.strategy)
    def holds(example):
        last[:] = [example]
        prop.check(fn, example)

    try:
        holds()
    except Mismatch as broken:
        return last[0] if last else None, f"expected {_short(broken.expected)}, got {_short(broken.got)}"
    except Exception as error:  # the learner's function raised on a drawn input
        return last[0] if last else None, repr(Raised(error))
    return None


def run_checks(title: str, fn: Any, cases: Sequence[Case], properties: Sequence[Property] = (),
               hint: str = "") -> Verdict:
    """Print which cases and properties hold for `fn`, the first failure in full, then the verdict."""
    if not callable(fn):
        return report(False, f"pass your function itself to the checker (got {type(fn).__name__})")
    failures: list[tuple[str, str, str, str, str | None]] = []  # (name, input, expected, got, where)
    lines = []
    for case in cases:
        got = _call(case, fn)
        ok = same(case.expected, got)
        lines.append(("✓ " if ok else "✗ ") + case.name)
        if not ok:
            where = first_difference(case.expected, got)
            failures.append((case.name, case.shown, _short(case.expected), _short(got), where))
    for prop in properties:
        broken = _falsify(prop, fn)
        lines.append(("✓ " if broken is None else "✗ ") + f"property: {prop.name}")
        if broken is not None:
            example, why = broken
            failures.append((f"property: {prop.name}", _short(example), "the property holds", why, None))
    passed = len(lines) - len(failures)
    print(f"{title}: {passed} of {len(lines)} checks pass")
    for line in lines:
        print("  " + line)
    if failures:
        name, shown, expected, got, where = failures[0]
        print(f"first failure — {name}\n  input:    {shown}\n  expected: {expected}\n  got:      {got}")
        if where:
            print(f"  first difference: {where}")
    return report(not failures, hint or "fix the first failure above and run the cell again")
