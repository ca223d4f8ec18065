"""The synthetic split: generate candidates from every seed passage, verify, write the rows.

``prepare_synthetic()`` is a set-up stage (CPU, about a minute on the course corpus):

1. seed passages in a seeded order, cut into shards; each shard's candidates are appended to
   ``DATA_DIR/synthetic_candidates.jsonl`` as one line, so an interrupted run resumes at the
   first shard it has not written and ends with the same file;
2. every check of ``helpers.multihop.verify`` on every candidate; a question is kept when it
   passes all of them, and the report counts how many each check fails and removes;
3. ``DATA_DIR/synthetic.jsonl`` in the course's row format (``load_examples("synthetic")``),
   ``DATA_DIR/synthetic_report.json`` with the counts.

Bridge questions written by a model (``helpers/multihop/written.jsonl``, see
``helpers.multihop.written``) join the rule-made candidates after them and meet the same checks;
then the questions about the second set of rules' facts (``questions.ties_from_seed``, generated
into ``DATA_DIR/synthetic_ties.jsonl`` the same resumable way), the third set's
(``questions.more_from_seed``, ``DATA_DIR/synthetic_more.jsonl``), the fourth set's
(``questions.kin_place_from_seed``, ``DATA_DIR/synthetic_kin_place.jsonl``), the fifth set's
(``questions.time_place_from_seed``, ``DATA_DIR/synthetic_time_place.jsonl``), the comparisons on the years all
five sets read (``questions.comparisons_from_seed``, ``DATA_DIR/synthetic_comparisons.jsonl``), and last the
seventh set's (``questions.names_members_from_seed``, ``DATA_DIR/synthetic_names_members.jsonl``), so that none
moves an earlier question out of the repeat cap.

The solvers' verdicts come from ``helpers/multihop/verdicts.jsonl`` (written by ``python -m helpers.multihop
solve``, on a GPU or on this CPU); a bridge of the first six sets without a verdict is kept and marked
``metadata.solver_checked = false``, a comparison or a question of the seventh set is not
(``verify.needs_verdict``).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from helpers import config
from helpers.data import load_rows
from helpers.multihop import verify
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.multihop.questions import (from_seed, kin_place_from_seed, more_from_seed, ties_from_seed,
                                       time_place_from_seed, comparisons_from_seed, names_members_from_seed)
from helpers.multihop.written import WRITTEN_FILE, load_written
from helpers.runs import read_jsonl, write_jsonl
from helpers.search.local import LocalIndex, read_corpus

SEED = 20251201
VERSION = 3
SPLIT = "synthetic"
DATA_SOURCE = "synthetic"
SHARD_SIZE = 2000  # seed passages per resumable shard
CANDIDATES_FILE = "synthetic_candidates.jsonl"
TIES_FILE = "synthetic_ties.jsonl"
MORE_FILE = "synthetic_more.jsonl"
KIN_PLACE_FILE = "synthetic_kin_place.jsonl"
TIME_PLACE_FILE = "synthetic_time_place.jsonl"
COMPARISONS_FILE = "synthetic_comparisons.jsonl"
NAMES_MEMBERS_FILE = "synthetic_names_members.jsonl"
# the sets of rules after the first and the written questions, in the split's order: (mark, cache file)
LATER_PASSES = (("ties", TIES_FILE), ("more", MORE_FILE), ("kin_place", KIN_PLACE_FILE),
                ("time_place", TIME_PLACE_FILE), ("comparisons", COMPARISONS_FILE),
                ("names_members", NAMES_MEMBERS_FILE))
REPORT_FILE = "synthetic_report.json"
VERDICTS_FILE = Path(__file__).resolve().parent / "verdicts.jsonl"
LICENSE = "CC BY-SA (derived from Wikipedia text)"
RULE_MODULES = ("facts.py", "more_facts.py", "kin_place.py", "time_place.py", "years.py", "names_members.py",
                "chains.py", "questions.py", "verify.py")


class Interrupted(RuntimeError):
    """Raised by ``generate_candidates(stop_after=...)``: a deliberate stop between shards."""


def load_corpus(shared: str | Path | None = None) -> Corpus:
    root = Path(shared) if shared else config.shared_dir()
    path = root / "data" / "corpus" / "wiki.jsonl.gz"
    if not path.exists():
        raise FileNotFoundError(f"corpus {path} not found: set COURSE_SHARED to the offline pack")
    return Corpus(passages_from_rows(read_corpus(path)))


def seed_order(corpus: Corpus, seed: int) -> list[str]:
    """Seed passage ids in a seeded order that does not depend on the corpus file's order."""
    ids = sorted(p.id for p in corpus.passages)
    random.Random(seed).shuffle(ids)
    return ids


