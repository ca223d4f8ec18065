"""Checks for the training step's pieces: `build_datum` (notebook 07), `assign_group_advantages`
and `weight_micro_batch_for_global_mean` (notebook 08).

The expected values are stated from the rules, not read from the course's implementation: a
Datum is the whole trajectory shifted by one, context positions carry logprob 0 and advantage 0;
an advantage is the reward minus its group's mean; micro-batch weights n_k / N make the summed
per-call mean losses give the gradient of the mean over all N trajectories.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import numpy as np
import pytrio
import torch
from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, Raises, run_checks
from helpers.data import SearchExample
from helpers.rollout import AssistantTurn, Trajectory
from helpers.datums import TrainingDatum, build_datum

EXAMPLE = SearchExample("check", "a question", ["an answer"], "check")


def _logprob(token: int) -> float:
    return -0.01 * (token % 7 + 1)


def make_trajectory(segments: Sequence[int], advantage: float = 0.5) -> Trajectory:
    """Alternating context / sampled segments of the given lengths, numbered tokens 1, 2, 3, ...

    [50, 20, 300, 8] is the paper exercise: prompt 50, turn 20, observation 300, turn 8.
    """
    tokens = list(range(1, sum(segments) + 1))
    turns, start, context = [], 0, []
    for index in range(0, len(segments), 2):
        context = tokens[: start + segments[index]]
        start += segments[index]
        completion = tokens[start : start + segments[index + 1]]
        start += segments[index + 1]
        turns.append(AssistantTurn(list(context), completion, [_logprob(t) for t in completion], f"turn {index // 2}"))
    return Trajectory(example=EXAMPLE, group_index=0, messages=[], turns=turns, advantage=advantage)


def _expected_datum(segments: Sequence[int], advantage: float) -> dict[str, Any]:
    full, logprobs, advantages = [], [], []
    token = 1
    for index, length in enumerate(segments):
        sampled = index % 2 == 1
        for _ in range(length):
            full.append(token)
            logprobs.append(_logprob(token) if sampled else 0.0)
            advantages.append(advantage if sampled else 0.0)
            token += 1
    return {"length": len(full) - 1, "input": full[:-1], "target": full[1:],
            "logprobs": logprobs[1:], "advantages": advantages[1:]}


def _column(datum: pytrio.Datum, name: str) -> np.ndarray:
    return np.asarray(datum.loss_fn_inputs[name].to_numpy())


def _datum_view(item: Any) -> dict[str, Any]:
    datum = getattr(item, "datum", None)
    if datum is None:
        raise TypeError(f"build_datum must return a TrainingDatum(datum, length), got {type(item).__name__}")
    return {
        "length": item.length,
        "input": [int(t) for t in datum.model_input.to_ints()],
        "target": [int(t) for t in _column(datum, "target_tokens")],
        "logprobs": [float(x) for x in _column(datum, "logprobs")],
        "advantages": [float(x) for x in _column(datum, "advantages")],
    }


def _datum_case(name: str, segments: Sequence[int], advantage: float) -> Case:
    labels = ["prompt", "turn"] + ["observation", "turn"] * ((len(segments) - 2) // 2)
    shown = " → ".join(f"{label} {n}" for label, n in zip(labels, segments)) + f", advantage {advantage}"
    return Case(name, shown, _expected_datum(segments, advantage),
                lambda fn: _datum_view(fn(make_trajectory(segments, advantage))))


def _broken(kind: str) -> Trajectory:
    trajectory = make_trajectory([3, 2, 4, 2])
    if kind == "logprobs":
        trajectory.turns[0].logprobs = trajectory.turns[0].logprobs[:-1]
    elif kind == "prefix":
        trajectory.turns[1].prompt_tokens[1] = 999_999  # a re-rendered prompt: the prefix no longer matches
    else:
        trajectory.turns = []
    return trajectory


DATUM_CASES = [
    _datum_case("one turn", [5, 3], 1.0),
    _datum_case("the paper trajectory (377 positions, 28 with an advantage)", [50, 20, 300, 8], 0.5),
    _datum_case("three turns, negative advantage", [5, 3, 4, 2, 6, 1], -0.25),
    Case("no turns", "a trajectory without assistant turns", Raises(ValueError), lambda fn: fn(_broken("empty"))),
    Case("a logprob missing", "turn 1 has one logprob fewer than tokens", Raises(ValueError),
         lambda fn: fn(_broken("logprobs"))),
    Case("a prompt that does not continue", "turn 2's prompt changed a token of turn 1's prompt", Raises(ValueError),
         lambda fn: fn(_broken("prefix"))),
]


def check_build_datum(fn: Any):
    """Run the Datum cases against `fn(trajectory) -> TrainingDatum`."""
    return run_checks("build_datum", fn, DATUM_CASES,
                      hint="gather prompt (zeros), each turn's new prompt tokens (zeros) and sampled tokens "
                           "(their logprobs, the trajectory's advantage); shift once at the end")


# ---------------------------------------------------------------- group advantages


def group_of(rewards: Sequence[float], question_indices: Sequence[int] | None = None) -> list[Trajectory]:
    indices = list(question_indices) if question_indices is not None else [0] * len(rewards)
    return [Trajectory(example=EXAMPLE, group_index=i, question_index=q, messages=[], reward=float(r), advantage=99.0)
            for i, (r, q) in enumerate(zip(rewards, indices))]


def _advantages_case(name: str, rewards: Sequence[float], indices: Sequence[int] | None,
                     advantages: Sequence[float], degenerate: int, exact: bool = False) -> Case:
    def run(fn: Callable) -> dict[str, Any]:
        group = group_of(rewards, indices)
        count = fn(group)
        got = [t.advantage for t in group]
        if exact:  # equal rewards must give exactly 0, not a float residue like 1e-17
            got = ["exactly 0" if a == 0.0 else a for a in got]
        return {"advantages": got, "returned (degenerate groups)": count}

    expected = {"advantages": ["exactly 0" if exact else a for a in advantages], "returned (degenerate groups)": degenerate}
    shown = f"rewards {list(rewards)}" + (f", question_index {list(indices)}" if indices else ", one question")
    return Case(name, shown, expected, run)


ADVANTAGE_CASES = [
    _advantages_case("Happy-LLM §8.3.5's group", [1, 0, 1, 0], None, [0.5, -0.5, 0.5, -0.5], 0),
    _advantages_case("one right of four", [1, 0, 0, 0], None, [0.75, -0.25, -0.25, -0.25], 0),
    _advantages_case("two questions, interleaved", [1, 0, 0, 0, 1, -0.1], [0, 1, 0, 1, 0, 1],
                     [1 / 3, 0.1 / 3, -2 / 3, 0.1 / 3, 1 / 3, -0.2 / 3], 0),
    _advantages_case("all wrong: degenerate", [0, 0, 0, 0], None, [0, 0, 0, 0], 1, exact=True),
    _advantages_case("all badly formatted: exactly zero", [-0.1, -0.1, -0.1], None, [0, 0, 0], 1, exact=True),
    _advantages_case("one degenerate group of two", [1, 1, 1, 0], [0, 0, 1, 1], [0, 0, 0.5, -0.5], 1),
]

_groups = st.lists(st.tuples(st.sampled_from([1.0, 0.0, -0.1]), st.integers(0, 3)), min_size=1, max_size=12)


def _mean_is_the_baseline(fn: Callable, rows: list[tuple[float, int]]) -> None:
    group = group_of([r for r, _ in rows], [q for _, q in rows])
    fn(group)
    for question in {q for _, q in rows}:
        members = [t for t in group if t.question_index == question]
        mean = sum(t.reward for t in members) / len(members)
        for t in members:
            if abs(t.advantage - (t.reward - mean)) > 1e-9:
                raise Mismatch(f"question {question}: reward {t.reward} - group mean {mean:.4f}", t.advantage)


ADVANTAGE_PROPERTIES = [Property("every advantage is its reward minus its own question's mean", _groups,
                                 _mean_is_the_baseline, examples=200)]


def check_assign_group_advantages(fn: Any):
    """Run the group cases against `fn(trajectories) -> degenerate group count` (sets .advantage)."""
    return run_checks("assign_group_advantages", fn, ADVANTAGE_CASES, ADVANTAGE_PROPERTIES,
                      hint="group by question_index; A = reward - the group's mean; a group whose rewards are all "
                           "equal gets exactly 0.0 and counts as degenerate")


# ---------------------------------------------------------------- micro-batch weights

VOCAB = 11


def _datums(advantages: Sequence[float]) -> list[TrainingDatum]:
    """Small datums of different lengths: each trajectory [prompt, turn] with its own advantage."""
    items = []
    for index, advantage in enumerate(advantages):
        segments = [2 + index % 3, 2 + (index * 2) % 3]
        trajectory = make_trajectory(segments, advantage)
        for turn in trajectory.turns:  # tokens inside the tiny vocabulary
            turn.prompt_tokens = [t % VOCAB for t in turn.prompt_tokens]
            turn.completion_tokens = [t % VOCAB for t in turn.completion_tokens]
        items.append(build_datum(trajectory))
    return items


def _loss(datum: pytrio.Datum, theta: torch.Tensor) -> torch.Tensor:
    """The importance-sampling loss of one datum on a one-table policy: a sum over its tokens."""
    targets = torch.as_tensor(_column(datum, "target_tokens"), dtype=torch.long)
    old = torch.as_tensor(_column(datum, "logprobs"), dtype=torch.float64)
    advantages = torch.as_tensor(_column(datum, "advantages"), dtype=torch.float64)
    new = torch.log_softmax(theta, dim=-1)[targets]
    return -(torch.exp(new - old) * advantages).sum()


def _gradient(losses: list[torch.Tensor], theta: torch.Tensor) -> list[float]:
    (grad,) = torch.autograd.grad(sum(losses), theta)
    return [round(float(g), 9) for g in grad]


def _identity_case(sizes: Sequence[int]) -> Case:
    advantages = [0.5, -0.5, 0.75, -0.25, 0.25, -0.75, 1.0, -1.0][: sum(sizes)]
    theta0 = torch.linspace(-0.5, 0.5, VOCAB, dtype=torch.float64)

    def expected() -> list[float]:
        theta = theta0.clone().requires_grad_(True)
        items = _datums(advantages)
        return _gradient([_loss(item.datum, theta) / len(items) for item in items], theta)

    def run(fn: Callable) -> list[float]:
        theta = theta0.clone().requires_grad_(True)
        items = _datums(advantages)
        total, calls, start = len(items), [], 0
        for size in sizes:
            weighted = fn(items[start : start + size], total)
            start += size
            # forward_backward on this engine: a sum over tokens, a mean over the call's datums.
            calls.append(sum(_loss(d, theta) for d in weighted) / len(weighted))
        return _gradient(calls, theta)

    shown = f"{sum(sizes)} datums in micro-batches of {' + '.join(map(str, sizes))}; gradient of the summed per-call means"
    return Case(f"the n_k/N identity, micro-batches {'+'.join(map(str, sizes))}", shown, expected(), run)


def _untouched_case() -> Case:
    def view(datums: Sequence[Any]) -> dict[str, Any]:
        return {
            "input": [list(d.model_input.to_ints()) for d in datums],
            "target": [_column(d, "target_tokens").tolist() for d in datums],
            "logprobs": [[round(float(x), 6) for x in _column(d, "logprobs")] for d in datums],
            "advantages": [[round(float(x), 6) for x in _column(d, "advantages")] for d in datums],
        }

    items = _datums([0.5, -1.0])
    original = view([item.datum for item in items])
    expected = dict(original, advantages=[[round(a * 2 / 8, 6) for a in row] for row in original["advantages"]])
    return Case("only the advantages change (× n_k/N)", "2 datums of a step of N = 8", expected,
                lambda fn: view(fn(copy.deepcopy(items), 8)))


WEIGHT_CASES = [
    _untouched_case(),
    _identity_case([5, 3]),
    _identity_case([4, 3, 1]),
    Case("N smaller than the micro-batch", "3 datums, total_samples=2", Raises(ValueError),
         lambda fn: fn(_datums([0.5, -0.5, 0.25]), 2)),
]


def check_weight_micro_batch(fn: Any):
    """Run the weighting cases against `fn(micro_batch, total_samples) -> list[pytrio.Datum]`."""
    return run_checks("weight_micro_batch_for_global_mean", fn, WEIGHT_CASES,
                      hint="multiply every advantage of micro-batch k by n_k / N (a new Datum, targets and "
                           "old logprobs untouched); refuse N smaller than the micro-batch")
