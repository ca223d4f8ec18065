"""Notebook 09's GRPO step on the CPU (the full profile), this checkout against another one.

    nice -n 19 .venv/bin/python benchmarks/bench_grpo_cpu.py --against /work/wt/before --repeats 2

The step is the one notebook 09 takes: the full profile's questions × group size and rollout budgets,
qwen2.5-0.5b from the recorded SFT adapter, 2 torch threads, one `train_step` (sampling, searches,
rewards, one forward-backward and optimiser step) from the same start weights each time. Each step
runs in its own process, importing `helpers` from the checkout it measures, the two checkouts taking
turns (A B A B …) so a change in the machine's load falls on both. It prints each step's wall and CPU
seconds and its parts, whether both checkouts sampled the same tokens (the same work), and the ratio
of the medians: on a shared machine the CPU seconds are the comparable figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_step(root: Path, adapter: str | None, threads: int) -> dict:
    """In this process: notebook 09's step with the `helpers` of `root` (run as a child, --step)."""
    sys.path.insert(0, str(root))
    os.environ.setdefault("COURSE_PROFILE", "full")
    import hashlib
    import resource

    import torch

    torch.set_num_threads(threads)
    import helpers.train as train
    from helpers.widgets.budgets import budgets
    from helpers.widgets.course import rollout_config

    open_session = getattr(train, "open_session", None)
    if open_session is None:
        from helpers.session import open_session
    values = budgets("full")
    config = train.TrainConfig(model="qwen2.5-0.5b", init_from=adapter, max_steps=1, questions_per_batch=values["questions"],
                               rollout=rollout_config(values, group_size=values["group_size"]),
                               save_every=0, out=tempfile.mkdtemp(prefix="bench-grpo-cpu-"), resume=False)
    session = open_session(config)
    batch = train.step_questions(session, 0)
    cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])  # noqa: E731 (user + system)
    wall, used = time.perf_counter(), cpu()
    metrics, groups = train.train_step(session.training_client, session.tokenizer, session.search_client, batch,
                                       config, 0)
    tokens = [t.turns[-1].prompt_tokens for g in groups for t in g.trajectories]
    return {"root": str(root), "wall": time.perf_counter() - wall, "cpu": cpu() - used,
            "sampling": metrics["time_sampling"], "search": metrics["time_search"],
            "training": metrics["time_training"], "questions": values["questions"], "group": values["group_size"],
            "tokens": hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:12],
            "sampled_tokens": sum(len(t) for t in tokens)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, help="another checkout (e.g. a git worktree of an earlier commit)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--adapter", default=str(ROOT / "results" / "h200_search" / "sft_adapter"),
                        help="the start weights (the course's recorded SFT adapter)")
    parser.add_argument("--step", type=Path, help=argparse.SUPPRESS)  # child: measure one step with this root
    args = parser.parse_args()
    if args.step:
        print("RESULT " + json.dumps(one_step(args.step, args.adapter, args.threads)), flush=True)
        return
    roots = [ROOT] + ([args.against.resolve()] if args.against else [])
    for root in roots:
        if not (root / "helpers").is_dir():
            raise SystemExit(f"{root} is not a checkout of the course (no helpers/ in it)")
    print(f"notebook 09's GRPO step, {args.threads} torch threads, from {args.adapter}; checkouts: "
          + ", ".join(str(r) for r in roots), flush=True)
    results: dict[str, list[dict]] = {str(r): [] for r in roots}
    for repeat in range(args.repeats):
        for root in roots:
            child = subprocess.run([sys.executable, __file__, "--step", str(root), "--adapter", args.adapter,
                                    "--threads", str(args.threads)], capture_output=True, text=True, cwd=root)
            lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                raise SystemExit(f"the step in {root} failed (exit {child.returncode}):\n{child.stderr[-3000:]}")
            row = json.loads(lines[-1][len("RESULT "):])
            if child.returncode != 0:  # the step was measured; the process died after it (an older checkout)
                print(f"  ({root}: exit status {child.returncode} after the step: {child.stderr.strip()[-200:]!r})")
            results[str(root)].append(row)
            print(f"{repeat + 1}/{args.repeats} {root}: {row['wall']:.1f} s wall, {row['cpu']:.1f} s CPU (sampling "
                  f"{row['sampling']:.1f}, search phase {row['search']:.2f}, training {row['training']:.1f}); "
                  f"{row['questions']} questions x group {row['group']}, {row['sampled_tokens']} prompt tokens at "
                  f"the last turns, tokens {row['tokens']}, load average {os.getloadavg()[0]:.1f}", flush=True)
    if len(roots) == 2:
        a, b = (results[str(r)] for r in roots)
        same = {row["tokens"] for row in a + b}
        print(f"both checkouts sampled the same tokens: {len(same) == 1}")
        for key in ("cpu", "wall"):
            ma, mb = statistics.median(r[key] for r in a), statistics.median(r[key] for r in b)
            print(f"median {key}: this checkout {ma:.1f} s, the other {mb:.1f} s, ratio this/other {ma / mb:.2f}")


if __name__ == "__main__":
    main()
