"""`python -m helpers.multihop build|solve|show`.

- ``build [--force]``: the set-up stage (candidates, checks, ``DATA_DIR/synthetic.jsonl``);
- ``solve``: the independent solvers over every candidate that passes the rule checks, with the
  course's engine, writing ``helpers/multihop/verdicts.jsonl`` (run it where a GPU is; on a CPU
  pass ``--limit`` to measure on a sample), then rebuild the split with ``build``;
- ``show [N]``: N random verified questions with their chains (a Markdown table).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from helpers import config
from helpers.multihop import build


def rule_passing(out: Path) -> tuple[list[dict], object]:
    """Candidates that pass every check but the solvers' (and the repeat cap), and the corpus."""
    from helpers.search.local import LocalIndex

    corpus = build.load_corpus()
    candidates = build.generate_candidates(corpus, out / build.CANDIDATES_FILE)
    held_ids, held_questions = build.held_out(out)
    results = build.check_all(candidates, corpus, LocalIndex.load(out / "index"), held_ids, held_questions, {})
    keep = [c for c, r in zip(candidates, results)
            if all(v for k, v in r.items() if k not in ("solvers", "repeats"))]
    return keep, corpus


def solve(model: str, limit: int | None, out_path: Path, seed: int) -> int:
    from helpers.engine import connect
    from helpers.multihop.solvers import verdicts, write_verdicts

    out = config.DATA_DIR
    candidates, corpus = rule_passing(out)
    if limit is not None:
        candidates = random.Random(seed).sample(candidates, min(limit, len(candidates)))
    started = time.perf_counter()
    client = connect("local").create_sampling_client(base_model=model)
    tokenizer = client.get_tokenizer()

    def passages_of(candidate):
        return [(corpus.by_id[i].title, corpus.by_id[i].text) for i in candidate["passage_ids"]]

    rows = verdicts(candidates, passages_of, client, tokenizer)
    for row in rows:
        row["model"] = model
    write_verdicts(rows, out_path)
    n = len(rows) or 1
    summary = {
        "questions": len(rows), "model": model, "seconds": round(time.perf_counter() - started, 1),
        "right_with_all": round(sum(r["with_all"] for r in rows) / n, 3),
        "right_with_first": round(sum(r["with_first"] for r in rows) / n, 3),
        "pass": round(sum(r["pass"] for r in rows) / n, 3),
    }
    print(json.dumps(summary))
    print(f"verdicts -> {out_path}; apply them with `python -m helpers.multihop build`")
    return 0


def show(count: int, seed: int) -> int:
    from helpers.data import load_rows

    rows = load_rows(build.SPLIT)
    picked = random.Random(seed).sample(rows, min(count, len(rows)))
    print("| # | kind | question | chain | answer |")
    print("| --- | --- | --- | --- | --- |")
    for i, row in enumerate(picked, 1):
        meta = row["metadata"]
        chain = " → ".join(meta["chain"])
        cells = [str(i), f"{meta['kind']} ({meta['hops']} hops)", row["question"], chain, row["answers"][0]]
        print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.multihop")
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="generate and verify the synthetic split")
    p_build.add_argument("--force", action="store_true")
    p_solve = sub.add_parser("solve", help="run the independent solvers and write their verdicts")
    p_solve.add_argument("--model", default="qwen2.5-0.5b", choices=config.MODELS)
    p_solve.add_argument("--limit", type=int, default=None, help="a random sample of this many questions")
    p_solve.add_argument("--out", type=Path, default=build.VERDICTS_FILE)
    p_solve.add_argument("--seed", type=int, default=0)
    p_show = sub.add_parser("show", help="print random verified questions as a Markdown table")
    p_show.add_argument("count", type=int, nargs="?", default=30)
    p_show.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "build":
        build.prepare_synthetic(force=args.force)
        return 0
    if args.command == "solve":
        return solve(args.model, args.limit, args.out, args.seed)
    return show(args.count, args.seed)


if __name__ == "__main__":
    sys.exit(main())
