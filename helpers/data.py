"""NQ + HotpotQA questions as SearchExample rows.

Every reader below turns one published format into the course's row format

    {"id": "...", "question": "...", "answers": ["..."], "data_source": "nq"}

(plus an optional "metadata" dict the retrieval report uses). Rows without a question or
without any non-empty answer are dropped and counted, never silently.

Formats read:
- FlashRAG / Search-R1 QA JSONL: ``{"id", "question", "golden_answers": [...], "metadata"}``
  (the format of ``../shared/data/questions/``)                       -> ``read_flashrag_jsonl``
- official NQ-open JSONL: ``{"question", "answer": [...]}``          -> ``read_nq_open_jsonl``
- official HotpotQA JSON (distractor and fullwiki): a list of
  ``{"_id", "question", "answer", "context": [[title, [sentences]]], ...}`` -> ``read_hotpotqa_json``
- Search-R1 training parquet (``scripts/data_process/nq_search.py``): ``data_source``,
  ``prompt`` (chat list), ``reward_model.ground_truth.target``, ``extra_info.index``,
  usually with the original ``id`` / ``question`` / ``golden_answers`` kept -> ``read_search_r1_parquet``

Splits (``prepare_data``): per dataset, sorted by id, shuffled with a fixed seed, then cut into
test / validation / train; each split file then mixes the datasets in a fixed order, so that
``load_examples("train", limit=8)`` takes both:

    nq (2,355)                test 500 · validation 200 · train 1,655
    hotpotqa distractor (400) test 100 · validation  50 · train   250
    hotpotqa fullwiki (458)   split "fullwiki" only, data_source "hotpotqa_fullwiki"

Every distractor question has both supporting passages in the offline corpus, so a reward of 0
on them is the policy's fault; fullwiki questions were selected without that guarantee (their
gold passages are often missing), which makes them a hard held-out set and a noisy training
signal. They are never trained on; ``metadata.answer_in_corpus`` says whether some answer string
occurs anywhere in the corpus (386 of 458: present is not the same as retrievable).
A summary with the sizes and dropped counts is written to ``DATA_DIR/splits.json``.

Getting the data yourself (``python -m helpers.data download --out DIR``), official files:
- NQ-open dev: https://raw.githubusercontent.com/google-research-datasets/natural-questions/master/nq_open/NQ-open.dev.jsonl
- HotpotQA dev distractor: http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json
- HotpotQA dev fullwiki: http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_fullwiki_v1.json
It writes ``DIR/data/questions/*.jsonl`` in the FlashRAG format and ``DIR/data/corpus/wiki.jsonl.gz``
built from the HotpotQA context paragraphs (Search-R1 corpus format). The full Search-R1 corpus
(wiki-18, 21 M passages, ~13 GB) is ``PeterJinGo/wiki-18-corpus`` on the Hugging Face hub;
the Search-R1 training parquet is ``PeterJinGo/nq_hotpotqa_train``. Then run
``COURSE_SHARED=DIR make setup``. Licences: NQ CC BY-SA 3.0, HotpotQA CC BY-SA 4.0,
Wikipedia text CC BY-SA: keep the attributions when you redistribute.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import config
from helpers.reward import contains_answer, normalize_answer
from helpers.runs import write_jsonl

SEED = 20250301
SPLITS = ("train", "validation", "test")
EXTRA_SPLITS = ("fullwiki",)
# built by their own set-up stage after the search index (helpers.multihop: "synthetic")
GENERATED_SPLITS = ("synthetic",)
# (test, validation) sizes per dataset; the rest is train.
SPLIT_SIZES = {"nq": (500, 200), "hotpotqa": (100, 50)}
SUMMARY_FILE = "splits.json"

NQ_OPEN_DEV_URL = (
    "https://raw.githubusercontent.com/google-research-datasets/natural-questions/"
    "master/nq_open/NQ-open.dev.jsonl"
)
HOTPOTQA_DISTRACTOR_URL = "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json"
HOTPOTQA_FULLWIKI_URL = "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_fullwiki_v1.json"


@dataclass(frozen=True)
class SearchExample:
    id: str
    question: str
    answers: list[str]
    data_source: str
    # The data row's metadata (e.g. "gold_passage_ids"): for rewards and analysis, never a prompt.
    metadata: dict = field(default_factory=dict, compare=False)


@dataclass
class Loaded:
    """Rows of one file after normalisation, and how many were dropped."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0


class DataNotPrepared(config.SetupRequired):
    """A split that the set-up prepares is missing."""


# ---------------------------------------------------------------- normalisation


