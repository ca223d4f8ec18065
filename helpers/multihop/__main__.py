"""`python -m helpers.multihop build|solve|show`.

- ``build [--force]``: the set-up stage (candidates, checks, ``DATA_DIR/synthetic.jsonl``);
- ``solve``: the independent solvers over every candidate that passes the rule checks and has no
  verdict yet (``--again``: all), with the course's engine, merged into
  ``helpers/multihop/verdicts.jsonl`` batch by batch (``--until HH:MM`` stops between batches;
  ``--limit`` judges a random sample), then rebuild the split with ``build``;
- ``write``: bridge questions written by the engine from chains the rules did not use
  (``helpers.multihop.written``), checked and solved; resumable, ``--until HH:MM`` stops between
  batches; the survivors go to ``helpers/multihop/written.jsonl``, their verdicts to ``verdicts.jsonl``;
- ``pool``: how many fresh chains the writer has that pass the wording-free checks, and what each
  filter leaves out (no generation);
- ``show [N]``: N random verified questions with their chains (a Markdown table).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from helpers import config
from helpers.multihop import build
from helpers.runs import append_jsonl, read_jsonl, write_jsonl


def to_judge(out: Path, verdicts_path: Path, again: bool = False) -> tuple[list[dict], object]:
    """Candidates that pass every rule check and have no recorded verdict (all of them with `again`),
    those the split would keep if their verdict passed first (the repeat cap counts the kept ones),
    then the capped ones, which a failing verdict ahead of them may let in; and the corpus."""
    from helpers.search.local import LocalIndex

    corpus = build.load_corpus()
    candidates = build.all_candidates(corpus, out)
    held_ids, held_questions = build.held_out(out)
    recorded = build.load_verdicts(verdicts_path)
    results = build.check_all(candidates, corpus, LocalIndex.load(out / "index"), held_ids, held_questions, recorded,
                              judged_only=False)
    open_ = [(c, r) for c, r in zip(candidates, results)
             if all(v for k, v in r.items() if k not in ("solvers", "repeats")) and (again or c["id"] not in recorded)]
    return [c for c, r in open_ if r["repeats"]] + [c for c, r in open_ if not r["repeats"]], corpus


def solve(model: str, limit: int | None, out_path: Path, seed: int, batch: int = 32, until: str | None = None,
          again: bool = False) -> int:
    """Verdicts for the candidates `to_judge` gives, `batch` at a time, each batch merged into
    `out_path` as it ends (an interrupted run keeps what it judged); `until` (UTC HH:MM) stops
    between batches; `limit` judges a random sample instead (to measure)."""
    from helpers.engine import connect
    from helpers.multihop.solvers import verdicts

    out = config.DATA_DIR
    candidates, corpus = to_judge(out, out_path, again)
    if limit is not None:
        candidates = random.Random(seed).sample(candidates, min(limit, len(candidates)))
    started = time.perf_counter()
    client = connect("local").create_sampling_client(base_model=model)
    tokenizer = client.get_tokenizer()
    stop = _deadline(until)

    def passages_of(candidate):
        return [(corpus.by_id[i].title, corpus.by_id[i].text) for i in candidate["passage_ids"]]

    rows: list[dict] = []
    for start in range(0, len(candidates), batch):
        if stop is not None and datetime.now(timezone.utc) >= stop:
            break
        new = verdicts(candidates[start:start + batch], passages_of, client, tokenizer)
        for row in new:
            row["model"] = model
        rows += new
        build.merge_verdicts(new, out_path)
        print(f"    {len(rows)} of {len(candidates)} judged, {sum(r['pass'] for r in rows)} pass "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    n = len(rows) or 1
    summary = {
        "questions": len(rows), "left": len(candidates) - len(rows), "model": model,
        "seconds": round(time.perf_counter() - started, 1),
        "right_with_all": round(sum(r["with_all"] for r in rows) / n, 3),
        "right_with_first": round(sum(r["with_first"] for r in rows) / n, 3),
        "pass": round(sum(r["pass"] for r in rows) / n, 3),
    }
    print(json.dumps(summary))
    print(f"verdicts -> {out_path}; apply them with `python -m helpers.multihop build`")
    return 0


def _deadline(until: str | None):
    """Today's UTC HH:MM as a datetime, or None."""
    if not until:
        return None
    return datetime.now(timezone.utc).replace(hour=int(until[:2]), minute=int(until[3:5]), second=0, microsecond=0)


