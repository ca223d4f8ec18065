"""Time the course: every numbered notebook executed headless, in order, in one profile.

    .venv/bin/python benchmarks/bench_course.py                     # fast profile, 00-10
    .venv/bin/python benchmarks/bench_course.py --profile full      # what `make lab` gives, 00-13
    .venv/bin/python benchmarks/bench_course.py --profile full 09   # some of them
    .venv/bin/python benchmarks/bench_course.py --profile full --json results/course_full.json
    python benchmarks/bench_course.py --profile gpu 09 10 --save /root/results/notebooks   # on a GPU

Prints seconds per notebook with its slowest cell, the total, the CPU count and the load average
at start and end (timings on a shared machine are only comparable within one run). Goals: fast
profile, the course 00-10 in <= 20 minutes on 2 CPU cores; full profile, each notebook <= 10
minutes and notebook 09 <= 20; gpu profile (the real recipe, one H200), 09 and 10 together <= 25
minutes. `--save` keeps each executed notebook with its outputs (also a failed one: its error is in
it). Results go in benchmarks/RESULTS.md, course section.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
GOAL_S = {"fast": None, "full": 600, "gpu": None}  # per notebook
GOAL_09_S = {"fast": None, "full": 1200, "gpu": None}
GOAL_TOTAL_S = {"fast": 1200, "full": None, "gpu": 1500}  # the profile's set together (gpu: 09 then 10)


class TimedClient(nbclient.NotebookClient):
    """Records the wall time of every cell, to name the slowest one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cell_seconds: list[tuple[float, int]] = []

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        started = time.perf_counter()
        try:
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        finally:
            self.cell_seconds.append((time.perf_counter() - started, cell_index))


def goal(profile: str, name: str) -> float | None:
    return GOAL_09_S[profile] if name.startswith("09") else GOAL_S[profile]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="two-digit numbers (default: all of the profile's set)")
    parser.add_argument("--profile", choices=["fast", "full", "gpu"], default="fast")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--save", help="write each executed notebook, outputs included, into this folder")
    args = parser.parse_args(argv)
    os.environ["COURSE_PROFILE"] = args.profile
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    last = 10 if args.profile == "fast" and not args.notebooks else 99  # every numbered notebook
    wanted = set(args.notebooks)
    paths = [p for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
             if int(p.name[:2]) <= last and (not wanted or p.name[:2] in wanted)]
    started_load = os.getloadavg()
    print(f"profile {args.profile} | cpus {os.cpu_count()} | load average at start {started_load}")
    rows = []
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        client = TimedClient(notebook, timeout=3600, kernel_name="python3",
                             resources={"metadata": {"path": str(NOTEBOOKS)}})
        started = time.perf_counter()
        try:
            client.execute()
            status = "ok"
        except Exception as error:  # report and go on: the table should cover every notebook
            status = f"FAILED: {type(error).__name__}"
        seconds = time.perf_counter() - started
        if args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, Path(args.save) / path.name)
        slowest_s, slowest_cell = max(client.cell_seconds, default=(0.0, -1))
        limit = goal(args.profile, path.name)
        verdict = "" if limit is None else ("within goal" if seconds <= limit else f"OVER the {limit / 60:.0f}-minute goal")
        rows.append({"notebook": path.name, "seconds": round(seconds, 1), "status": status,
                     "slowest_cell": slowest_cell, "slowest_cell_seconds": round(slowest_s, 1), "goal_s": limit,
                     "cell_seconds": {index: round(s, 1) for s, index in client.cell_seconds}})
        print(f"{path.name:45s} {seconds:7.1f} s  {status:10s} slowest cell {slowest_cell} ({slowest_s:.1f} s)  {verdict}",
              flush=True)
    total = sum(row["seconds"] for row in rows)
    limit = GOAL_TOTAL_S[args.profile]
    verdict = "" if limit is None else ("within goal" if total <= limit else f"OVER the {limit / 60:.0f}-minute goal")
    print(f"{'total':45s} {total:7.1f} s  ({total / 60:.1f} min) {verdict} | load average at end {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"profile": args.profile, "cpus": os.cpu_count(),
                                               "load_start": started_load, "load_end": os.getloadavg(),
                                               "notebooks": rows, "total_s": round(total, 1),
                                               "total_goal_s": limit}, indent=1))
    return 1 if any(row["status"] != "ok" for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