def _answers(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    elif hasattr(value, "tolist"):  # numpy arrays from parquet
        value = value.tolist()
    out: list[str] = []
    for answer in value:
        text = str(answer).strip() if answer is not None else ""
        if text and text not in out:
            out.append(text)
    return out


def normalize_row(
    *, id: Any, question: Any, answers: Any, data_source: str, metadata: dict | None = None
) -> dict[str, Any] | None:
    """The course row, or None when the question or every answer is empty."""
    text = str(question or "").strip()
    clean = _answers(answers)
    if not text or not clean:
        return None
    row = {"id": str(id or ""), "question": text, "answers": clean, "data_source": data_source}
    if metadata:
        row["metadata"] = metadata
    return row


def _collect(candidates: Iterable[dict[str, Any] | None]) -> Loaded:
    loaded = Loaded()
    for row in candidates:
        if row is None:
            loaded.dropped += 1
        else:
            loaded.rows.append(row)
    return loaded


def _open_text(path: Path):
    path = Path(path)
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with _open_text(path) as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


# ---------------------------------------------------------------- readers


def read_flashrag_jsonl(path: str | Path, data_source: str | None = None) -> Loaded:
    """FlashRAG / Search-R1 QA JSONL (``golden_answers``); data_source from metadata.dataset."""

    def rows():
        for raw in _jsonl(Path(path)):
            meta = dict(raw.get("metadata") or {})
            source = data_source or raw.get("data_source") or meta.get("dataset") or "unknown"
            yield normalize_row(
                id=raw.get("id"),
                question=raw.get("question"),
                answers=raw.get("golden_answers", raw.get("answers")),
                data_source=str(source),
                metadata=meta or None,
            )

    return _collect(rows())


def read_nq_open_jsonl(path: str | Path, data_source: str = "nq", id_prefix: str = "nq") -> Loaded:
    """Official NQ-open JSONL: ``{"question", "answer": [...]}`` (no ids: numbered in file order)."""
    return _collect(
        normalize_row(id=f"{id_prefix}-{i}", question=raw.get("question"),
                      answers=raw.get("answer"), data_source=data_source)
        for i, raw in enumerate(_jsonl(Path(path)))
    )


def read_hotpotqa_json(path: str | Path, setting: str = "distractor") -> Loaded:
    """Official HotpotQA JSON (a list). ``setting`` 'fullwiki' marks rows ``hotpotqa_fullwiki``."""
    if setting not in {"distractor", "fullwiki"}:
        raise ValueError(f"setting must be 'distractor' or 'fullwiki', got {setting!r}")
    with _open_text(Path(path)) as handle:
        records = json.load(handle)
    source = "hotpotqa" if setting == "distractor" else "hotpotqa_fullwiki"

    def rows():
        for raw in records:
            gold = sorted({title for title, _ in raw.get("supporting_facts") or []})
            meta = {"dataset": "hotpotqa", "setting": setting}
            if raw.get("type"):
                meta["type"] = raw["type"]
            if gold:
                meta["gold_titles"] = gold
            yield normalize_row(id=raw.get("_id"), question=raw.get("question"),
                                answers=raw.get("answer"), data_source=source, metadata=meta)

    return _collect(rows())


def hotpotqa_passages(path: str | Path) -> Iterator[dict[str, str]]:
    """Context paragraphs of an official HotpotQA file as Search-R1 corpus rows."""
    with _open_text(Path(path)) as handle:
        records = json.load(handle)
    for raw in records:
        for title, sentences in raw.get("context") or []:
            text = "".join(sentences).strip()
            if text:
                yield corpus_row(title, text)


def corpus_row(title: str, text: str) -> dict[str, str]:
    """``{"id", "contents": '"Title"\\ntext'}``; the id hashes title and text like the pack's."""
    digest = hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:12]
    return {"id": f"w{digest}", "contents": f'"{title}"\n{text}'}


def _question_from_prompt(prompt: Any) -> str:
    """Search-R1 prompts end with 'Question: <q>\\n'; fall back to the whole user message."""
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    content = ""
    for message in prompt or []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = str(message.get("content") or "")
    marker = content.rfind("Question:")
    return content[marker + len("Question:"):].strip() if marker >= 0 else content.strip()


def read_search_r1_parquet(path: str | Path) -> Loaded:
    """Search-R1 training parquet (verl format) as course rows."""
    import pyarrow.parquet as pq

    table = pq.read_table(path).to_pylist()

    def rows():
        for i, raw in enumerate(table):
            source = str(raw.get("data_source") or "unknown")
            truth = ((raw.get("reward_model") or {}).get("ground_truth") or {})
            answers = truth.get("target") if isinstance(truth, dict) else None
            if answers is None:
                answers = raw.get("golden_answers")
            question = raw.get("question") or _question_from_prompt(raw.get("prompt"))
            index = (raw.get("extra_info") or {}).get("index", i)
            yield normalize_row(id=raw.get("id") or f"{source}-{index}", question=question,
                                answers=answers, data_source=source)

    return _collect(rows())