def writer_inputs(written_path: Path) -> tuple:
    """What choosing the writer's chains reads: the corpus, the index, the held-out passage ids and
    question texts, the rule-made candidate ids, and how many split questions (rule-made and
    written) end at each entity and (entity, relation), with the written questions already in
    `written_path` counted too, so the chains respect the split's repeat cap."""
    from collections import Counter

    from helpers.data import load_rows
    from helpers.multihop import written
    from helpers.search.local import LocalIndex

    data_dir = config.DATA_DIR
    corpus = build.load_corpus()
    rule_made = build.generate_candidates(corpus, data_dir / build.CANDIDATES_FILE)
    in_split = [(row["id"], row["metadata"]["chain"][-1], row["metadata"]["relation"])
                for row in load_rows(build.SPLIT, data_dir=data_dir)]
    ids = {i for i, _, _ in in_split}
    if written_path.exists():
        in_split += [(c["id"], c["chain"][-1], c["relation"]) for c in written.load_written(written_path)
                     if c["id"] not in ids]
    taken: Counter = Counter()
    for _, entity, relation in in_split:
        taken[entity] += 1
        taken[(entity, relation)] += 1
    held_ids, held_questions = build.held_out(data_dir)
    index = LocalIndex.load(data_dir / "index")
    # a written question's chain is not offered again
    used_ids = {c["id"] for c in rule_made} | {i for i, _, _ in in_split}
    return corpus, index, held_ids, build.verify.TextIndex(held_questions), used_ids, taken


def pool(seed: int, written_path: Path) -> int:
    """How many fresh promising chains the writer has, and what each filter leaves out."""
    from collections import Counter

    from tqdm.auto import tqdm

    from helpers.multihop import written

    corpus, index, held_ids, _, used_ids, taken = writer_inputs(written_path)
    removed: Counter = Counter()

    def keep(chain: dict) -> bool:
        reason = written.promising_failure(chain, corpus, index, held_ids)
        removed[reason or "kept"] += 1
        return reason is None

    with tqdm(total=len(corpus.passages), desc="seed passages", unit=" passages", mininterval=1.0) as bar:
        chains = list(written.fresh_chains(corpus, seed, used_ids, taken, keep=keep, removed=removed,
                                           on_seed=lambda: bar.update(1)))
    removed.pop("not_kept", None)  # counted by reason in keep
    removed.pop("kept", None)
    summary = {"fresh_promising_chains": len(chains), "seed_passages": len({c["passage_ids"][0] for c in chains}),
               "entities": len({c["entity"] for c in chains}),
               "by_hops": dict(sorted(Counter(len(c["passage_ids"]) for c in chains).items())),
               "by_relation": dict(Counter(c["relation"] for c in chains).most_common()),
               "from_a_later_passage": sum(corpus.lead(c["entity"]).passage_id != c["passage_ids"][-1] for c in chains),
               "removed": dict(removed.most_common())}
    print(json.dumps(summary, indent=2))
    return 0


