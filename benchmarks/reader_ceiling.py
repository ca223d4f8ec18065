"""How many answers does a policy lose reading, not finding? Its questions run twice, the second time with
the gold passages handed to its first search.

A policy that searched well still has to read: pick the asked attribute out of two passages, compare two
dates, say "no". This evaluates a policy (greedy, as `helpers.eval` does) on one split and source twice on
the same questions: once with the local BM25 index, once with a search that answers a query equal to the
question (case, punctuation and articles ignored, as the evaluation's "first query rewritten" reads it)
with the question's gold passages, at most the k a search returns; any other query, a rewritten first one
or a second search, goes to the index as before. The second run's EM is what the policy makes of the
evidence once it is in hand: the ceiling a better search alone could reach on those questions.

    python benchmarks/reader_ceiling.py --model-path results/h200_replicas/gain5ns-k2_41/adapter --topk 2
    python benchmarks/reader_ceiling.py --model-path ADAPTER --topk 2 --data-source nq --limit 100 --out r.json
    python benchmarks/reader_ceiling.py --model-path ADAPTER --topk 2 --searches gold --recorded ADAPTER/../eval/test.jsonl

On two CPU cores the 0.5B takes about 20 s a HotpotQA question (batches of 50, nothing else running); `--searches gold` runs
only the handed-over search, and `--recorded` sets the policy's recorded evaluation rows of the same
questions beside it (a GPU's rows: the CPU reproduces most of its greedy answers, not every one).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.evidence import reader_summary  # noqa: E402
from helpers.search.gold_first import gold_first_search  # noqa: E402


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", required=True, help="the policy's adapter (a LoRA export)")
    parser.add_argument("--model", default=None, help="base model (default: the course's)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--data-source", default="hotpotqa")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--topk", type=int, default=3, help="passages a search returns, as the policy was trained")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--searches", choices=("both", "bm25", "gold"), default="both",
                        help="the index's search, the gold passages handed to the first, or both (default)")
    parser.add_argument("--recorded", default=None, help="the policy's evaluation rows (JSONL) of these questions, "
                        "summarised beside the runs")
    parser.add_argument("--out", default=None, help="JSON with the summaries and every row")
    args = parser.parse_args(argv)

    from helpers.data import load_examples
    from helpers.eval import EvalConfig, evaluate
    from helpers.search import create_search_client

    examples = load_examples(args.split, data_source=args.data_source, limit=args.limit)
    if not examples:
        raise SystemExit(f"no {args.data_source!r} questions in split {args.split!r}: check --split and --data-source")
    index = create_search_client("local", topk=args.topk)
    gold_first = gold_first_search(examples, index)
    if not gold_first.gold:
        raise SystemExit(f"none of the {len(examples)} questions has gold passages in the corpus: nothing to hand over")
    results, rows = {}, {}
    if args.recorded:
        wanted = {str(example.id) for example in examples}
        with open(args.recorded, encoding="utf-8") as handle:
            recorded = [row for row in map(json.loads, handle) if str(row.get("id")) in wanted]
        if len(recorded) != len(wanted):
            raise SystemExit(f"{args.recorded} holds {len(recorded)} of the {len(wanted)} questions: pass the rows of "
                             f"split {args.split!r}")
        rows["recorded"], results["recorded"] = recorded, {**reader_summary(recorded), "seconds": None}
    runs = {"bm25": ("bm25", index), "gold": ("gold first", gold_first)}
    for label, client in [runs[k] for k in runs if args.searches in (k, "both")]:
        config = EvalConfig(model=args.model, model_path=args.model_path, split=args.split, label=label,
                            search_topk=args.topk, batch_size=args.batch, tracker="none")
        started = time.perf_counter()
        rows[label] = evaluate(config, search_client=client, examples=examples)
        results[label] = {**reader_summary(rows[label]), "seconds": round(time.perf_counter() - started, 1)}
    if "gold first" in results:
        results["gold first"]["searches_handed_gold"] = gold_first.handed
    keys = ["questions", "em", "lenient_em", "two_searches", "every_gold_read", "em_every_gold_read", "em_rest",
            "yes_no", "em_yes_no", "said_yes", "seconds"]
    print(f"{args.model_path} on {args.split}/{args.data_source}, {args.topk} passages a search "
          f"({gold_first.handed} first searches handed the gold passages)")
    print("| search | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for label, s in results.items():
        print(f"| {label} | " + " | ".join("–" if s[k] is None else str(s[k]) for k in keys) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "summaries": results, "rows": rows}, indent=1))
    return results


if __name__ == "__main__":
    main()
