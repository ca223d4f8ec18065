"""Run folders: metrics as JSONL, checkpoints copied next to them, and a command line per config.

Every long stage (SFT, GRPO, evaluation, the experiment) writes into one folder that a later
command can resume from:

    <out>/config.json        the configuration that ran
    <out>/command.json       the command line that started it
    <out>/metrics.jsonl      one row per step, appended as the step ends
    <out>/checkpoints.jsonl  one row per saved state: step, path, has_optimizer
    <out>/checkpoints/       the saved states themselves (local engine)
    <out>/summary.json       written when the run stops

A configuration is a dataclass; `add_config_arguments` turns it into flags (`--max-steps`), a
nested dataclass into dotted flags (`--rollout.max-search-calls`), and `config_from_args` builds
the dataclass back, so a shell command and a notebook cell configure the same object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- futures


def result(value: Any) -> Any:
    """PyTRIO calls return futures; the local engine may too. Either way, give the value."""
    return value.result() if hasattr(value, "result") and callable(value.result) else value


# --------------------------------------------------------------------------- JSON and JSONL


def json_default(value: Any) -> Any:
    """numpy scalars as Python numbers; anything else as its text."""
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSONL file ([] when it does not exist).

    A line that does not parse ends the file: a process killed mid-write leaves a cut last line,
    and nothing after it can be trusted.
    """
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def write_json(path: str | Path, value: Any) -> Path:
    """Write JSON atomically: a kill never leaves half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, default=str))
    tmp.replace(target)
    return target


def append_jsonl(path: str | Path, row: dict) -> None:
    with Path(path).open("a") as handle:
        handle.write(json.dumps(row, default=json_default) + "\n")
        handle.flush()


class RunDir:
    """One folder per run (see the module docstring for what it holds)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.metrics = self.path / "metrics.jsonl"
        self.checkpoints = self.path / "checkpoints.jsonl"

    def write_json(self, name: str, value: Any) -> Path:
        return write_json(self.path / name, value)

    def read_jsonl(self, path: Path) -> list[dict]:
        return read_jsonl(path)

    def append_jsonl(self, path: Path, row: dict) -> None:
        append_jsonl(path, row)

    def last_checkpoint(self) -> dict | None:
        rows = read_jsonl(self.checkpoints)
        return rows[-1] if rows else None

    def keep_metrics_before(self, step: int) -> None:
        """Drop metric rows of steps a resumed run will redo, so every step is logged once."""
        rows = [row for row in read_jsonl(self.metrics) if row.get("step", -1) < step]
        tmp = self.metrics.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(row, default=json_default) + "\n" for row in rows))
        tmp.replace(self.metrics)


# --------------------------------------------------------------------------- checkpoints


def materialise_checkpoint(path: str, directory: str | Path) -> str:
    """Copy a local-engine checkpoint out of the shared cache into the run folder.

    The run folder then holds everything a resume needs (another command, another day), and
    the returned plain directory path loads anywhere the local engine runs. Remote (PyTRIO)
    paths are returned unchanged: the service keeps them.
    """
    if not str(path).startswith("local://"):
        return str(path)
    from helpers.engine.local import resolve_path  # the engine (torch) only when there is a local checkpoint

    source = resolve_path(str(path))
    target = Path(directory)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target)
    shutil.rmtree(source, ignore_errors=True)  # the cache copy is ours and now redundant
    return str(target.resolve())


# --------------------------------------------------------------------------- configs and their CLI


def updated(config, values: Mapping[str, Any] | None = None, **more: Any):
    """A copy of a dataclass config with fields replaced by name; a nested config takes a dict.

    `updated(train_config, rollout={"max_search_calls": 3}, learning_rate=1e-4)`. A name the
    config does not have is an error listing the names it has, so a misspelt budget never falls
    back to its default.
    """
    values = {**(values or {}), **more}
    known = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{type(config).__name__} has no field {unknown}; its fields: {sorted(known)}")
    changes = {}
    for name, value in values.items():
        current = getattr(config, name)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            value = updated(current, value)
        changes[name] = value
    return dataclasses.replace(config, **changes)



def field_type(f: dataclasses.Field) -> type:
    """bool, int, float, dict or str: how a flag's text becomes the field's value."""
    text = str(f.type)
    for name, kind in (("bool", bool), ("int", int), ("float", float), ("dict", dict)):
        if text.startswith(name):
            return kind
    return str


def parse_value(text: str) -> Any:
    """A flag value as JSON when it parses (numbers, true/false, null, lists), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class _KeyValue(argparse.Action):
    """--name KEY=VALUE, repeatable: collects a dict (values parsed as JSON when they parse)."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = dict(getattr(namespace, self.dest, None) or {})
        for item in str(values).split(","):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                parser.error(f"{option_string} takes KEY=VALUE, got {item!r}")
            current[key.strip()] = parse_value(value.strip())
        setattr(namespace, self.dest, current)


def add_config_arguments(parser: argparse.ArgumentParser, cls, defaults=None, prefix: str = "") -> None:
    """One --flag per dataclass field (underscores become dashes); bools become --x/--no-x.

    A field holding a dataclass becomes dotted flags (`--rollout.max-search-calls`); a dict field
    takes KEY=VALUE, repeatably (`--reward-options lambda_tool=0.3`).
    """
    defaults = defaults if defaults is not None else cls()
    for f in dataclasses.fields(cls):
        default = getattr(defaults, f.name)
        dest = prefix + f.name
        if dataclasses.is_dataclass(default):
            add_config_arguments(parser, type(default), default, prefix=dest + ".")
            continue
        flag = "--" + dest.replace("_", "-")
        kind = field_type(f)
        if kind is bool:
            parser.add_argument(flag, dest=dest, default=default, action=argparse.BooleanOptionalAction)
        elif kind is dict:
            parser.add_argument(flag, dest=dest, default=dict(default or {}), action=_KeyValue, metavar="KEY=VALUE",
                                help=f"(default: {default})")
        else:
            parser.add_argument(flag, dest=dest, type=kind, default=default, help=f"(default: {default})")


def config_from_args(cls, args: argparse.Namespace, defaults=None, prefix: str = ""):
    """The dataclass `add_config_arguments` described, from parsed arguments."""
    defaults = defaults if defaults is not None else cls()
    values = {}
    for f in dataclasses.fields(cls):
        default = getattr(defaults, f.name)
        if dataclasses.is_dataclass(default):
            values[f.name] = config_from_args(type(default), args, default, prefix=prefix + f.name + ".")
        else:
            values[f.name] = getattr(args, prefix + f.name)
    return cls(**values)


def config_flags(config, skip: Sequence[str] = (), prefix: str = "") -> list[str]:
    """The flags `add_config_arguments` reads back into `config` (fields in `skip` and None left out).

    How a shell script passes one command's configuration on to another (results/run.sh).
    """
    flags: list[str] = []
    for f in dataclasses.fields(config):
        name = prefix + f.name
        value = getattr(config, f.name)
        if name in skip or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if dataclasses.is_dataclass(value):
            flags += config_flags(value, skip, prefix=name + ".")
        elif isinstance(value, bool):
            flags.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, dict):
            for key, item in value.items():
                flags += [flag, f"{key}={json.dumps(item)}"]
        else:
            flags += [flag, str(value)]
    return flags
