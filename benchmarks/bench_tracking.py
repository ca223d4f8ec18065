"""What a tracker costs a training step: call latency, backend time, and a simulated run.

    .venv/bin/python benchmarks/bench_tracking.py                       # every backend installed
    .venv/bin/python benchmarks/bench_tracking.py --steps 40 --step-seconds 1 --repeats 3

Goal: a tracker slows a training step by at most a few percent. Three figures per backend, all
with a real step-metrics row (the last step of results/h200_balanced/grpo, ~70 numbers):

1. `log()` latency: what the training loop waits for (it only queues the row);
2. backend time per step: the background thread's work for one row (written synchronously here),
   the CPU it takes from the step on a busy machine;
3. a simulated run: `--steps` steps of `--step-seconds` CPU work each (half pure Python, which
   holds the GIL the tracker's thread needs, half a torch matrix product, which releases it),
   timed with and without the tracker, alternating; the overhead is the median over repeats.

Step 2 against the recorded H200 step times (median ~8 s after the compiling first step, shortest
4.5 s) gives the overhead of a real run.
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

from helpers import tracking  # noqa: E402

RECORDED = ROOT / "results" / "h200_balanced" / "grpo" / "metrics.jsonl"


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cpu}, {os.cpu_count()} cores, load {load:.1f}, Python {platform.python_version()}"


def recorded_rows() -> list[dict]:
    return [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]


def installed(kind: str) -> bool:
    try:
        __import__(tracking.PACKAGES[kind])
        return True
    except ImportError:
        return False


def fake_step(seconds: float) -> None:
    """CPU work of a fixed size (calibrated once), half holding the GIL and half not."""
    import torch

    deadline = time.perf_counter() + seconds / 2
    total = 0
    while time.perf_counter() < deadline:
        total += sum(i * i for i in range(2000))
    a = torch.randn(256, 256)
    deadline = time.perf_counter() + seconds / 2
    while time.perf_counter() < deadline:
        a = torch.tanh(a @ a)


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
    tracker.close()
    times.sort()
    return start_up, statistics.median(times), times[int(0.99 * (len(times) - 1))]


def backend_time(kind: str, rows: list[dict], logdir: Path, steps: int) -> float:
    backend = tracking.BACKENDS[kind](logdir, f"backend-{kind}", "offline")
    started = time.perf_counter()
    for step in range(steps):
        backend.scalars(tracking.scalars(rows[step % len(rows)]), step, None)
    elapsed = time.perf_counter() - started
    closing = time.perf_counter()
    backend.close()
    return (elapsed + (time.perf_counter() - closing)) / steps


def simulated_run(kind: str | None, rows: list[dict], logdir: Path, steps: int, seconds: float, tag: str) -> float:
    tracker = open_for(kind, logdir, f"run-{kind}-{tag}") if kind else None
    started = time.perf_counter()
    for step in range(steps):
        fake_step(seconds)
        if tracker is not None:
            tracker.log(dict(rows[step % len(rows)], step=step))
    if tracker is not None:
        tracker.close()
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="tensorboard,swanlab")
    parser.add_argument("--steps", type=int, default=20, help="simulated training steps per run")
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500, help="log() calls timed for latency")
    args = parser.parse_args(argv)
    rows = recorded_rows()
    step_times = sorted(r["time_step"] for r in rows)
    h200_step = statistics.median(step_times[:-1])  # the slowest, first step also compiles
    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine()}")
    print(f"row: {len(tracking.scalars(rows[-1]))} numbers; recorded H200 step median {h200_step:.1f} s, "
          f"shortest {step_times[0]:.1f} s")
    kinds = [k for k in args.backends.split(",") if k]
    with tempfile.TemporaryDirectory() as folder:
        logdir = Path(folder)
        for kind in kinds:
            if not installed(kind):
                print(f"{kind}: not installed, skipped")
                continue
            start_up, median, p99 = log_latency(kind, rows, logdir, args.calls)
            per_step = backend_time(kind, rows, logdir, args.calls)
            overheads = []
            for repeat in range(args.repeats):  # alternate, so load changes hit both sides alike
                plain = simulated_run(None, rows, logdir, args.steps, args.step_seconds, f"{repeat}")
                tracked = simulated_run(kind, rows, logdir, args.steps, args.step_seconds, f"{repeat}")
                overheads.append((tracked - plain) / plain)
            print(f"{kind}: start-up {start_up:.1f} s (once per run); log() median {median * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us; "
                  f"backend {per_step * 1e3:.2f} ms/step = {per_step / h200_step:.5%} of an H200 step; "
                  f"simulated run ({args.steps} x {args.step_seconds} s) overhead median "
                  f"{statistics.median(overheads):+.2%} (runs: {', '.join(f'{o:+.2%}' for o in overheads)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
