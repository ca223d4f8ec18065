"""What a tracker costs a training step: call latency, backend time, and a simulated run.

    .venv/bin/python benchmarks/bench_tracking.py                       # every backend installed
    .venv/bin/python benchmarks/bench_tracking.py --steps 10 --step-seconds 1 --repeats 15

Goal: a tracker slows a training step by at most a few percent. Three figures per backend, all
with a real step-metrics row (the last step of results/h200_balanced/grpo; its size is printed):

1. `log()` latency: what the training loop waits for (it only queues the row);
2. backend time per step: the background thread's work for one row (written synchronously here),
   in wall time and in CPU seconds, the CPU it takes from the step on a busy machine;
3. a simulated run: `--steps` steps of a fixed amount of CPU work each (calibrated once to take
   `--step-seconds` CPU seconds: half pure Python, which holds the GIL the tracker's thread
   needs, half a one-thread torch matrix product, which releases it), timed with and without the
   tracker, alternating; the overhead is the median over repeats, as a share of the wall time and
   as the CPU seconds each step adds (the process's, every thread counted), which a loaded
   machine disturbs far less than the wall time.

Step 2 against the recorded H200 step times (printed: median after the compiling first step,
and the shortest) gives the overhead of a real run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpu_clock import cpu_seconds, load_average  # noqa: E402

from helpers import tracking  # noqa: E402

RECORDED = ROOT / "results" / "h200_balanced" / "grpo" / "metrics.jsonl"


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{cpu}, {os.cpu_count()} cores, load average {load_average()}, Python {platform.python_version()}"


def recorded_rows() -> list[dict]:
    return [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]


def installed(kind: str) -> bool:
    try:
        __import__(tracking.PACKAGES[kind])
        return True
    except ImportError:
        return False


PY_CHUNK = 2000  # one pure-Python unit: sum of squares below this
MATRIX = 256  # one torch unit: tanh(a @ a) on a MATRIX x MATRIX matrix


def _python_units(units: int) -> None:
    for _ in range(units):
        sum(i * i for i in range(PY_CHUNK))


def _torch_units(units: int) -> None:
    import torch

    a = torch.randn(MATRIX, MATRIX)
    for _ in range(units):
        a = torch.tanh(a @ a)


def calibrate(seconds: float) -> tuple[int, int]:
    """Units of each kind of work that take `seconds` / 2 CPU seconds each, measured once before timing.

    CPU seconds rather than wall: on a busy machine the wall time of a unit includes the waits for
    a core, which would make the steps far shorter, in work, than `seconds`.
    """
    import torch

    torch.set_num_threads(1)  # the step on one core; the tracker's thread gets the other
    units = []
    for work in (_python_units, _torch_units):
        started = cpu_seconds()
        work(50)
        per_unit = (cpu_seconds() - started) / 50
        units.append(max(1, round(seconds / 2 / per_unit)))
    return units[0], units[1]


def fake_step(work: tuple[int, int]) -> None:
    """The same CPU work every time, half holding the GIL and half not."""
    _python_units(work[0])
    _torch_units(work[1])


def open_for(kind: str, logdir: Path, name: str):
    return tracking.open_tracker(kind, name, {"train": {"learning_rate": 5e-5}}, logdir=logdir,
                                 mode="offline" if kind == "swanlab" else None)


def log_latency(kind: str, rows: list[dict], logdir: Path, steps: int) -> tuple[float, float, float]:
    opened = time.perf_counter()
    tracker = open_for(kind, logdir, f"latency-{kind}")
    start_up = time.perf_counter() - opened
    times = []
    for step in range(steps):
        row = dict(rows[step % len(rows)], step=step)
        started = time.perf_counter()
        tracker.log(row)
        times.append(time.perf_counter() - started)
    tracker.close(timeout=600)  # the backlog written before the next measurement starts
    times.sort()
    return start_up, statistics.median(times), times[int(0.99 * (len(times) - 1))]


def backend_time(kind: str, rows: list[dict], logdir: Path, steps: int) -> tuple[float, float]:
    """(wall, CPU seconds) per step of the backend's own work, done synchronously here.

    The CPU seconds (every thread of the process, the writer's own included) are what a step can
    lose to the tracker when the cores are saturated; unlike wall time they barely move with the
    load other programs put on a shared machine.
    """
    backend = tracking.BACKENDS[kind](logdir, f"backend-{kind}", "offline")
    started, cpu_started = time.perf_counter(), cpu_seconds()
    for step in range(steps):
        backend.scalars(tracking.scalars(rows[step % len(rows)]), step, None)
    backend.close()
    return (time.perf_counter() - started) / steps, (cpu_seconds() - cpu_started) / steps


def simulated_run(kind: str | None, rows: list[dict], logdir: Path, steps: int, work: tuple[int, int],
                  tag: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of `steps` fake steps, each followed by `log()` when tracked.

    Only the steps are timed: opening and closing a tracker happen once per run, not per step
    (the start-up is reported on its own).
    """
    tracker = open_for(kind, logdir, f"run-{kind}-{tag}") if kind else None
    started, cpu_started = time.perf_counter(), cpu_seconds()
    for step in range(steps):
        fake_step(work)
        if tracker is not None:
            tracker.log(dict(rows[step % len(rows)], step=step))
    timed = time.perf_counter() - started, cpu_seconds() - cpu_started
    if tracker is not None:
        tracker.close()
    return timed


def percent(value: float) -> str:
    return f"{value:+.2%}"


def milliseconds(value: float) -> str:
    return f"{value * 1e3:+.1f} ms"


def spread(values: list[float], show) -> str:
    """'+0.50% (quartiles -1.20% .. +2.00%)': the median and where the middle half of the repeats lie."""
    if len(values) < 2:
        return show(values[0])
    low, _, high = statistics.quantiles(values, n=4)
    return f"{show(statistics.median(values))} (quartiles {show(low)} .. {show(high)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="tensorboard,swanlab")
    parser.add_argument("--steps", type=int, default=10, help="simulated training steps per run")
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--calls", type=int, default=500, help="log() calls timed for latency")
    args = parser.parse_args(argv)
    rows = recorded_rows()
    step_times = sorted(r["time_step"] for r in rows)
    h200_step = statistics.median(step_times[:-1])  # the slowest, first step also compiles
    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine()}")
    print(f"row: {len(tracking.scalars(rows[-1]))} numbers; recorded H200 step median {h200_step:.1f} s, "
          f"shortest {step_times[0]:.1f} s")
    kinds = [k for k in args.backends.split(",") if k]
    work = calibrate(args.step_seconds)
    with tempfile.TemporaryDirectory() as folder:
        logdir = Path(folder)
        for kind in kinds:
            if not installed(kind):
                print(f"{kind}: not installed, skipped")
                continue
            start_up, median, p99 = log_latency(kind, rows, logdir, args.calls)
            per_step, per_step_cpu = backend_time(kind, rows, logdir, args.calls)
            walls, cpus = [], []
            for repeat in range(args.repeats):  # alternate, so load changes hit both sides alike
                plain = simulated_run(None, rows, logdir, args.steps, work, f"{repeat}")
                tracked = simulated_run(kind, rows, logdir, args.steps, work, f"{repeat}")
                walls.append((tracked[0] - plain[0]) / plain[0])
                cpus.append((tracked[1] - plain[1]) / args.steps)
            print(f"{kind}: start-up {start_up:.1f} s (once per run); log() median {median * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us; "
                  f"backend {per_step * 1e3:.2f} ms/step wall, {per_step_cpu * 1e3:.2f} ms CPU "
                  f"= {per_step_cpu / h200_step:.3%} of an H200 step; "
                  f"simulated run ({args.steps} x {args.step_seconds} s) overhead, median of {args.repeats}: "
                  f"wall {spread(walls, percent)}; CPU per step {spread(cpus, milliseconds)} "
                  f"= {statistics.median(cpus) / h200_step:.3%} of an H200 step", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