# ---------------------------------------------------------------- splits


def split_rows(rows: list[dict], test: int, validation: int, seed: int = SEED) -> dict[str, list[dict]]:
    """Shuffle (seeded, independent of input order) and cut into test / validation / train."""
    if test + validation > len(rows):
        raise ValueError(f"cannot take {test}+{validation} held-out rows from {len(rows)}")
    ordered = sorted(rows, key=lambda row: row["id"])
    random.Random(seed).shuffle(ordered)
    return {
        "test": ordered[:test],
        "validation": ordered[test:test + validation],
        "train": ordered[test + validation:],
    }


def answers_in_corpus(rows: list[dict], corpus_path: Path) -> list[bool]:
    """Whether some answer occurs in some passage (normalised, whole words, as the reward compares)."""
    with _open_text(corpus_path) as handle:
        text = " \n ".join(normalize_answer(json.loads(line)["contents"]) for line in handle if line.strip())
    return [contains_answer(text, row["answers"], normalized=True) for row in rows]


def prepare_data(shared: str | Path | None = None, out_dir: str | Path | None = None,
                 force: bool = False, sizes: dict[str, tuple[int, int]] | None = None) -> dict[str, Any]:
    """Build DATA_DIR/{train,validation,test,fullwiki}.jsonl from the offline pack. Idempotent.

    ``sizes`` maps dataset -> (test, validation) rows; the rest of each dataset is train.
    """
    sizes_wanted = {k: list(v) for k, v in dict(SPLIT_SIZES, **(sizes or {})).items()}
    source_dir = Path(shared) if shared else config.shared_dir()
    questions = source_dir / "data" / "questions"
    out = Path(out_dir) if out_dir else config.DATA_DIR
    summary_path = out / SUMMARY_FILE
    if summary_path.exists() and not force:
        summary = json.loads(summary_path.read_text())
        if summary.get("seed") == SEED and summary.get("split_sizes") == sizes_wanted and all((out / f"{s}.jsonl").exists() for s in SPLITS + EXTRA_SPLITS):
            print(f"    data already prepared in {out}: {summary['sizes']}")
            return summary
    files = {
        "nq": questions / "nq_dev.jsonl",
        "hotpotqa": questions / "hotpotqa_dev.jsonl",
        "hotpotqa_fullwiki": questions / "hotpotqa_fullwiki_dev.jsonl",
    }
    missing = [str(p) for p in files.values() if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"question files missing: {missing}. Set COURSE_SHARED to the offline pack, or run "
            "`python -m helpers.data download --out DIR` and then `COURSE_SHARED=DIR make setup`."
        )
    out.mkdir(parents=True, exist_ok=True)
    splits: dict[str, list[dict]] = {name: [] for name in SPLITS + EXTRA_SPLITS}
    sizes: dict[str, dict[str, int]] = {}
    dropped: dict[str, int] = {}
    for dataset in ("nq", "hotpotqa"):
        loaded = read_flashrag_jsonl(files[dataset], data_source=dataset)
        dropped[dataset] = loaded.dropped
        test, validation = sizes_wanted[dataset]
        parts = split_rows(loaded.rows, test, validation)
        sizes[dataset] = {name: len(rows) for name, rows in parts.items()}
        for name, rows in parts.items():
            splits[name].extend(rows)
    fullwiki = read_flashrag_jsonl(files["hotpotqa_fullwiki"], data_source="hotpotqa_fullwiki")
    dropped["hotpotqa_fullwiki"] = fullwiki.dropped
    corpus = source_dir / "data" / "corpus" / "wiki.jsonl.gz"
    if corpus.exists():
        for row, found in zip(fullwiki.rows, answers_in_corpus(fullwiki.rows, corpus)):
            row.setdefault("metadata", {})["answer_in_corpus"] = found
    splits["fullwiki"] = fullwiki.rows
    # mix the datasets so that `limit=` takes both, in a fixed order
    for name in SPLITS:
        random.Random(f"{SEED}-{name}").shuffle(splits[name])
    sizes["hotpotqa_fullwiki"] = {"fullwiki": len(fullwiki.rows)}
    for name, rows in splits.items():
        write_jsonl(out / f"{name}.jsonl", rows)
    summary = {
        "seed": SEED,
        "split_sizes": sizes_wanted,
        "sizes": sizes,
        "totals": {name: len(rows) for name, rows in splits.items()},
        "dropped": dropped,
        "fullwiki_answer_in_corpus": sum(
            bool(r.get("metadata", {}).get("answer_in_corpus")) for r in fullwiki.rows),
    }
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"    splits written to {out} (fullwiki: {summary['fullwiki_answer_in_corpus']} of "
          f"{len(fullwiki.rows)} answers occur in the corpus)")
    for dataset, parts in sizes.items():
        print(f"    {dataset:18s} " + ", ".join(f"{k} {v}" for k, v in parts.items())
              + f" (dropped {dropped[dataset]})")
    return summary