def _read_shards(path: Path, header: dict) -> list[list[dict]]:
    """Shards already written under the same header; a torn last line is dropped."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        if not lines or json.loads(lines[0]) != header:
            return []
    except json.JSONDecodeError:
        return []
    shards = []
    for number, line in enumerate(lines[1:]):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        if record.get("shard") != number:
            break
        shards.append(record["candidates"])
    return shards


def generate_candidates(corpus: Corpus, path: str | Path, seed: int = SEED, shard_size: int = SHARD_SIZE,
                        show_progress: bool = True, stop_after: int | None = None, make=from_seed) -> list[dict]:
    """All candidates `make(corpus, passage, seed)` gives, resuming from the shards already in `path`
    (same seed, corpus and rules).

    `stop_after` ends the run with ``Interrupted`` after that many new shards (tests of resume).
    """
    path = Path(path)
    order = seed_order(corpus, seed)
    digest = hashlib.sha1("\n".join(order).encode()).hexdigest()[:16]
    header = {"version": VERSION, "seed": seed, "shard_size": shard_size, "passages": digest, "rules": make.__name__,
              "code": rules_digest()}
    shards = _read_shards(path, header)
    chunks = [order[i:i + shard_size] for i in range(0, len(order), shard_size)]
    # rewrite what was kept, so a torn or foreign file cannot linger below new shards
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(json.dumps(header) + "\n")
        for number, shard in enumerate(shards):
            handle.write(json.dumps({"shard": number, "candidates": shard}, ensure_ascii=False) + "\n")
    tmp.replace(path)
    bar = tqdm(total=len(order), initial=min(len(shards) * shard_size, len(order)), unit=" passages",
               desc=f"multi-hop chains ({make.__name__})", disable=not show_progress, mininterval=1.0)
    written = 0
    with path.open("a", encoding="utf-8") as handle:
        for number in range(len(shards), len(chunks)):
            if stop_after is not None and written >= stop_after:
                bar.close()
                raise Interrupted(f"stopped after {written} shards")
            shard = [c.to_dict() for pid in chunks[number] for c in make(corpus, corpus.by_id[pid], seed)]
            handle.write(json.dumps({"shard": number, "candidates": shard}, ensure_ascii=False) + "\n")
            handle.flush()
            shards.append(shard)
            written += 1
            bar.update(len(chunks[number]))
    bar.close()
    return [c for shard in shards for c in shard]


def load_verdicts(path: str | Path = VERDICTS_FILE) -> dict[str, dict]:
    return {record["id"]: record for record in read_jsonl(path)}


VERDICT_FIELDS = ("id", "with_all", "with_first", "pass", "model")  # what the verdicts file keeps of a verdict


def merge_verdicts(new: list[dict], path: Path, start: Path | None = None) -> None:
    """Add `new` verdicts to those recorded in `path` (in `start` while `path` does not exist yet)
    and write them all back: a new verdict for an id replaces the old one."""
    from helpers.multihop.solvers import write_verdicts

    recorded = load_verdicts(path if path.exists() or start is None else start)
    recorded.update((v["id"], {k: v[k] for k in VERDICT_FIELDS}) for v in new)
    write_verdicts(list(recorded.values()), path)


def held_out(data_dir: Path) -> tuple[set[str], list[str]]:
    """Gold passage ids and question texts of the validation and test splits."""
    ids: set[str] = set()
    questions: list[str] = []
    for split in ("validation", "test"):
        for row in load_rows(split, data_dir=data_dir):
            ids.update((row.get("metadata") or {}).get("gold_passage_ids") or [])
            questions.append(row["question"])
    return ids, questions


def check_all(candidates: list[dict], corpus: Corpus, index, held_ids: set[str], held_questions: list[str],
              verdicts: dict[str, dict], show_progress: bool = True, judged_only: bool = True) -> list[dict[str, bool]]:
    """Every check on every candidate (the repeat cap counts among those passing the rest); `judged_only` off:
    a comparison (``verify.needs_verdict``) without a verdict counts as passing (what to judge first)."""
    texts_index = verify.TextIndex(held_questions)
    results = []
    for candidate in tqdm(candidates, desc="verify", unit=" questions", disable=not show_progress,
                          mininterval=1.0):
        texts = corpus.texts(candidate["passage_ids"])
        results.append({**verify.rule_checks(candidate, texts, index, held_ids, texts_index),
                        "solvers": verify.solvers(candidate, verdicts, judged_only)})
    passing = [c for c, r in zip(candidates, results) if all(r.values())]
    kept = iter(verify.apply_repeats(passing))
    for result in results:
        result["repeats"] = next(kept) if all(result.values()) else True
    return results


def to_row(candidate: dict, verdicts: dict[str, dict]) -> dict[str, Any]:
    """A verified candidate in the course's row format."""
    return {
        "id": candidate["id"],
        "question": candidate["question"],
        "answers": candidate["answers"],
        "data_source": DATA_SOURCE,
        "metadata": {
            "dataset": DATA_SOURCE,
            "kind": candidate["kind"],
            "hops": len(candidate["chain"]),
            "gold_passage_ids": candidate["passage_ids"],
            "chain": candidate["chain"],
            "descriptions": candidate["descriptions"],
            "relation": candidate["relation"],
            "solver_checked": candidate["id"] in verdicts,
            "license": LICENSE,
            **({"writer": candidate["writer"]} if candidate.get("writer") else {}),
            **{mark: True for mark, _ in LATER_PASSES if candidate.get(mark)},
        },
    }


