"""The package's floor plan, read from the source with `ast`: each concept has one home, files stay small.

One observation fitter (the rollout's), one answer matcher (the reward's), one rule for a group
without signal (the advantages'), one computation of a batch's metrics; no module over 600 lines
(the engine's, which mirror the SDK, aside), the rollout's modules and the training loop under
450, no function over 80 lines (60 in the rollout).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import helpers

ROOT = Path(helpers.__file__).parent
MODULES = sorted(ROOT.rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT.parent).as_posix()


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def defined_functions(path: Path) -> set[str]:
    return {node.name for node in ast.walk(tree(path)) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def homes(names: set[str]) -> dict[str, list[str]]:
    """Module paths that define a function of each name."""
    found: dict[str, list[str]] = {name: [] for name in names}
    for path in MODULES:
        for name in defined_functions(path) & names:
            found[name].append(relative(path))
    return found


def calls(node: ast.AST) -> set[str]:
    """Names of the functions a piece of code calls (`f(...)` and `x.f(...)`)."""
    out = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            out.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return out


def function(path: str, name: str) -> ast.AST:
    for node in ast.walk(tree(ROOT.parent / path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise AssertionError(f"{path} defines no function {name}")


# --------------------------------------------------------------------------- one home per concept


def test_one_observation_fitter():
    """Only the rollout fits an observation to a token budget; no module keeps an approximation."""
    fitters = {path: sorted(name for name in defined_functions(path) if name.startswith("fit_"))
               for path in MODULES}
    assert {relative(p) for p, names in fitters.items() if names} == {"helpers/rollout/observation.py"}
    measuring = [f"{relative(p)}:{node.name}" for p in MODULES if relative(p) != "helpers/rollout/observation.py"
                 for node in ast.walk(tree(p)) if isinstance(node, ast.FunctionDef)
                 and {"format_results", "encode"} <= calls(node)]
    assert measuring == [], "these functions count the tokens of formatted search results themselves"
    overheads = [relative(p) for p in MODULES if "TOOL_TURN_OVERHEAD" in p.read_text()]
    assert overheads == []


def test_one_answer_matcher():
    matchers = homes({"find_answer_in", "matching_answer", "contains_answer"})
    assert matchers == {name: ["helpers/reward.py"] for name in matchers}
    assert "matching_answer" in calls(function("helpers/reward.py", "find_answer_in"))


@pytest.mark.parametrize("text, answers", [
    ("The Eiffel Tower stands in Paris.", ["eiffel tower"]),
    ("a Paris-based firm", ["Paris"]),  # not a word of its own once punctuation goes
    ("songs by Beatles, mostly", ["The Beatles"]),  # articles do not count
    ("St Louis, Missouri", ["St. Louis"]),
    ("Parisian cafes", ["Paris"]),
    ("nothing here", ["", "  "]),
])
def test_the_teacher_finds_an_answer_exactly_where_the_reward_does(text, answers):
    from helpers.reward import find_answer_in, matching_answer, normalize_answer

    found = find_answer_in(text, answers)
    assert (found is None) == (matching_answer(text, answers) is None)
    if found is not None:  # spelled as the text spells it, and the reward accepts it
        assert found in text
        assert normalize_answer(found) == normalize_answer(matching_answer(text, answers))


def test_one_rule_for_a_group_without_signal():
    equal_rewards = 1e-12
    rules = homes({"no_signal", "group_advantages", "assign_advantages"})
    assert rules == {name: ["helpers/advantages.py"] for name in rules}
    for path in MODULES:
        if relative(path) == "helpers/advantages.py":
            continue
        for node in ast.walk(tree(path)):
            # len(set(rewards)) == 1, or a tolerance of its own
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) and getattr(node.left.func, "id", "") == "len":
                inner = node.left.args[0] if node.left.args else None
                assert not (isinstance(inner, ast.Call) and getattr(inner.func, "id", "") == "set"
                            and any(isinstance(c, ast.Constant) and c.value == 1 for c in node.comparators)), \
                    f"{relative(path)}:{node.lineno} decides on its own that a group has no signal"
            if isinstance(node, ast.Constant) and node.value == equal_rewards and "engine" not in path.parts:
                raise AssertionError(f"{relative(path)}:{node.lineno} keeps its own tolerance for equal rewards")


def test_the_exercises_and_the_widgets_ask_the_same_rule():
    from helpers.advantages import group_advantages, no_signal
    from helpers.data import SearchExample
    from helpers.rollout import AssistantTurn, Trajectory
    from helpers.widgets.adapters import trajectory_tree
    from helpers.checkers.exercises import check_degenerate, check_group_advantages

    equal_in_floats = [0.1 + 0.2, 0.3]  # two values, one reward: no signal
    assert no_signal(equal_in_floats) and group_advantages(equal_in_floats) == [0.0, 0.0]
    assert check_degenerate([equal_in_floats, [1.0, 0.0]], 1).ok
    assert check_group_advantages(equal_in_floats, [0.0, 0.0]).ok
    example = SearchExample(id="q", question="q?", answers=["a"], data_source="nq")
    group = [Trajectory(example=example, group_index=i, messages=[], reward=r,
                        turns=[AssistantTurn([1], [2], [-0.5], "Answer: a")]) for i, r in enumerate(equal_in_floats)]
    assert trajectory_tree(group)["degenerate"] is True


def test_one_computation_of_a_batch_s_metrics():
    """Training's step metrics, evaluation's summary and the budget sweep read one batch summary."""
    for path, name in [("helpers/metrics.py", "rollout_metrics"), ("helpers/analyse.py", "summary_of"),
                       ("helpers/efficiency/budget.py", "budget_point")]:
        assert "batch_summary" in calls(function(path, name)), f"{path}:{name} computes its own batch metrics"
    assert homes({"batch_summary", "rollout_metrics"}) == {"batch_summary": ["helpers/metrics.py"],
                                                           "rollout_metrics": ["helpers/metrics.py"]}


# --------------------------------------------------------------------------- sizes


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_over_600_lines_and_the_rollout_and_training_loop_under_450():
    large = {relative(p): lines(p) for p in MODULES if lines(p) > 600 and p.parent.name != "engine"}
    assert large == {}
    rollout = [ROOT / "train.py", *sorted((ROOT / "rollout").glob("*.py"))]
    assert {relative(p): lines(p) for p in rollout if lines(p) >= 450} == {}


def test_no_function_over_80_lines_nor_over_60_in_the_rollout():
    long = []
    for path in MODULES:
        limit = 60 if path.parent.name == "rollout" else 80
        for node in ast.walk(tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                long.append(f"{relative(path)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert long == []


# --------------------------------------------------------------------------- the config's path


def trace_config():
    """benchmarks/trace_config.py, loaded as a module (the benchmarks folder is not a package)."""
    import importlib.util

    import torch

    torch.set_num_threads(2)
    spec = importlib.util.spec_from_file_location("trace_config", ROOT.parent / "benchmarks" / "trace_config.py")
    trace = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace)
    return trace


@pytest.mark.slow
def test_the_grpo_config_returns_to_a_file_it_left_at_most_12_times(small_model_name):
    """benchmarks/trace_config.py: one GRPO step of `train(config)` on the small model, every call of a
    `helpers` function that passes the config on (the script's docstring defines it), first 200 calls."""
    trace = trace_config()
    calls = trace.trace_one_step(model=small_model_name)
    found = trace.figures(calls, 200)
    functions = [call["function"] for call in calls]
    # the trace follows the config from the loop through the data and the rollout to the checkpoint
    for name in ("train", "open_session", "step_questions", "train_step", "rollout_groups", "make_request",
                 "save_checkpoint"):
        assert name in functions, f"{name} never received the config: the trace lost it"
    assert found["returns"] == found["stays"] - found["files"]
    assert found["returns"] <= 12, " -> ".join(f"{name} ({count})" for name, count in found["sequence"])


@pytest.mark.slow
def test_what_the_config_s_calls_return_returns_to_a_file_it_left_at_most_12_times(tmp_path):
    """The same step traced with `--follow derived`: every object a passing call returns (the session,
    the reward function, the sampling client, the groups) is followed too; most of the first 200
    calls are then the engine's token draws, and the rollout, the scoring and the checkpoint follow.

    In a process of its own: the engine's sampling thread must start under the tracer, and an
    engine an earlier test started in this process would not be traced.
    """
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "trace.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent), "OMP_NUM_THREADS": "2"}
    subprocess.run([sys.executable, str(ROOT.parent / "benchmarks" / "trace_config.py"), "--follow", "derived",
                    "--json", str(out)], check=True, env=env, cwd=ROOT.parent, capture_output=True)
    found = json.loads(out.read_text())
    files = [name for name, _ in found["sequence"]]
    for name in ("helpers/rollout/loop.py", "helpers/engine/drawing.py", "helpers/advantages.py", "helpers/session.py"):
        assert name in files, f"the taint trace never reached {name}"
    assert found["returns"] <= 12, " -> ".join(f"{name} ({count})" for name, count in found["sequence"])
