"""The live widgets' two waits: the first load of a policy, and one slider change.

    .venv/bin/python benchmarks/bench_live.py                    # sft_grpo on qwen2.5-0.5b, group 4
    .venv/bin/python benchmarks/bench_live.py --policy base --changes 3

Goals on a laptop's 2 free cores, full profile: first load of a policy ≤ 20 s (base weights,
tokenizer and adapter, then the index), one slider change ≤ 30 s (one question × group 4 rolled out
again with the playground's own run function). A slider change is measured the way a learner
makes it: after a first run, `max_search_calls` goes 1 → 0 → 2 …, each change timed alone.
Prints wall and CPU seconds (CPU / threads is what the wall time would be on free cores) and
the load average, since a shared machine makes wall times say little.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

from cpu_clock import cpu_seconds, load_average


def _timed(fn):
    wall, cpu = time.perf_counter(), cpu_seconds()
    out = fn()
    return out, time.perf_counter() - wall, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="sft_grpo", help="base | sft | sft_grpo | a checkpoint path")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--changes", type=int, default=2, help="slider changes to time after the first run")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each figure as soon as it is measured
    os.environ.setdefault("COURSE_PROFILE", "full")

    import torch

    torch.set_num_threads(args.threads)
    from helpers.course.policies import load_policy
    from helpers.widgets.budgets import budgets
    from helpers.widgets.changes import run_summary
    from helpers.widgets.live import budget_questions, live_run_fn, search_client_for

    policy, wall, cpu = _timed(lambda: load_policy(args.policy))
    _, index_wall, index_cpu = _timed(lambda: search_client_for(3).search("warm up the index"))
    print(f"policy {policy.label} on {policy.model}, {args.threads} torch threads, load average {load_average()}")
    print(f"first load of the policy: wall {wall:.1f} s, CPU {cpu:.1f} s (~{cpu / args.threads:.1f} s on "
          f"{args.threads} free cores); then the search index: wall {index_wall:.1f} s, CPU {index_cpu:.1f} s")
    question = budget_questions(limit=1)[0].example
    values = {**budgets("full"), "group_size": args.group, "policy": args.policy, "question": question,
              "max_search_calls": 1}
    run = live_run_fn(seed=1)
    data, wall, cpu = _timed(lambda: run(values))
    print(f"question: {question.question}")
    print(f"first run (max_search_calls=1): wall {wall:.1f} s, CPU {cpu:.1f} s (~{cpu / args.threads:.1f} s free); "
          f"searches per branch {[row['searches'] for row in run_summary(data)]}")
    for change, calls in zip(range(args.changes), (0, 2, 1, 3)):
        values = {**values, "max_search_calls": calls}
        data, wall, cpu = _timed(lambda: run(values))
        print(f"slider change {change + 1} (max_search_calls -> {calls}): wall {wall:.1f} s, CPU {cpu:.1f} s "
              f"(~{cpu / args.threads:.1f} s free); searches per branch {[r['searches'] for r in run_summary(data)]}, "
              f"ended by {[r['end_reason'] for r in run_summary(data)]}; load average {load_average()}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