def load_examples(split: str = "train", data_source: str | None = None,
                  limit: int | None = None, data_dir: str | Path | None = None,
                  skip: int = 0) -> list[SearchExample]:
    """Questions of one split as SearchExample, optionally one data_source: `limit` after the first `skip`.

    `skip` keeps stages apart: the SFT teacher scripts the first N train questions, GRPO starts
    after them, so the policy is not rewarded on questions it has just imitated.
    """
    path = _split_path(split, data_dir)
    examples = []
    for raw in _jsonl(path):
        if data_source is not None and raw["data_source"] != data_source:
            continue
        examples.append(SearchExample(id=raw["id"], question=raw["question"], answers=list(raw["answers"]),
                                      data_source=raw["data_source"], metadata=dict(raw.get("metadata") or {})))
        if limit is not None and len(examples) >= skip + limit:
            break
    return examples[skip:]


def load_rows(split: str, data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Raw rows with metadata (gold passage ids, answer_in_corpus) for analysis."""
    return list(_jsonl(_split_path(split, data_dir)))


def _split_path(split: str, data_dir: str | Path | None) -> Path:
    known = SPLITS + EXTRA_SPLITS + GENERATED_SPLITS
    if split not in known:
        raise ValueError(f"split must be one of {known}, got {split!r}")
    path = Path(data_dir or config.DATA_DIR) / f"{split}.jsonl"
    if not path.exists():
        raise DataNotPrepared(f"{path} not found: run {config.SETUP_COMMAND} first.")
    return path


# ---------------------------------------------------------------- download


def _fetch(url: str, dest: Path, timeout: float = 60.0) -> Path:
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(url, headers={"User-Agent": "search-r1-course/0.1 (data download)"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, dest.with_suffix(".part").open("wb") as fh:
            while chunk := response.read(1 << 20):
                fh.write(chunk)
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError(
            f"could not download {url} ({exc}). This needs internet access; without it, use the "
            f"offline pack (COURSE_SHARED) or copy the file to {dest} by hand and run again."
        ) from exc
    dest.with_suffix(".part").replace(dest)
    return dest


def download(out: str | Path) -> Path:
    """Fetch the official dev files and build an offline pack under ``out/data``."""
    root = Path(out) / "data"
    raw = root / "raw"
    nq = read_nq_open_jsonl(_fetch(NQ_OPEN_DEV_URL, raw / "NQ-open.dev.jsonl"), id_prefix="nq-dev")
    distractor_path = _fetch(HOTPOTQA_DISTRACTOR_URL, raw / "hotpot_dev_distractor_v1.json")
    fullwiki_path = _fetch(HOTPOTQA_FULLWIKI_URL, raw / "hotpot_dev_fullwiki_v1.json")
    distractor = read_hotpotqa_json(distractor_path, "distractor")
    fullwiki = read_hotpotqa_json(fullwiki_path, "fullwiki")
    questions = root / "questions"
    questions.mkdir(parents=True, exist_ok=True)
    for name, loaded in [("nq_dev", nq), ("hotpotqa_dev", distractor), ("hotpotqa_fullwiki_dev", fullwiki)]:
        write_jsonl(questions / f"{name}.jsonl", [
            {"id": r["id"], "question": r["question"], "golden_answers": r["answers"],
             "metadata": {"dataset": "nq" if name == "nq_dev" else "hotpotqa", "split": "dev",
                          **r.get("metadata", {})}}
            for r in loaded.rows])
        print(f"{name}: {len(loaded.rows)} rows (dropped {loaded.dropped})")
    corpus = root / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    seen: dict[str, dict] = {}
    for path in (distractor_path, fullwiki_path):
        for row in hotpotqa_passages(path):
            seen.setdefault(row["id"], row)
    with gzip.open(corpus / "wiki.jsonl.gz", "wt", encoding="utf-8", errors="backslashreplace") as handle:
        for key in sorted(seen):
            handle.write(json.dumps(seen[key], ensure_ascii=False) + "\n")
    print(f"corpus: {len(seen)} passages from the HotpotQA contexts -> {corpus / 'wiki.jsonl.gz'}")
    print(f"now run: COURSE_SHARED={Path(out).resolve()} make setup")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.data")
    sub = parser.add_subparsers(dest="command", required=True)
    p_prep = sub.add_parser("prepare", help="build data/ splits from the offline pack")
    p_prep.add_argument("--force", action="store_true")
    p_down = sub.add_parser("download", help="fetch the official dev files and build a pack")
    p_down.add_argument("--out", required=True, help="folder to write DIR/data/... into")
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            prepare_data(force=args.force)
        else:
            download(args.out)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
