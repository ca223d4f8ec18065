"""What hostile input costs: the parser on tag floods, a search against a bomb or a drip.

    .venv/bin/python benchmarks/bench_hardening.py

Prints figures, asserts nothing. The parser should grow linearly with the text (ten times the
tags, about ten times the time); a search against a gzip bomb should peak near the 4 MiB cap,
not near the bomb's size; a search against a server that drips its answer should end near its
timeout, not when the server is done.
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "search"))

from fake_service import FakeService, gzip_bomb  # noqa: E402

from helpers.protocol import parse_assistant  # noqa: E402
from helpers.search.http import MAX_RESPONSE_BYTES, RetryPolicy  # noqa: E402
from helpers.search.wikipedia import WikipediaSearchClient  # noqa: E402


def parser_flood() -> None:
    print("parse_assistant on '<tool_call>' repeated n times")
    for n in (4_000, 40_000, 400_000):
        text = "<tool_call>" * n
        started = time.perf_counter()
        parse_assistant(text)
        print(f"  n={n:>7,} ({len(text) / 1e3:>6,.0f} kB): {1e3 * (time.perf_counter() - started):8.2f} ms")


def client(svc, timeout):
    return WikipediaSearchClient(endpoint=svc.url_for("/w/api.php"), timeout=timeout, limiter=None,
                                 retry=RetryPolicy(max_retries=2, backoff=0.01, sleep=lambda s: None))


def bomb(size: int = 256 << 20) -> None:
    wire = len(gzip_bomb(size))
    for status in (200, 500):
        with FakeService() as svc:
            for _ in range(3):
                svc.push(status=status, bomb=size)
            tracemalloc.start()
            result = client(svc, 10.0).search("q")
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        print(f"gzip bomb of {size >> 20} MiB ({wire / 1e3:.0f} kB sent), HTTP {status}: "
              f"{len(svc.requests)} request(s), peak {peak / 2**20:.1f} MiB (cap {MAX_RESPONSE_BYTES >> 20} MiB): "
              f"{result.error}")


def drip() -> None:
    body = json.dumps({"query": {"pages": [{"title": "T", "index": 1, "extract": "x" * 2000}]}}).encode()
    with FakeService() as svc:
        svc.push(raw=body, drip=(16, 0.5))  # about a minute to send in full
        started = time.monotonic()
        result = client(svc, 1.0).search("q")
    print(f"drip of 16 bytes every 0.5 s, timeout=1: ended after {time.monotonic() - started:.2f} s: {result.error}")


if __name__ == "__main__":
    parser_flood()
    bomb()
    drip()
