"""Checks for the preference reward (notebook 14): the symmetrised Bradley–Terry loss and the gate.

L_sym = 1/2 l(Delta(x, a, b), r) + 1/2 l(Delta(x, b, a), 1 - r), l the BT loss averaged over the batch;
R_i = r_base_i * s_i - pen_eff_i: preference credit only for a correct answer.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, run_checks


def _bt(delta: float, r: float) -> float:
    log_sig = lambda x: -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))  # noqa: E731
    return -(r * log_sig(delta) + (1 - r) * log_sig(-delta))


def _sym(d_ab: list[float], d_ba: list[float], r: list[float]) -> float:
    n = len(r)
    return sum(0.5 * _bt(a, y) + 0.5 * _bt(b, 1 - y) for a, b, y in zip(d_ab, d_ba, r)) / n


def _call_loss(fn: Callable, d_ab: list[float], d_ba: list[float], r: list[float]) -> float:
    import torch

    out = fn(torch.tensor(d_ab), torch.tensor(d_ba), torch.tensor(r))
    return float(out)


def _loss_case(name: str, d_ab: list[float], d_ba: list[float], r: list[float]) -> Case:
    return Case(name, f"delta_ab={d_ab}, delta_ba={d_ba}, r={r}", _sym(d_ab, d_ba, r),
                lambda fn: _call_loss(fn, d_ab, d_ba, r))


LOSS_CASES = [
    _loss_case("an undecided model: log 2", [0.0], [0.0], [1.0]),
    _loss_case("a consistent model, right in both orders", [2.0, -1.0], [-2.0, 1.0], [1.0, 0.0]),
    _loss_case("a model that favours slot A pays in the swapped order", [3.0, 3.0], [3.0, 3.0], [1.0, 0.0]),
    _loss_case("a batch is averaged, not summed", [0.5, -0.2, 1.0, 0.0], [0.1, 0.4, -1.0, 2.0], [1.0, 0.0, 1.0, 1.0]),
    _loss_case("large margins stay finite", [60.0], [-60.0], [0.0]),
]

_batches = st.lists(st.tuples(st.floats(-8, 8), st.floats(-8, 8), st.sampled_from([0.0, 1.0])), min_size=1, max_size=6)


def _order_free(fn: Callable, batch: list[tuple[float, float, float]]) -> None:
    d_ab, d_ba, r = ([x[i] for x in batch] for i in range(3))
    forward = _call_loss(fn, d_ab, d_ba, r)
    swapped = _call_loss(fn, d_ba, d_ab, [1 - y for y in r])
    if not math.isclose(forward, _sym(d_ab, d_ba, r), abs_tol=1e-4):
        raise Mismatch(_sym(d_ab, d_ba, r), forward)
    if not math.isclose(forward, swapped, abs_tol=1e-4):
        raise Mismatch(f"the same loss with the orders swapped ({forward:.5f})", swapped)


LOSS_PROPERTIES = [Property("the loss is the same when every pair is shown the other way round", _batches,
                            _order_free, examples=150)]


def check_symmetrised_loss(fn: Any):
    """Run the cases against `fn(delta_ab, delta_ba, r)` (torch tensors) -> the mean loss (a scalar tensor)."""
    return run_checks("symmetrised_loss", fn, LOSS_CASES, LOSS_PROPERTIES,
                      hint="l(Delta, r) = -[r log sigma(Delta) + (1 - r) log(1 - sigma(Delta))]; average "
                           "1/2 l(delta_ab, r) + 1/2 l(delta_ba, 1 - r) over the batch (F.logsigmoid stays finite)")


def _gate_case(name: str, r_base: list[int], s: list[float], pen: list[float]) -> Case:
    expected = [r * p - q for r, p, q in zip(r_base, s, pen)]
    return Case(name, f"r_base={r_base}, s={s}, pen_eff={pen}", expected,
                lambda fn: [float(x) for x in fn(r_base, s, pen)])


GATE_CASES = [
    _gate_case("a correct, preferred answer keeps its preference", [1], [0.9], [0.1]),
    _gate_case("a wrong answer gets no credit, however much it is preferred", [0], [1.0], [0.05]),
    _gate_case("a mixed group", [1, 0, 1, 0], [0.8, 0.95, 0.3, 0.1], [0.2, 0.0, 0.1, 0.3]),
    _gate_case("without penalties a wrong answer scores 0", [0, 0], [0.7, 0.2], [0.0, 0.0]),
]

_groups = st.lists(st.tuples(st.integers(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)),
                   min_size=1, max_size=8)


def _no_credit_when_wrong(fn: Callable, group: list[tuple[int, float, float, float]]) -> None:
    r_base, s, pen, other = ([x[i] for x in group] for i in range(4))
    first = [float(x) for x in fn(r_base, s, pen)]
    changed = [p if r else o for r, p, o in zip(r_base, s, other)]
    second = [float(x) for x in fn(r_base, changed, pen)]
    for i, r in enumerate(r_base):
        if not r and not (math.isclose(first[i], -pen[i], abs_tol=1e-9) and math.isclose(second[i], -pen[i], abs_tol=1e-9)):
            raise Mismatch(f"member {i} is wrong: R = -pen_eff = {-pen[i]} whatever s is", (first[i], second[i]))


GATE_PROPERTIES = [Property("a wrong answer never gets preference credit", _groups, _no_credit_when_wrong, examples=200)]


def check_gate(fn: Any):
    """Run the cases against `fn(r_base, s, pen_eff)` -> the rewards R of a group, one per member."""
    return run_checks("gate", fn, GATE_CASES, GATE_PROPERTIES,
                      hint="R_i = r_base_i * s_i - pen_eff_i: multiply, do not add (a sum lets style buy back a wrong answer)")
