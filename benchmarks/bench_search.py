"""Search benchmarks: query speed of the local index vs rank_bm25, and indexing cost at scale.

    .venv/bin/python benchmarks/bench_search.py query              # local index vs rank_bm25
    .venv/bin/python benchmarks/bench_search.py index --passages 1000000
    .venv/bin/python benchmarks/bench_search.py quality            # answer@k / recall@k on the dev questions
    .venv/bin/python benchmarks/bench_search.py all --passages 250000

Goals: local index >= 50x the queries per second of rank_bm25 on the same corpus and
queries, p50 < 5 ms; a synthetic 1 M-passage corpus indexed in < 10 min on 2 cores.
rank_bm25 scores every document in Python, so it is timed on a sample of the queries.
Indexing runs ``helpers.search.local.build_index`` in a child process, so its peak RSS is
the indexer's alone (the synthetic corpus is written to a temporary file first).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.node()} · {cpu} · {os.cpu_count()} cores · load {load:.1f} · Python {platform.python_version()}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timings(fn, queries: list[str]) -> dict:
    latencies = []
    started = time.perf_counter()
    for query in queries:
        t0 = time.perf_counter()
        fn(query)
        latencies.append(time.perf_counter() - t0)
    total = time.perf_counter() - started
    return {"n": len(queries), "qps": len(queries) / total, "p50_ms": 1000 * statistics.median(latencies),
            "p95_ms": 1000 * percentile(latencies, 0.95)}


def bench_query(sample: int, k: int = 3) -> dict:
    from rank_bm25 import BM25Okapi
    from tqdm.auto import tqdm

    from helpers.search.local import LocalSearchClient, analyze, get_index
    from helpers.search.quality import dev_rows

    index = get_index()
    queries = [row["question"] for row in dev_rows()]
    index.search(queries[0], k)  # warm up
    local = timings(lambda q: index.search(q, k), queries)
    client = LocalSearchClient(index)
    with_items = timings(client.search, queries)

    started = time.perf_counter()
    tokenized = [analyze(p.contents) for p in tqdm(index.passages, desc="rank_bm25 tokenise", leave=False)]
    okapi = BM25Okapi(tokenized)
    okapi_build = time.perf_counter() - started
    import numpy as np

    def okapi_search(query):
        scores = okapi.get_scores(analyze(query))
        return np.argsort(-scores)[:k]

    step = max(1, len(queries) // sample)
    subset = queries[::step][:sample]
    slow = timings(okapi_search, tqdm(subset, desc="rank_bm25 queries", leave=False))
    # same ranking family? share of sampled queries whose top-1 passage agrees
    position = {p.id: i for i, p in enumerate(index.passages)}
    agree = sum(1 for q in subset[:50]
                if (hits := index.search(q, 1)) and int(okapi_search(q)[0]) == position[hits[0].id])
    return {"passages": len(index), "queries": len(queries), "local": local, "local_client": with_items,
            "rank_bm25": slow, "rank_bm25_build_s": okapi_build, "speedup_qps": local["qps"] / slow["qps"],
            "top1_agreement_of_50": agree}


def synthetic_corpus(path: Path, passages: int, words: int = 100, vocab: int = 200_000, seed: int = 0) -> None:
    """Passages of ~100 pseudo-words drawn from a Zipf law, like DPR's 100-word chunks."""
    import numpy as np
    from tqdm.auto import tqdm

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(3, 10, size=vocab)
    lexicon = ["".join(rng.choice(letters, size=n)) for n in lengths]
    ranks = np.arange(1, vocab + 1)
    probs = 1.0 / ranks ** 1.07
    probs /= probs.sum()
    chunk = 10_000
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as out:
        for start in tqdm(range(0, passages, chunk), desc="synthetic corpus", leave=False):
            n = min(chunk, passages - start)
            draws = rng.choice(vocab, size=(n, words), p=probs)
            for i in range(n):
                text = " ".join(lexicon[j] for j in draws[i])
                out.write(json.dumps({"id": f"s{start + i}", "contents": f'"Passage {start + i}"\n{text}'}) + "\n")


def bench_index(passages: int, threads: int = 2) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        corpus = Path(tmp) / "synthetic.jsonl.gz"
        t0 = time.perf_counter()
        synthetic_corpus(corpus, passages)
        generated = time.perf_counter() - t0
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   MKL_NUM_THREADS=str(threads), NUMBA_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
        code = ("import sys; from helpers.search.local import build_index; "
                "build_index(sys.argv[1], sys.argv[2], show_progress=False)")
        cmd = [sys.executable, "-c", code, str(corpus), str(Path(tmp) / "index")]
        if hasattr(os, "sched_setaffinity"):
            cmd = ["taskset", "-c", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:threads])] + cmd
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        size = sum(f.stat().st_size for f in (Path(tmp) / "index").iterdir())
        return {"passages": passages, "cores": threads, "index_s": seconds, "generate_s": generated,
                "peak_rss_gib": peak_kib / 2**20, "peak_rss_note": "" if peak_kib > before else "(max of children)",
                "index_size_mib": size / 2**20, "corpus_mib": corpus.stat().st_size / 2**20}


def bench_quality() -> str:
    from helpers.search.local import get_index
    from helpers.search.quality import dev_rows, format_quality, retrieval_quality

    return format_quality(retrieval_quality(dev_rows(), get_index(), ks=(1, 3, 5, 10)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["query", "index", "quality", "all"], nargs="?", default="all")
    parser.add_argument("--sample", type=int, default=100, help="queries timed with rank_bm25")
    parser.add_argument("--passages", type=int, default=1_000_000, help="synthetic corpus size for 'index'")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"# {dt.datetime.now().isoformat(timespec='minutes')} · {machine()}")
    if args.what in ("query", "all"):
        r = bench_query(args.sample)
        print(f"\nquery speed, top-3, {r['passages']:,} passages, same analyzer (lower, stop words, Snowball):")
        print("| engine | queries | QPS | p50 | p95 |\n|---|---:|---:|---:|---:|")
        for name, key in [("bm25s index (LocalIndex.search)", "local"),
                          ("LocalSearchClient.search (with items)", "local_client"), ("rank_bm25 BM25Okapi", "rank_bm25")]:
            t = r[key]
            print(f"| {name} | {t['n']} | {t['qps']:,.0f} | {t['p50_ms']:.2f} ms | {t['p95_ms']:.2f} ms |")
        print(f"speed-up (QPS): {r['speedup_qps']:.0f}x · rank_bm25 build {r['rank_bm25_build_s']:.1f}s · "
              f"top-1 agreement {r['top1_agreement_of_50']}/50 (different idf formulas)")
    if args.what in ("index", "all"):
        r = bench_index(args.passages, args.cores)
        print(f"\nindexing {r['passages']:,} synthetic passages (~100 words) on {r['cores']} cores: "
              f"{r['index_s']:.0f}s ({r['index_s'] / 60:.1f} min), peak RSS {r['peak_rss_gib']:.2f} GiB, "
              f"index {r['index_size_mib']:.0f} MiB (corpus generation {r['generate_s']:.0f}s, not counted)")
    if args.what in ("quality", "all"):
        print("\nretrieval quality on the dev questions (question as the query):")
        print(bench_quality())
    return 0


if __name__ == "__main__":
    sys.exit(main())
