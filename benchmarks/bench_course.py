"""Time the course: every numbered notebook 00-10 executed headless, fast profile, in order.

    .venv/bin/python benchmarks/bench_course.py            # all of 00-10
    .venv/bin/python benchmarks/bench_course.py 05 06      # some of them

Prints seconds per notebook, the total, the CPU count and the load average (the goal: the whole
course in <= 20 minutes on 2 CPU cores). Results go in benchmarks/RESULTS.md, course section.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def main(argv: list[str]) -> int:
    os.environ["COURSE_PROFILE"] = "fast"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    wanted = set(argv)
    paths = [p for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
             if int(p.name[:2]) <= 10 and (not wanted or p.name[:2] in wanted)]
    print(f"cpus {os.cpu_count()} | load average at start {os.getloadavg()}")
    total = 0.0
    failed = []
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(notebook, timeout=1800, kernel_name="python3",
                                         resources={"metadata": {"path": str(NOTEBOOKS)}})
        started = time.perf_counter()
        try:
            client.execute()
            status = "ok"
        except Exception as error:  # report and go on: the table should cover every notebook
            status = f"FAILED: {type(error).__name__}"
            failed.append(path.name)
        seconds = time.perf_counter() - started
        total += seconds
        print(f"{path.name:45s} {seconds:7.1f} s  {status}", flush=True)
    print(f"{'total':45s} {total:7.1f} s  ({total / 60:.1f} min) | load average at end {os.getloadavg()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
