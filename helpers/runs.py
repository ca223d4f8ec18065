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
import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
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
    # only "\n" ends a row: rows are written with ensure_ascii=False, so a string may hold U+2028
    # or U+0085, which str.splitlines() would also split on
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
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


def jsonl_line(row: dict) -> str:
    """One row as a JSONL line; never fails on the values a run produces (numpy, objects as text)."""
    return json.dumps(row, ensure_ascii=False, default=json_default) + "\n"


def _open_jsonl(path: Path, mode: str):
    # A lone surrogate (text that is not valid Unicode) is written as its JSON escape \udXXX: the
    # line stays valid JSON and reads back as the same string, and no row is lost to it.
    return path.open(mode, encoding="utf-8", errors="backslashreplace")


def _cut_unfinished_line(path: Path) -> None:
    """Drop a last line without its newline (a kill mid-write), or the next row would join it."""
    with path.open("rb+") as handle:
        end = handle.seek(0, os.SEEK_END)
        if end == 0:
            return
        handle.seek(end - 1)
        if handle.read(1) == b"\n":
            return
        position = end
        while position > 0:
            start = max(0, position - 65536)
            handle.seek(start)
            block = handle.read(position - start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                handle.truncate(start + newline + 1)
                return
            position = start
        handle.truncate(0)


def append_jsonl(path: str | Path, row: dict) -> None:
    """Append one row and push it to disk: once this returns, a kill cannot take the row back."""
    path = Path(path)
    if path.exists():
        _cut_unfinished_line(path)
    line = jsonl_line(row)
    with _open_jsonl(path, "a") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def write_jsonl(path: str | Path, rows: Sequence[dict]) -> Path:
    """Replace a JSONL file atomically: the old rows stay until every new row is on disk."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = [jsonl_line(row) for row in rows]  # serialise first: nothing is touched if a row fails
    tmp = target.with_name(target.name + ".tmp")
    try:
        with _open_jsonl(tmp, "w") as handle:
            handle.writelines(lines)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


class RunDir:
    """One folder per run (see the module docstring for what it holds)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.metrics = self.path / "metrics.jsonl"
        self.checkpoints = self.path / "checkpoints.jsonl"

    def write_json(self, name: str, value: Any) -> Path:
        return write_json(self.path / name, value)

    def relative(self, path: str | Path) -> str:
        """How a path is stored in the folder's records: relative to the folder when inside it, so
        a copied or moved folder uses its own files. Service paths (``trio://…``) stay as they are."""
        text = str(path)
        if "://" in text or not Path(text).is_absolute():
            return text
        try:
            return Path(text).resolve().relative_to(self.path.resolve()).as_posix()
        except ValueError:
            return text

    def resolve(self, stored: str) -> str:
        """The path a record means, on this machine: relative records are inside this folder.

        Records written with absolute paths (older runs) are read as this folder's copy of the same
        checkpoint when it has one, so a copied folder never resumes from the original."""
        if "://" in stored:
            return stored
        path = Path(stored)
        if not path.is_absolute():
            return str(self.path / path)
        own = self.path / "checkpoints" / path.name
        if path.parent.name == "checkpoints" and own.exists() and own.resolve() != path.resolve():
            return str(own)
        return stored

    def checkpoint_rows(self) -> list[dict]:
        """checkpoints.jsonl, each row's path resolved for this machine (see `resolve`)."""
        return [{**row, "path": self.resolve(str(row["path"]))} for row in read_jsonl(self.checkpoints)]

    def last_checkpoint(self) -> dict | None:
        rows = self.checkpoint_rows()
        return rows[-1] if rows else None

    def record_checkpoint(self, step: int, path: str, **extra: Any) -> dict:
        """Append a checkpoint row (its path stored relative to the folder)."""
        row = {"step": step, "path": self.relative(path), **extra}
        append_jsonl(self.checkpoints, row)
        return row

    def prune_checkpoints(self, keep: int) -> None:
        """Delete the saved states in checkpoints/ but those of the last `keep` records."""
        folder = self.path / "checkpoints"
        if not folder.is_dir() or keep < 1:
            return
        wanted = {str(Path(row["path"]).resolve()) for row in self.checkpoint_rows()[-keep:]}
        for child in folder.iterdir():
            if child.is_dir() and str(child.resolve()) not in wanted:
                shutil.rmtree(child, ignore_errors=True)

    def keep_metrics_before(self, step: int) -> None:
        """Drop metric rows of steps a resumed run will redo, so every step is logged once."""
        write_jsonl(self.metrics, [row for row in read_jsonl(self.metrics) if row.get("step", -1) < step])


def resume_checkpoint(run: RunDir, load: Callable[[str, dict], Any]) -> dict | None:
    """Load the newest checkpoint of `run` that loads; its row (path resolved), or None if none.

    `load(path, row)` loads one. A checkpoint the engine finds damaged (a file missing, truncated,
    changed since its save, or holding NaN) is reported with a warning and the previous kept one
    is tried; the records after the one loaded are dropped, so the run continues from it. When
    none loads, DamagedCheckpoint lists every one tried.
    """
    from helpers.engine.training import DamagedCheckpoint  # the engine only when there is a resume

    stored = read_jsonl(run.checkpoints)
    problems = []
    for index in range(len(stored) - 1, -1, -1):
        row = {**stored[index], "path": run.resolve(str(stored[index]["path"]))}
        try:
            load(row["path"], row)
        except (DamagedCheckpoint, FileNotFoundError) as exc:
            problems.append(f"step {row.get('step')}: {exc}")
            warnings.warn(f"checkpoint of step {row.get('step')} cannot be used ({exc}); trying the one before",
                          RuntimeWarning, stacklevel=2)
            continue
        if index < len(stored) - 1:
            write_jsonl(run.checkpoints, stored[: index + 1])
        return row
    if problems:
        raise DamagedCheckpoint(f"no checkpoint in {run.checkpoints} loads: " + "; ".join(problems))
    return None


# --------------------------------------------------------------------------- checkpoints


def materialise_checkpoint(path: Any, directory: str | Path) -> str:
    """Copy a local-engine checkpoint (a path, or a save response with `.path`) out of the shared
    cache into the run folder.

    The run folder then holds everything a resume needs (another command, another day), and
    the returned plain directory path loads anywhere the local engine runs. Remote (PyTRIO)
    paths are returned unchanged: the service keeps them.
    """
    path = str(getattr(path, "path", path))
    if not path.startswith("local://"):
        return path
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


def value_from_text(cls, name: str, text: str) -> Any:
    """The value field `name` of dataclass `cls` takes from its text, typed as its flag is:
    `none`/`null` is None, a bool reads 1/true/yes/on, a dict a JSON object."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if name not in fields:
        raise ValueError(f"{cls.__name__} has no field {name!r}; its fields: {sorted(fields)}")
    if text.lower() in {"none", "null"}:
        return None
    kind = field_type(fields[name])
    if kind is bool:
        return text.lower() in {"1", "true", "yes", "on"}
    if kind is dict:
        value = parse_value(text)
        if not isinstance(value, dict):
            raise ValueError(f"{cls.__name__}.{name} takes a JSON object, got {text!r}")
        return value
    return kind(text)


def override(config, name: str, text: str):
    """A copy of `config` with the field `name` set from its text; a dotted name reaches into a
    nested config (`override(train_config, "rollout.max_search_calls", "2")`)."""
    head, _, rest = name.partition(".")
    if rest:
        inner = getattr(config, head, None)
        if not dataclasses.is_dataclass(inner):
            raise ValueError(f"{type(config).__name__} has no nested config {head!r}")
        return dataclasses.replace(config, **{head: override(inner, rest, text)})
    return dataclasses.replace(config, **{name: value_from_text(type(config), name, text)})


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
