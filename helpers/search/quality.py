"""How good is the environment? Retrieval quality of an index on the dev questions.

Two numbers per dataset and k:
- answer@k: some gold answer occurs (normalised: lower case, no punctuation or articles) in the
  top-k passages. This bounds what an agent can read with one search of the raw question.
- recall@k: the share of gold passages (ids, or titles for fullwiki) found in the top k; for
  HotpotQA also all@k, both supporting passages found, which one query rarely achieves.

    python -m helpers.search.quality            # prints the table on the offline pack
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from tqdm.auto import tqdm

from helpers import config
from helpers.data import read_flashrag_jsonl
from helpers.reward import contains_answer
from helpers.search.local import get_index


def answer_in(passages_text: list[str], answers: list[str]) -> bool:
    """Some gold answer occurs in the passages, matched as the reward matches answers."""
    return contains_answer(" ".join(passages_text), answers)


def retrieval_quality(rows: list[dict], index, ks: tuple[int, ...] = (1, 3, 5, 10),
                      show_progress: bool = True) -> dict[str, dict[str, float]]:
    """Per data_source: n, answer@k, recall@k (and all@k when there are several gold passages).

    ``rows`` are course/FlashRAG rows with ``question``, ``answers`` and optional
    ``metadata.gold_passage_ids`` / ``metadata.gold_titles``; ``index`` is a ``LocalIndex``.
    """
    depth = max(ks)
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in tqdm(rows, desc="retrieval quality", disable=not show_progress):
        source = row.get("data_source", "unknown")
        hits = index.search(row["question"], k=depth)
        meta = row.get("metadata") or {}
        gold_ids = set(meta.get("gold_passage_ids") or [])
        gold_titles = set(meta.get("gold_titles") or [])
        bucket = sums[source]
        bucket["n"] += 1
        for k in ks:
            top = hits[:k]
            bucket[f"answer@{k}"] += answer_in([f"{p.title} {p.text}" for p in top], row["answers"])
            if gold_ids or gold_titles:
                found = ({p.id for p in top} & gold_ids) if gold_ids else ({p.title for p in top} & gold_titles)
                gold = gold_ids or gold_titles
                bucket[f"recall@{k}"] += len(found) / len(gold)
                if len(gold) > 1:
                    bucket[f"all@{k}"] += len(found) == len(gold)
    return {source: {key: (value if key == "n" else value / bucket["n"]) for key, value in bucket.items()}
            for source, bucket in sums.items()}


def format_quality(report: dict[str, dict[str, float]]) -> str:
    keys = sorted({k for m in report.values() for k in m if k != "n"},
                  key=lambda k: (k.split("@")[0], int(k.split("@")[1])))
    lines = ["| data_source | n | " + " | ".join(keys) + " |", "|---|---:|" + "---:|" * len(keys)]
    for source, metrics in report.items():
        cells = [f"{100 * metrics[k]:.1f} %" if k in metrics else "–" for k in keys]
        lines.append(f"| {source} | {int(metrics['n'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def dev_rows(shared: str | Path | None = None) -> list[dict]:
    """All questions of the offline pack with their gold passages (the 'dev' questions)."""
    questions = Path(shared or config.shared_dir()) / "data" / "questions"
    rows = []
    for name, source in [("nq_dev", "nq"), ("hotpotqa_dev", "hotpotqa"),
                         ("hotpotqa_fullwiki_dev", "hotpotqa_fullwiki")]:
        rows.extend(read_flashrag_jsonl(questions / f"{name}.jsonl", data_source=source).rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.search.quality")
    parser.add_argument("--ks", default="1,3,5,10")
    args = parser.parse_args(argv)
    report = retrieval_quality(dev_rows(), get_index(), ks=tuple(int(k) for k in args.ks.split(",")))
    print(format_quality(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
