"""Experiment tracking: the metrics a run writes to JSONL, mirrored to TensorBoard or SwanLab.

A run's `metrics.jsonl` is the record; a tracker is a second view of the same numbers, for
people who want to compare runs side by side in the tool they already use (Happy-LLM §8.3 logs
its runs to SwanLab). One switch picks it, for SFT, GRPO, evaluation and the efficiency runs:

- `none` (the default): JSONL only;
- `tensorboard`: event files under `runs/tracking/<run>` (`tensorboard --logdir runs/tracking`);
- `swanlab`: SwanLab's offline files (upload later with `swanlab sync <folder>`), or the cloud
  when `SWANLAB_API_KEY` is set in `.env`.

Both trackers are an optional extra (`pip install -e ".[tracking]"`). A tracker never stands
in a training step's way: `log` only puts the numbers on a queue that a background thread
hands to the backend, so a slow disk or network delays the tracker, not the step; a tracker
that is missing, fails to start or fails later prints one line and the run goes on with JSONL.
Secrets from the environment never reach the tracker: config entries whose name says key,
token, secret or password are masked, and the values of such environment variables are
replaced wherever they would appear in a string.

`python -m helpers.tracking tensorboard` turns the recorded runs under `results/` (their
committed JSONL, nothing re-run) into event files and opens TensorBoard on them.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import html
import json
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from dotenv import dotenv_values
from tqdm.auto import tqdm

from helpers import config as course_config
from helpers.runs import read_jsonl
from helpers.search.http import env_value

TRACKERS = ("none", "tensorboard", "swanlab")
DEFAULT_TRACKER = "none"
PROJECT = "search-r1-course"
QUEUE_SIZE = 1024  # steps buffered before the tracker starts dropping updates (never the step)
CLOSE_TIMEOUT_S = 30.0

# The curves to compare first, under the same names for every run (live or recorded):
# tag -> the step-metric key it shows.
HEADLINE = {
    "reward": "reward_mean",
    "exact_match": "exact_match",
    "format": "valid_format_rate",
    "searches": "search_calls_mean",
    "second_search_share": "multi_search_share",
    "degenerate_share": "degenerate_group_share",
    "kl": "kl_sampler_trainer_k3",
    "step_time_s": "time_step",
}
HEADLINE_SECTION = "headline"
NOT_SCALARS = frozenset({"step", "wall_time"})  # the x axis and the clock, not curves

# whole name parts, so `api_key` and `ZHIHU_SEARCH_KEYS` count and `max_assistant_tokens` does not
_SECRET_PARTS = frozenset({"key", "keys", "apikey", "token", "secret", "secrets", "password", "passwd"})
MASK = "***"
MIN_SECRET_CHARS = 8


def is_secret_name(name: str) -> bool:
    return any(part in _SECRET_PARTS for part in re.split(r"[^a-z0-9]+", str(name).lower()))


def tracking_dir() -> Path:
    """Where live runs write tracker files (git-ignored, beside the checkpoints)."""
    return Path(os.environ.get("COURSE_TRACKING_DIR", course_config.RUNS_DIR / "tracking"))


def run_name(out: str | Path) -> str:
    """A run's name in the tracker: the last two parts of its folder ('h200/grpo')."""
    parts = Path(out).resolve().parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else (parts[-1] if parts else "run")