def write(model: str, limit: int | None, batch: int, until: str | None, progress: Path, out_path: Path,
          seed: int, verdicts_path: Path = build.VERDICTS_FILE) -> int:
    from tqdm.auto import tqdm

    from helpers.engine import connect
    from helpers.multihop import written

    corpus, index, held_ids, held_text, used_ids, taken = writer_inputs(out_path)
    chains = written.fresh_chains(corpus, seed, used_ids, taken,
                                  keep=lambda chain: written.promising(chain, corpus, index, held_ids))
    chains = itertools.islice(chains, limit) if limit is not None else chains
    records = {r["id"]: r for r in read_jsonl(progress)}
    earlier = {c["id"]: c for c in written.load_written(out_path)} if out_path.exists() else {}
    client = connect("local").create_sampling_client(base_model=model)
    tokenizer = client.get_tokenizer()
    stop = _deadline(until)
    started = time.perf_counter()
    bar = tqdm(total=limit, desc="written questions", unit=" chains")
    while stop is None or datetime.now(timezone.utc) < stop:
        chunk = []  # the next batch of chains no earlier run has tried
        for chain in chains:
            bar.update(1)
            if chain["id"] not in records:
                chunk.append(chain)
                if len(chunk) == batch:
                    break
        if not chunk:
            break
        done = written.write_batch(chunk, corpus, index, held_ids, held_text, client, tokenizer, model,
                                   show_progress=False)
        for record in done:
            append_jsonl(progress, record)
        records.update((r["id"], r) for r in done)
        new = [dict(r["verdict"], model=model) for r in done if r["verdict"]]
        if new:
            # a file beside a window's results starts from the committed verdicts
            build.merge_verdicts(new, verdicts_path, start=build.VERDICTS_FILE)
        kept = {**earlier, **{r["id"]: dict(r["candidate"], license=build.LICENSE)
                              for r in records.values() if r["kept"]}}.values()
        write_jsonl(out_path, sorted(kept, key=lambda c: c["id"]))
        bar.set_postfix(kept=len(kept))
    bar.close()
    values = list(records.values())
    parsed = [r for r in values if r["question"]]
    summary = {"chains": len(values), "parsed": len(parsed),
               "rule_checks_passed": sum(all(v for k, v in r["checks"].items() if k != "solvers") for r in parsed),
               "kept": sum(r["kept"] for r in values), "seconds_this_run": round(time.perf_counter() - started, 1)}
    for check in [*build.verify.CHECKS[:-1], "asks_the_fact", "describes_the_chain"]:
        summary[f"fails_{check}"] = sum(1 for r in parsed if r["checks"].get(check) is False)
    print(json.dumps(summary))
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
    p_solve.add_argument("--batch", type=int, default=32, help="questions per batch; each batch's verdicts are saved")
    p_solve.add_argument("--until", default=None, help="UTC HH:MM after which no new batch starts")
    p_solve.add_argument("--again", action="store_true", help="judge questions that already have a verdict too")
    p_write = sub.add_parser("write", help="model-written bridge questions, checked and solved")
    p_write.add_argument("--model", default="qwen2.5-0.5b", choices=config.MODELS)
    p_write.add_argument("--limit", type=int, default=None, help="the first N fresh chains")
    p_write.add_argument("--batch", type=int, default=8)
    p_write.add_argument("--until", default=None, help="UTC HH:MM after which no new batch starts")
    p_write.add_argument("--progress", type=Path, default=None,
                         help="resumable record of every chain tried (default DATA_DIR/written_progress.jsonl)")
    p_write.add_argument("--out", type=Path, default=None)
    p_write.add_argument("--verdicts", type=Path, default=build.VERDICTS_FILE,
                         help="where the solvers' verdicts go (default: the committed verdicts.jsonl; a GPU window "
                         "writes beside its results and the file is copied back)")
    p_write.add_argument("--seed", type=int, default=build.SEED)
    p_pool = sub.add_parser("pool", help="count the writer's fresh promising chains and what each filter removes")
    p_pool.add_argument("--seed", type=int, default=build.SEED)
    p_pool.add_argument("--written", type=Path, default=None, help="the written questions already kept")
    p_show = sub.add_parser("show", help="print random verified questions as a Markdown table")
    p_show.add_argument("count", type=int, nargs="?", default=30)
    p_show.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "build":
        build.prepare_synthetic(force=args.force)
        return 0
    if args.command == "solve":
        return solve(args.model, args.limit, args.out, args.seed, args.batch, args.until, args.again)
    if args.command == "write":
        from helpers.multihop.written import WRITTEN_FILE

        progress = args.progress or config.DATA_DIR / "written_progress.jsonl"
        return write(args.model, args.limit, args.batch, args.until, progress, args.out or WRITTEN_FILE, args.seed,
                     args.verdicts)
    if args.command == "pool":
        from helpers.multihop.written import WRITTEN_FILE

        return pool(args.seed, args.written or WRITTEN_FILE)
    return show(args.count, args.seed)


if __name__ == "__main__":
    sys.exit(main())
