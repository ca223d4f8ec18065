"""What a benchmark on a shared CPU machine prints beside wall time: its own CPU seconds (CPU /
threads is what the wall time would be on free cores) and the load average."""

from __future__ import annotations

import resource


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "n/a"