# --------------------------------------------------------------------------- what a tracker receives


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The plottable numbers of one step-metrics row, plus the headline aliases.

    Booleans count as 0/1; None, strings and non-finite values are left out (a curve cannot
    show them; JSONL keeps them).
    """
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if key in NOT_SCALARS or isinstance(value, str) or value is None:
            continue
        if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[str(key)] = float(value)
    for tag, key in HEADLINE.items():
        if key in out:
            out[f"{HEADLINE_SECTION}/{tag}"] = out[key]
    return out


def step_scalars(metrics: Mapping[str, Any], default_step: int) -> tuple[dict[str, float], int, float | None]:
    """(scalars, step, wall time) of one metrics row; a row without a step gets `default_step`."""
    step = metrics.get("step")
    wall = metrics.get("wall_time")
    return (scalars(metrics), int(step) if isinstance(step, (int, float)) else default_step,
            float(wall) if isinstance(wall, (int, float)) else None)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment (and `.env`) variables whose names say they are secrets."""
    environ = dict(os.environ if environ is None else environ)
    dotenv = course_config.PROJECT_ROOT / ".env"
    if dotenv.exists():
        environ.update({k: v for k, v in dotenv_values(dotenv).items() if v})
    found = []
    for name, value in environ.items():  # short values ('1', 'true') are flags, not keys
        if value and is_secret_name(name):
            found += [part for part in re.split(r"[,\s]+", value) if len(part) >= MIN_SECRET_CHARS]
    return sorted(set(found), key=len, reverse=True)