def summarise(candidates: list[dict], results: list[dict[str, bool]], rows: list[dict]) -> dict[str, Any]:
    n = len(candidates)
    by_check = {}
    alive = [True] * n
    for check in verify.CHECKS:
        failed = sum(not r[check] for r in results)
        removed = sum(1 for i, r in enumerate(results) if alive[i] and not r[check])
        alive = [a and r[check] for a, r in zip(alive, results)]
        by_check[check] = {"failed": failed, "failed_share": round(failed / n, 4) if n else 0.0,
                           "removed": removed, "removed_share": round(removed / n, 4) if n else 0.0}
    one_search = sum(not r["needs_second_search"] for r in results)
    return {
        "candidates": n,
        "kept": len(rows),
        "checks": by_check,
        # how often one raw-question search already holds every chain passage, before the check
        "bm25_top3_all_chain_share_of_candidates": round(one_search / n, 4) if n else 0.0,
        "kinds": dict(Counter(r["metadata"]["kind"] for r in rows)),
        "hops": {str(k): v for k, v in sorted(Counter(r["metadata"]["hops"] for r in rows).items())},
        "relations": dict(Counter(r["metadata"]["relation"] for r in rows).most_common()),
        "solver_checked": sum(r["metadata"]["solver_checked"] for r in rows),
        "written_candidates": sum(bool(c.get("writer")) for c in candidates),
        "written_kept": sum(bool(r["metadata"].get("writer")) for r in rows),
        **{f"{mark}_{what}": count for mark, _ in LATER_PASSES
           for what, count in (("candidates", sum(bool(c.get(mark)) for c in candidates)),
                               ("kept", sum(bool(r["metadata"].get(mark)) for r in rows)))},
    }


