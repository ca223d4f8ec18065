"""What the scripted teacher demonstrates, lever by lever, on the SFT questions (CPU, no model).

    .venv/bin/python benchmarks/sft_teacher.py                      # train questions 1-800, 4 teachers
    .venv/bin/python benchmarks/sft_teacher.py --limit 200 --decompose 0.5

For each teacher (the default one, `decompose`, `rewrite_first_query`, both) it scripts the
demonstrations exactly as `helpers.sft.run_sft` does (Qwen tokenizer, 768-token observations) and
prints, per data source: demonstrations kept, two-search ones, those that answer from the first
evidence although they searched again, first queries rewritten, and for the rewritten ones the
gold passages and answers their first search retrieved against the raw question's top 3.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure(demos, search) -> Counter:
    from helpers.evidence import gold_passage_ids, search_evidence

    counts: Counter = Counter()
    for demo in demos:
        source, example = demo.example.data_source, demo.example
        counts[source, "demos"] += 1
        counts[source, "two searches"] += demo.search_calls > 1
        counts[source, "searched again, answer in 1st"] += demo.search_calls > 1 and demo.answer_search == 0
        if demo.rewritten:
            gold = set(gold_passage_ids(example))
            ids, hit = search_evidence(demo.queries[0], example.answers, search)
            raw_ids, raw_hit = search_evidence(example.question.strip(), example.answers, search)
            counts[source, "rewritten"] += 1
            counts[source, "rewritten: gold (rewrite)"] += len(gold & set(ids or ()))
            counts[source, "rewritten: gold (question)"] += len(gold & set(raw_ids or ()))
            counts[source, "rewritten: answer hit (rewrite)"] += hit
            counts[source, "rewritten: answer hit (question)"] += raw_hit
    return counts


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=800, help="first N train questions (SFT's)")
    parser.add_argument("--decompose", type=float, default=0.5)
    parser.add_argument("--rewrite", default="gain")
    args = parser.parse_args(argv)

    from helpers.models import load_tokenizer
    from helpers.search import create_search_client
    from helpers.sft import SFTConfig, build_demonstrations, sft_examples

    config = SFTConfig(limit=args.limit)
    examples = sft_examples(config)
    tokenizer = load_tokenizer("qwen2.5-0.5b")
    search = create_search_client("local")
    teachers = {"default": (0.0, "never"), f"decompose={args.decompose}": (args.decompose, "never"),
                f"rewrite={args.rewrite}": (0.0, args.rewrite), "both": (args.decompose, args.rewrite)}
    sources = sorted({e.data_source for e in examples})
    rows = {}
    for name, (decompose, rewrite) in teachers.items():
        demos, skipped = build_demonstrations(examples, search, tokenizer, config.max_tool_response_tokens,
                                              progress=True, decompose=decompose, rewrite=rewrite)
        rows[name] = (measure(demos, search), skipped)
    keys = ["demos", "two searches", "searched again, answer in 1st", "rewritten", "rewritten: gold (rewrite)",
            "rewritten: gold (question)", "rewritten: answer hit (rewrite)", "rewritten: answer hit (question)"]
    print(f"\n{len(examples)} train questions ({', '.join(f'{s} {sum(e.data_source == s for e in examples)}' for s in sources)})\n")
    print("| teacher | source | skipped | " + " | ".join(keys) + " |")
    print("|---|---|---|" + "---|" * len(keys))
    for name, (counts, skipped) in rows.items():
        for source in sources:
            print(f"| {name} | {source} | {skipped} | " + " | ".join(str(counts[source, k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