def redact(value: Any, secrets: Sequence[str]) -> Any:
    """A copy of a config/table value with secret-named entries and secret values masked."""
    if isinstance(value, Mapping):
        return {str(k): (MASK if is_secret_name(k) and v not in (None, "") else redact(v, secrets))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    return value


def plain_config(config: Any) -> dict[str, Any]:
    """A config (dataclass, nested dataclasses or dict) as JSON-safe nested dicts."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    return json.loads(json.dumps(config or {}, default=str))


def flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'train.learning_rate': 5e-05, ...}: one row per setting, for a two-column table."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat(value, name + "."))
        else:
            out[name] = value
    return out


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as a markdown table, every cell HTML-escaped (trackers render it as HTML)."""
    rows = list(rows)
    if not rows:
        return "(empty)"
    columns: list[str] = []
    for row in rows:
        columns += [str(k) for k in row if str(k) not in columns]

    def cell(value: Any) -> str:
        if isinstance(value, float):
            value = f"{value:.4g}"
        return html.escape("" if value is None else str(value)).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- backends


class TensorBoardBackend:
    """Event files in `logdir`, one folder per run (what `tensorboard --logdir` compares)."""

    name = "tensorboard"

    def __init__(self, logdir: str | Path, run_name: str, mode: str | None = None) -> None:  # mode: SwanLab's only
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.path = Path(logdir) / run_name
        self.path.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(self.path), flush_secs=30)

    def config(self, config: Mapping[str, Any]) -> None:
        rows = [{"setting": k, "value": json.dumps(v) if not isinstance(v, str) else v}
                for k, v in flat(config).items()]
        self._writer.add_text("config", markdown_table(rows), 0)

    def scalars(self, values: Mapping[str, float], step: int, wall_time: float | None) -> None:
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, step, walltime=wall_time)

    def table(self, name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        self._writer.add_text(name, markdown_table(rows), step)

    def close(self) -> None:
        self._writer.close()


class SwanLabBackend:
    """SwanLab offline files under `logdir` (`swanlab sync` uploads them later), or the cloud.

    The terminal is not captured (a progress bar is no metric, and printed text could carry
    anything), nor the command line and the git remote (either may hold a credential); the key
    goes to `swanlab.login` only, never into the run's settings.
    """

    name = "swanlab"

    def __init__(self, logdir: str | Path, run_name: str, mode: str | None = None) -> None:
        import swanlab

        self._swanlab = swanlab
        key = env_value("SWANLAB_API_KEY") if mode in (None, "cloud") else None  # None: stay offline
        if mode == "cloud" and not key:
            raise RuntimeError("SwanLab cloud needs SWANLAB_API_KEY in .env")
        self.mode = "online" if key else "offline"
        self.path = Path(logdir)
        self.path.mkdir(parents=True, exist_ok=True)
        if key:
            swanlab.login(api_key=key, save=False)
        settings = swanlab.Settings(interactive=False, terminal={"proxy_type": "none"},
                                    probe={"runtime": False, "git": False})
        group, _, name = run_name.rpartition("/")
        self._run = swanlab.init(project=PROJECT, name=run_name, group=group or None, mode=self.mode,
                                 log_dir=str(self.path), settings=settings, reinit=True)
        self.run_dir = Path(str(getattr(self._run, "dir", "") or self.path))

    def config(self, config: Mapping[str, Any]) -> None:
        self._run.config.update(dict(config))

    def scalars(self, values: Mapping[str, float], step: int, wall_time: float | None) -> None:
        self._swanlab.log(dict(values), step=step)

    def table(self, name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        self._swanlab.log({name: self._swanlab.Text(markdown_table(rows))}, step=step)

    def close(self) -> None:
        self._swanlab.finish()


BACKENDS = {"tensorboard": TensorBoardBackend, "swanlab": SwanLabBackend}
PACKAGES = {"tensorboard": "tensorboard", "swanlab": "swanlab"}


# --------------------------------------------------------------------------- the tracker


class Tracker:
    """Feeds one run's metrics, config and final tables to a backend from a background thread.

    `log(metrics)` returns at once whatever the backend does; the first backend error turns the
    tracker off with one printed line (the run keeps its JSONL). Use it as a context manager
    or call `close()` at the end so buffered updates are written.
    """

    def __init__(self, kind: str, backend: Any = None, *, secrets: Sequence[str] = (),
                 queue_size: int = QUEUE_SIZE) -> None:
        self.kind = kind
        self.backend = backend
        self.error: str | None = None
        self.dropped = 0
        self._warned = False
        self._secrets = list(secrets)
        self._steps = 0
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._thread: threading.Thread | None = None
        if backend is not None:
            self._thread = threading.Thread(target=self._work, name=f"tracker-{kind}", daemon=True)
            self._thread.start()
            atexit.register(self.close)  # a run that dies half-way still leaves its curves

    @property
    def active(self) -> bool:
        return self.backend is not None and self.error is None

    @property
    def path(self) -> Path | None:
        return getattr(self.backend, "run_dir", None) or getattr(self.backend, "path", None)

    # what runs call ---------------------------------------------------------------------

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """One step's metrics (the row written to JSONL)."""
        if not self.active:
            return
        try:
            values, row_step, wall = step_scalars(metrics, self._steps)
            item = ("scalars", values, row_step if step is None else int(step), wall)
        except Exception as error:  # an odd row must not stop the step that produced it
            if not self._warned:
                self._warned = True
                print(f"tracking: a metrics row could not be read ({type(error).__name__}: {error}); "
                      "skipped, its JSONL line is intact", flush=True)
            return
        self._steps += 1
        self._put(item)

    def __call__(self, metrics: Mapping[str, Any], config: Any = None) -> None:
        """A training-step observer: `observer(metrics, config)` after every step."""
        self.log(metrics)

    def log_config(self, config: Any) -> None:
        if self.active:
            self._put(("config", redact(plain_config(config), self._secrets)))

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
                  step: int | None = None) -> None:
        """A table (evaluation summary) as rows; a {label: {column: value}} dict becomes rows too."""
        if not self.active:
            return
        if isinstance(rows, Mapping):
            rows = [{"": label, **dict(values)} for label, values in rows.items()]
        self._put(("table", name, redact([dict(r) for r in rows], self._secrets),
                   self._steps if step is None else int(step)))

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Write what is buffered (waiting at most `timeout` seconds) and close the backend."""
        if self._thread is None:
            return
        thread, self._thread = self._thread, None
        atexit.unregister(self.close)
        try:
            self._queue.put(("close",), timeout=timeout)
        except queue.Full:
            pass
        thread.join(timeout)
        if thread.is_alive():
            print(f"tracking: {self.kind} did not finish writing within {timeout:.0f} s; "
                  "the JSONL has every step", flush=True)
        else:  # on the caller's thread: SwanLab's finish installs signal handlers
            self._call("close", self.backend.close)
        if self.dropped:
            print(f"tracking: {self.kind} fell behind and skipped {self.dropped} updates; "
                  "the JSONL has every step", flush=True)

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # the background side ----------------------------------------------------------------

    def _put(self, item: tuple) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item[0] == "close":
                return
            if self.error is not None:
                continue
            if item[0] == "scalars":
                self._call("log", self.backend.scalars, *item[1:])
            elif item[0] == "config":
                self._call("config", self.backend.config, item[1])
            elif item[0] == "table":
                self._call("table", self.backend.table, *item[1:])

    def _call(self, what: str, method, *args) -> None:
        try:
            method(*args)
        except Exception as error:  # a tracker must never take the run down with it
            self._fail(what, error)

    def _fail(self, what: str, error: Exception) -> None:
        if self.error is None:
            self.error = redact(f"{type(error).__name__}: {error}", self._secrets)
            print(f"tracking: {self.kind} failed ({what}: {self.error}); "
                  "the run goes on with JSONL only", flush=True)


def open_tracker(kind: str | None, run_name: str, config: Any = None, *, logdir: str | Path | None = None,
                 mode: str | None = None) -> Tracker:
    """A started tracker of `kind` for one run, or an inactive one (JSONL only) with a message.

    `run_name` names the run in the tracker ("h200/grpo"); files go to `logdir`/<run_name>
    (default `runs/tracking`). `mode` is for SwanLab: None picks the cloud when a key is set,
    "offline" forces the offline files. An unknown `kind` is a ValueError (a typo should not
    silently mean "no tracking"); a missing package or a failed start is not.
    """
    kind = (kind or DEFAULT_TRACKER).strip().lower()
    if kind not in TRACKERS:
        raise ValueError(f"unknown tracker {kind!r}; choose one of {', '.join(TRACKERS)}")
    secrets = secret_values()
    if kind == "none":
        return Tracker(kind)
    try:
        backend = BACKENDS[kind](logdir or tracking_dir(), run_name, mode)
    except ImportError:
        print(f"tracking: {kind} is not installed (pip install -e '.[tracking]'); "
              "the run goes on with JSONL only", flush=True)
        return Tracker(kind)
    except Exception as error:
        print(f"tracking: {kind} could not start ({redact(f'{type(error).__name__}: {error}', secrets)}); "
              "the run goes on with JSONL only", flush=True)
        return Tracker(kind)
    tracker = Tracker(kind, backend, secrets=secrets)
    if config is not None:
        tracker.log_config(config)
    return tracker


# --------------------------------------------------------------------------- recorded runs


def recorded_runs(results: str | Path | None = None) -> dict[str, Path]:
    """{'h200/grpo': folder, ...}: every run folder under `results` with a metrics.jsonl."""
    root = Path(results) if results else course_config.RESULTS_DIR
    found = {}
    for path in sorted(root.glob("**/metrics.jsonl")):
        if "runs" in path.relative_to(root).parts:  # scratch runs, not the recorded ones
            continue
        found[path.parent.relative_to(root).as_posix()] = path.parent
    return found


def export_recorded(results: str | Path | None = None, logdir: str | Path | None = None,
                    only: Iterable[str] | None = None, progress: bool = True) -> dict[str, Path]:
    """Write TensorBoard event files for the recorded runs, from their committed JSONL.

    Each run folder becomes one TensorBoard run under `logdir` (replaced if it was there) with
    its config as text; an experiment's evaluations become one more run, `<experiment>/eval`,
    holding a summary table per evaluation. Returns {run name: event folder}.
    """
    from helpers.analyse import summarise  # matplotlib (seconds to import) only where evaluations are read

    root = Path(results) if results else course_config.RESULTS_DIR
    logdir = Path(logdir) if logdir else tracking_dir() / "recorded"
    runs = recorded_runs(root)
    evals = {f"{folder.parent.relative_to(root).as_posix()}/eval": folder.parent / "eval"
             for folder in runs.values() if folder.parent != root and (folder.parent / "eval").is_dir()}
    if only:
        wanted = set(only)
        keep = lambda name: name in wanted or name.rsplit("/", 1)[0] in wanted  # noqa: E731
        runs = {name: path for name, path in runs.items() if keep(name)}
        evals = {name: path for name, path in evals.items() if keep(name)}
    secrets = secret_values()
    out = {}
    for name in tqdm([*runs, *evals], desc="recorded runs", disable=not progress):
        target = logdir / name
        if target.exists():
            shutil.rmtree(target)  # a second export must not double every curve
        backend = TensorBoardBackend(logdir, name)
        try:
            if name in runs:
                _export_run(backend, runs[name], secrets)
            else:
                for path in sorted(evals[name].glob("*.jsonl")):
                    backend.table(f"eval/{path.stem}", redact(eval_table(summarise(read_jsonl(path))), secrets), 0)
        finally:
            backend.close()
        out[name] = target
    return out


def _export_run(backend: TensorBoardBackend, folder: Path, secrets: Sequence[str]) -> None:
    for index, row in enumerate(read_jsonl(folder / "metrics.jsonl")):
        backend.scalars(*step_scalars(row, index))
    if (folder / "config.json").exists():
        backend.config(redact(json.loads((folder / "config.json").read_text()), secrets))


def eval_table(summary: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`helpers.analyse.summarise` output as rows (one per data source, then 'all')."""
    return [{"data_source": group, **dict(values)} for group, values in summary.items()]


def log_evaluation(tracker: Tracker, rows: Sequence[Mapping[str, Any]], step: int = 0) -> None:
    """An evaluation's summary: its overall numbers as `eval/<name>` scalars, and the table."""
    from helpers.analyse import ALL, summarise  # as in export_recorded

    summary = summarise(rows)
    tracker.log({"step": step, **{f"eval/{key}": value for key, value in summary[ALL].items()}})
    tracker.log_table("eval/summary", eval_table(summary), step)


def evaluation_run_name(output: str | Path | None, label: str) -> str:
    """'h200/eval/sft' for results/h200/eval/sft.jsonl; 'eval/<label>' when nothing is written."""
    if not output:
        return f"eval/{label}"
    return "/".join(Path(output).resolve().with_suffix("").parts[-3:])


def launch_tensorboard(logdir: str | Path, port: int = 6006, host: str = "localhost") -> subprocess.Popen:
    """Start TensorBoard on `logdir` in the background; its address is printed."""
    try:
        import tensorboard  # noqa: F401  (only to give a clear message before starting it)
    except ImportError as error:
        raise RuntimeError("TensorBoard is not installed: pip install -e '.[tracking]'") from error
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port),
               "--host", host]
    process = subprocess.Popen(command)
    print(f"TensorBoard on http://{host}:{port} (stop it with Ctrl-C or process {process.pid})", flush=True)
    return process


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.tracking", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    board = sub.add_parser("tensorboard", help="open the recorded runs (results/*) in TensorBoard")
    board.add_argument("--results", default=None, help="folder of recorded runs (default results/)")
    board.add_argument("--logdir", default=None, help="where the event files go (default runs/tracking/recorded)")
    board.add_argument("--only", action="append", default=None, help="a run ('h200/grpo') or experiment ('h200')")
    board.add_argument("--port", type=int, default=6006)
    board.add_argument("--host", default="localhost")
    board.add_argument("--no-launch", action="store_true", help="only write the event files")
    args = parser.parse_args(argv)
    logdir = Path(args.logdir) if args.logdir else tracking_dir() / "recorded"
    written = export_recorded(args.results, logdir, args.only)
    for name in written:
        print(f"  {name}")
    print(f"{len(written)} recorded runs in {logdir}", flush=True)
    if args.no_launch:
        return 0
    # A `kill` of this command stops TensorBoard too, instead of leaving it serving on its own. The
    # handler is in place before TensorBoard starts, so a kill while it starts is not missed.
    started: list[subprocess.Popen] = []
    stopped: list[bool] = []

    def stop(*_: Any) -> None:
        stopped.append(True)
        for running in started:
            running.terminate()

    signal.signal(signal.SIGTERM, stop)
    process = launch_tensorboard(logdir, args.port, args.host)
    started.append(process)
    if stopped:
        process.terminate()
    try:
        code = process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait()
        return 0
    return 0 if code == -signal.SIGTERM else code  # stopped, or TensorBoard's own failure (a port in use)


if __name__ == "__main__":
    sys.exit(main())
