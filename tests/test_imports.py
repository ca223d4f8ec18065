"""The package's floor plan, read from the source with `ast`: no circle among helpers modules; the
library (every module outside the course layer) never imports the course layer and never names a
notebook; nothing is imported by a name computed at run time; one config parser; one place for
presets."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import helpers

ROOT = Path(helpers.__file__).parent


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, modules: set[str], root: Path = ROOT) -> set[str]:
    """helpers modules `path` imports, at the top or inside a function (both would close a circle).

    `from helpers.x import name` counts as importing helpers.x, or helpers.x.name when that is a
    module; a package import also runs its __init__, so it counts as importing the package.
    """
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and _by_name(node) and node.args and isinstance(node.args[0], ast.Constant):
            targets = [str(node.args[0].value)]  # importlib.import_module("helpers.x"): an import all the same
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _by_name(node: ast.Call) -> bool:
    """A call that imports a module from a string: importlib.import_module(...), __import__(...)."""
    fn = node.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    return name in {"import_module", "__import__"}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): imports_of(p, modules, root) for p in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):  # a package importing its own submodules is how packages work
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_reader_sees_top_level_function_level_and_relative_imports(tmp_path):
    graph = import_graph()
    assert "helpers.reward" in graph["helpers.rollout.loop"]  # a top-level import
    assert "helpers.rollout" in graph["helpers.train"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"p": {"p.x"}, "p.x": {"q"}, "q": set()}) is None


def test_no_import_circle_among_helpers_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


# --------------------------------------------------------------------------- the course layer

# The course layer: kernel state, policies, learnable questions, widgets, exercise checks. It may
# import the library; the library never imports it.
COURSE_LAYER = ("helpers.course", "helpers.widgets", "helpers.checkers")
# A notebook by number ("notebook 09", "notebooks 11, 12"), by file ("05_rollout_tree"), or a
# hand-over key that carries one ("training_09").
NAMES_A_NOTEBOOK = re.compile(r"notebooks?\s*\d|\b\d\d_[a-z]+_[a-z_]+|[\"'][a-z_]+_\d\d[\"']", re.IGNORECASE)


def in_course_layer(module: str) -> bool:
    return any(module == layer or module.startswith(layer + ".") for layer in COURSE_LAYER)


def library_paths(root: Path = ROOT) -> list[Path]:
    return [p for p in sorted(root.rglob("*.py")) if not in_course_layer(module_name(p, root))]


def test_the_readers_see_imports_by_name_and_notebook_names(tmp_path):
    package = tmp_path / "helpers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("import importlib\n\ndef f():\n    return importlib.import_module('helpers.high')\n")
    (package / "high.py").write_text("from helpers import low\n")
    graph = import_graph(package)
    assert graph["helpers.low"] == {"helpers.high"} and find_cycle(graph) == ["helpers.high", "helpers.low", "helpers.high"]
    for text in ("as notebook 09 saves it", "(notebooks 11, 12)", "see 05_rollout_tree.py", 'recall("training_09")'):
        assert NAMES_A_NOTEBOOK.search(text), text
    for text in ("a notebook column", "what one notebook hands the next", "top_k 10", "max_search_calls=3"):
        assert not NAMES_A_NOTEBOOK.search(text), text
    assert in_course_layer("helpers.widgets.live") and in_course_layer("helpers.course")
    assert not in_course_layer("helpers.widgetsmith") and not in_course_layer("helpers.train")


def test_the_library_never_imports_the_course_layer():
    graph = import_graph()
    wrong = {module: sorted(t for t in targets if in_course_layer(t))
             for module, targets in graph.items() if not in_course_layer(module)}
    wrong = {module: targets for module, targets in wrong.items() if targets}
    assert not wrong, f"library modules that import the course layer: {wrong}"


def test_no_library_module_names_a_notebook():
    found = [f"{p.relative_to(ROOT.parent)}:{n}: {line.strip()}" for p in library_paths()
             for n, line in enumerate(p.read_text().splitlines(), 1) if NAMES_A_NOTEBOOK.search(line)]
    assert not found, "library text that names a notebook (say it in the course layer):\n" + "\n".join(found)


def test_nothing_is_imported_by_a_name_computed_at_run_time():
    found = [f"{p.relative_to(ROOT.parent)}:{node.lineno}" for p in sorted(ROOT.rglob("*.py"))
             for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.Call) and _by_name(node)]
    assert not found, f"imports by name (import the module explicitly instead): {found}"


# --------------------------------------------------------------------------- one home per concept


def calls_and_literals(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Call, ast.Dict, ast.Set, ast.Tuple, ast.List)):
            yield node


def test_one_config_parser():
    """Text becomes a config field in helpers.runs only (flags and --set alike): no other module
    uses its parsing helpers or spells out which words mean True or None."""
    parsing = {"field_type", "parse_value", "value_from_text"}
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "runs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id in parsing or isinstance(node, ast.alias) and node.name in parsing:
                found.append(f"{path.name}:{getattr(node, 'lineno', '?')} uses {getattr(node, 'id', None) or node.name}")
            if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
                words = {e.value.lower() for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if {"none", "null"} <= words or {"true", "yes"} <= words:
                    found.append(f"{path.name}:{node.lineno} parses text into a value by hand: {sorted(words)}")
    assert not found, "a second text-to-config parser (use helpers.runs.override):\n" + "\n".join(found)


def setting_names() -> set[str]:
    """Names of budgets and run sizes: every RolloutConfig field, and the sizes of the runs."""
    from helpers.rollout import RolloutConfig

    return {f.name for f in dataclasses.fields(RolloutConfig)} | {
        "questions", "questions_per_batch", "questions_per_step", "max_steps", "steps", "learning_rate", "epochs",
        "limit", "skip", "batch_size", "save_every", "micro_batch_datums", "micro_batch_tokens", "lora_rank", "minutes",
        "eval_questions", "sweep_budgets", "sweep_questions", "sft_questions", "grpo_questions", "grpo_steps"}


def _constant(node: ast.AST) -> bool:
    """A number written in the source (a slider's (min, max, step) range is not a setting)."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def named_settings(node: ast.AST, names: set[str]) -> list[str]:
    """The budget names a dict display or a call sets to numbers."""
    if isinstance(node, ast.Dict):
        pairs = [(k.value, v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)]
    elif isinstance(node, ast.Call):
        pairs = [(k.arg, k.value) for k in node.keywords if k.arg]
    else:
        return []
    return sorted(name for name, value in pairs if name in names and _constant(value))


def presets_outside(root: Path, names: set[str], home: str = "presets.py") -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == root / home:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            settings = named_settings(node, names)
            if len(settings) >= 3:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} sets {settings}")
    return found


def test_the_preset_reader_finds_a_named_set_of_budgets(tmp_path):
    names = setting_names()
    package = tmp_path / "helpers"
    package.mkdir()
    (package / "presets.py").write_text("FAST = dict(group_size=2, max_search_calls=1, max_assistant_tokens=48)\n")
    (package / "cli.py").write_text("def main():\n    return Config(max_steps=10, questions_per_batch=4, group_size=-4)\n")
    (package / "eval.py").write_text("ROLLOUT = {'group_size': 1, 'temperature': 0.0, 'seed': seed}\n")
    assert presets_outside(package, names) == ["helpers/cli.py:2 sets ['group_size', 'max_steps', 'questions_per_batch']"]


def test_one_place_for_presets():
    """Every named set of budgets and run sizes is in helpers.presets; others refer to it by name
    (an exercise's single case or a rule such as "evaluation is greedy" sets fewer than three)."""
    found = presets_outside(ROOT, setting_names())
    assert not found, "budgets named outside helpers.presets:\n" + "\n".join(found)