def all_candidates(corpus: Corpus, out: Path, seed: int = SEED, written_path: str | Path = WRITTEN_FILE,
                   show_progress: bool = True) -> list[dict]:
    """Every candidate in the order the split applies its repeat cap: the first set of rules', the
    written ones, the second set's (marked ``ties``), the third set's (marked ``more``), the fourth
    set's (marked ``kin_place``), the fifth set's (marked ``time_place``), the comparisons on every
    set's years (marked ``comparisons``; a comparison's ``years`` field holds its two years), then the
    seventh set's (marked ``names_members``); an id met earlier is not repeated."""
    candidates = generate_candidates(corpus, out / CANDIDATES_FILE, seed, show_progress=show_progress)
    seen = {c["id"] for c in candidates}
    # a written question is checked against the passages it was written from: only where they exist
    for candidate in load_written(written_path):
        if candidate["id"] not in seen and all(pid in corpus.by_id for pid in candidate["passage_ids"]):
            candidates.append(candidate)
            seen.add(candidate["id"])
    # each later set of rules' questions after the earlier ones', marked with its name; `<mark>_from_seed` is
    # looked up when the split is built (a test can switch a pass off)
    for mark, cache in LATER_PASSES:
        made = generate_candidates(corpus, out / cache, seed, show_progress=show_progress,
                                   make=globals()[f"{mark}_from_seed"])
        if mark == "comparisons":
            # within one passage (two or three searches) before across two (four): the reader compares the
            # first kind right more often, so the repeat cap gives them the room first
            made = [c for c in made if len(c["chain"]) < 4] + [c for c in made if len(c["chain"]) == 4]
        for candidate in made:
            if candidate["id"] not in seen:
                candidates.append(dict(candidate, **{mark: True}))
                seen.add(candidate["id"])
    return candidates


def _digest(*paths: Path) -> str:
    sha = hashlib.sha1()
    for path in paths:
        sha.update(path.read_bytes() if path.exists() else b"")
    return sha.hexdigest()[:16]


def rules_digest() -> str:
    """A digest of the modules that read facts, make questions and check them: a changed rule
    regenerates the cached candidates and the split rather than reusing files the old one made."""
    here = Path(__file__).resolve().parent
    return _digest(*(here / name for name in RULE_MODULES))


def _fingerprint(seed: int, verdicts_path: Path, written_path: Path) -> dict:
    return {"version": VERSION, "seed": seed, "verdicts": _digest(verdicts_path), "written": _digest(written_path),
            "rules": rules_digest()}


def prepare_synthetic(out_dir: str | Path | None = None, shared: str | Path | None = None, seed: int = SEED,
                      force: bool = False, show_progress: bool = True, index=None,
                      verdicts_path: str | Path = VERDICTS_FILE, corpus: Corpus | None = None,
                      written_path: str | Path = WRITTEN_FILE) -> dict[str, Any]:
    """Build DATA_DIR/synthetic.jsonl (idempotent; resumes an interrupted generation)."""
    out = Path(out_dir) if out_dir else config.DATA_DIR
    verdicts_path, written_path = Path(verdicts_path), Path(written_path)
    report_path = out / REPORT_FILE
    fingerprint = _fingerprint(seed, verdicts_path, written_path)
    if report_path.exists() and (out / f"{SPLIT}.jsonl").exists() and not force:
        report = json.loads(report_path.read_text())
        if report.get("fingerprint") == fingerprint:
            print(f"    synthetic split already built in {out}: {report['kept']} questions")
            return report
    held_ids, held_questions = held_out(out)
    corpus = corpus or load_corpus(shared)
    index = index or LocalIndex.load(out / "index")
    candidates = all_candidates(corpus, out, seed, written_path, show_progress)
    verdicts = load_verdicts(verdicts_path)
    results = check_all(candidates, corpus, index, held_ids, held_questions, verdicts, show_progress)
    rows = [to_row(c, verdicts) for c, r in zip(candidates, results) if all(r.values())]
    write_jsonl(out / f"{SPLIT}.jsonl", rows)
    report = {"fingerprint": fingerprint, **summarise(candidates, results, rows)}
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"    {report['kept']} of {report['candidates']} candidates kept -> {out / f'{SPLIT}.jsonl'}")
    for check, counts in report["checks"].items():
        print(f"    {check:26s} fails {counts['failed_share']:6.1%}  removes {counts['removed']}")
    return report
