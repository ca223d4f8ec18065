"""How long one rollout batch takes, and where the time goes (sampling vs search).

    .venv/bin/python benchmarks/bench_rollout.py                          # qwen2.5-0.5b, 2 questions x 4
    .venv/bin/python benchmarks/bench_rollout.py --model smollm2-135m --questions 4 --group 8

Uses the local engine, the local BM25 index and the first questions of the test split.
Prints the run's RolloutStats and a line per trajectory.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from cpu_clock import cpu_seconds, load_average


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-assistant-tokens", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from helpers.data import load_examples
    from helpers.engine import connect
    from helpers.models import load_tokenizer
    from helpers.rollout import RolloutConfig, rollout_batch
    from helpers.search import create_search_client

    started = time.perf_counter()
    tokenizer = load_tokenizer(args.model)
    sampler = connect("local").create_sampling_client(base_model=args.model)
    search = create_search_client("local")
    search.search("warm up the index")
    examples = load_examples(args.split, limit=args.questions)
    setup = time.perf_counter() - started
    config = RolloutConfig(group_size=args.group, max_assistant_tokens=args.max_assistant_tokens, seed=args.seed)
    cpu_before = cpu_seconds()
    batch = rollout_batch(sampler, tokenizer, search, examples, config)
    cpu = cpu_seconds() - cpu_before
    stats = batch.stats.as_dict()
    print(f"model {args.model}, {args.questions} questions x group {args.group}, {args.threads} torch threads")
    print(f"setup (load model, tokenizer, index): {setup:.1f}s")
    # On a shared machine wall time says little; CPU seconds / threads is the wall time the
    # rollout would take with the cores to itself.
    print(f"rollout wall {batch.stats.total_seconds:.1f}s, CPU {cpu:.1f}s "
          f"(= about {cpu / args.threads:.1f}s wall on {args.threads} free cores); load average {load_average()}")
    print(json.dumps(stats, indent=2))
    if stats["sampling_seconds"]:
        print(f"sampled tokens per second: {stats['sampled_tokens'] / stats['sampling_seconds']:.1f}")
    for t in batch:
        kinds = "".join({"tool": "S", "answer": "A", "invalid": "X"}.get(turn.kind, "?") for turn in t.turns)
        print(f"  q{t.question_index} b{t.group_index} turns={kinds:<6} end={t.end_reason:<18} "
              f"reward={t.reward:+.1f} adv={t.advantage:+.2f} answer={t.answer!r}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
