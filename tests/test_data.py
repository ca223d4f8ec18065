"""Readers, splits and loading of the question data (helpers.data)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pytest

from helpers import data

FIXTURES = Path(__file__).parent / "fixtures" / "search"


def test_flashrag_reader_keeps_metadata_and_counts_dropped_rows():
    loaded = data.read_flashrag_jsonl(FIXTURES / "flashrag_qa.jsonl")
    assert [r["id"] for r in loaded.rows] == ["nq-dev-0", "nq-dev-1", "hp-1"]
    assert loaded.dropped == 2  # empty question, no answers
    first, second, hotpot = loaded.rows
    assert first["data_source"] == "nq" and hotpot["data_source"] == "hotpotqa"
    assert second["question"] == "what is the capital of france"
    assert second["answers"] == ["Paris"]  # stripped, de-duplicated, empties removed
    assert hotpot["metadata"]["gold_passage_ids"] == ["wfix00000002", "wfix00000003"]


def test_flashrag_reader_data_source_override():
    loaded = data.read_flashrag_jsonl(FIXTURES / "flashrag_qa.jsonl", data_source="custom")
    assert {r["data_source"] for r in loaded.rows} == {"custom"}


def test_nq_open_reader_numbers_rows_and_drops_empty():
    loaded = data.read_nq_open_jsonl(FIXTURES / "nq_open.jsonl")
    assert loaded.dropped == 2
    assert loaded.rows[0] == {"id": "nq-0", "question": "when was the eiffel tower built",
                              "answers": ["1887", "1889"], "data_source": "nq"}
    assert loaded.rows[1]["id"] == "nq-1"


def test_hotpotqa_reader_distractor_and_fullwiki():
    distractor = data.read_hotpotqa_json(FIXTURES / "hotpotqa_distractor.json", "distractor")
    assert distractor.dropped == 1
    assert [r["data_source"] for r in distractor.rows] == ["hotpotqa", "hotpotqa"]
    assert distractor.rows[0]["answers"] == ["yes"]
    assert distractor.rows[0]["metadata"]["gold_titles"] == ["Ed Wood", "Scott Derrickson"]
    fullwiki = data.read_hotpotqa_json(FIXTURES / "hotpotqa_fullwiki.json", "fullwiki")
    assert fullwiki.rows[0]["data_source"] == "hotpotqa_fullwiki"
    assert fullwiki.rows[0]["metadata"]["gold_titles"] == ["Fall Out Boy", "Folie à Deux (album)"]
    with pytest.raises(ValueError):
        data.read_hotpotqa_json(FIXTURES / "hotpotqa_fullwiki.json", "dev")


def test_hotpotqa_context_becomes_corpus_passages():
    passages = list(data.hotpotqa_passages(FIXTURES / "hotpotqa_distractor.json"))
    assert len(passages) == 4  # the empty paragraph is skipped
    assert passages[0]["contents"].startswith('"Scott Derrickson"\nScott Derrickson (born')
    assert passages[0]["contents"].endswith("He lives in Los Angeles.")
    assert all(p["id"].startswith("w") and len(p["id"]) == 13 for p in passages)
    assert data.corpus_row("T", "x") == data.corpus_row("T", "x") != data.corpus_row("T", "y")


def test_search_r1_parquet_reader(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    prefix = "Answer the given question. ... Question: "
    rows = [
        # as written by Search-R1's nq_search.py: original columns kept beside the verl ones
        {"id": "train_0", "question": "total number of death row inmates in the us?",
         "golden_answers": ["2,718"], "data_source": "nq",
         "prompt": [{"role": "user", "content": prefix + "total number of death row inmates in the us?\n"}],
         "ability": "fact-reasoning",
         "reward_model": {"style": "rule", "ground_truth": {"target": ["2,718"]}},
         "extra_info": {"split": "train", "index": 0}},
        # only the verl columns: question recovered from the prompt
        {"id": None, "question": None, "golden_answers": None, "data_source": "hotpotqa",
         "prompt": [{"role": "user", "content": prefix + "Which band formed in Wilmette?\n"}],
         "ability": "fact-reasoning",
         "reward_model": {"style": "rule", "ground_truth": {"target": ["Fall Out Boy", "FOB"]}},
         "extra_info": {"split": "train", "index": 7}},
        {"id": "train_2", "question": "no answer here?", "golden_answers": [], "data_source": "nq",
         "prompt": [{"role": "user", "content": prefix + "no answer here?\n"}], "ability": "fact-reasoning",
         "reward_model": {"style": "rule", "ground_truth": {"target": []}},
         "extra_info": {"split": "train", "index": 2}},
    ]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    loaded = data.read_search_r1_parquet(path)
    assert loaded.dropped == 1
    assert loaded.rows[0] == {"id": "train_0", "question": "total number of death row inmates in the us?",
                              "answers": ["2,718"], "data_source": "nq"}
    assert loaded.rows[1] == {"id": "hotpotqa-7", "question": "Which band formed in Wilmette?",
                              "answers": ["Fall Out Boy", "FOB"], "data_source": "hotpotqa"}


def test_split_rows_is_deterministic_disjoint_and_order_independent():
    rows = [{"id": f"q{i}", "question": "q", "answers": ["a"], "data_source": "nq"} for i in range(50)]
    a = data.split_rows(rows, test=10, validation=5)
    b = data.split_rows(list(reversed(rows)), test=10, validation=5)
    assert a == b
    assert [len(a[s]) for s in ("test", "validation", "train")] == [10, 5, 35]
    ids = [r["id"] for part in a.values() for r in part]
    assert sorted(ids) == sorted(r["id"] for r in rows)
    assert data.split_rows(rows, 10, 5, seed=1) != a
    with pytest.raises(ValueError):
        data.split_rows(rows, 40, 20)


def _mini_pack(root: Path) -> Path:
    questions = root / "data" / "questions"
    questions.mkdir(parents=True)
    (root / "data" / "corpus").mkdir()
    with gzip.open(root / "data" / "corpus" / "wiki.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write((FIXTURES / "corpus.jsonl").read_text(encoding="utf-8"))

    def write(name, rows):
        (questions / name).write_text("".join(json.dumps(r) + "\n" for r in rows))

    write("nq_dev.jsonl", [{"id": f"nq-{i}", "question": f"nq question {i}", "golden_answers": [f"a{i}"],
                            "metadata": {"dataset": "nq"}} for i in range(10)]
          + [{"id": "nq-bad", "question": "", "golden_answers": ["x"]}])
    write("hotpotqa_dev.jsonl", [{"id": f"hp-{i}", "question": f"hp question {i}", "golden_answers": [f"b{i}"],
                                  "metadata": {"dataset": "hotpotqa"}} for i in range(6)])
    write("hotpotqa_fullwiki_dev.jsonl", [
        {"id": "fw-1", "question": "band formed in which city?", "golden_answers": ["Wilmette"]},
        {"id": "fw-2", "question": "something absent?", "golden_answers": ["Zanzibar Quartet"]},
    ])
    return root


def test_prepare_data_and_load_examples(tmp_path, monkeypatch, capsys):
    pack = _mini_pack(tmp_path / "pack")
    out = tmp_path / "out"
    found = {"fw-1": True, "fw-2": False}  # Wilmette is in the fixture corpus, the quartet is not
    sizes = {"nq": (3, 2), "hotpotqa": (2, 1)}
    summary = data.prepare_data(shared=pack, out_dir=out, sizes=sizes)
    printed = capsys.readouterr().out
    assert "dropped 1" in printed and "test 3" in printed
    assert summary["totals"] == {"train": 5 + 3, "validation": 3, "test": 5, "fullwiki": 2}
    assert summary["dropped"]["nq"] == 1
    assert json.loads((out / "splits.json").read_text())["totals"] == summary["totals"]

    train = data.load_examples("train", data_dir=out)
    assert all(isinstance(e, data.SearchExample) for e in train)
    assert {e.data_source for e in train} == {"nq", "hotpotqa"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        train[0].question = "changed"
    test_ids = {e.id for e in data.load_examples("test", data_dir=out)}
    val_ids = {e.id for e in data.load_examples("validation", data_dir=out)}
    assert not (test_ids & val_ids) and not (test_ids & {e.id for e in train})
    assert [e.data_source for e in data.load_examples("test", "hotpotqa", data_dir=out)] == ["hotpotqa"] * 2
    assert len(data.load_examples("train", limit=2, data_dir=out)) == 2
    ids = [e.id for e in train]
    assert [e.id for e in data.load_examples("train", limit=2, skip=1, data_dir=out)] == ids[1:3]
    assert [e.id for e in data.load_examples("train", skip=2, data_dir=out)] == ids[2:]
    fullwiki = data.load_rows("fullwiki", data_dir=out)
    assert {r["id"]: r["metadata"]["answer_in_corpus"] for r in fullwiki} == found
    assert {r["data_source"] for r in fullwiki} == {"hotpotqa_fullwiki"}

    # idempotent: same files, nothing rewritten
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = data.prepare_data(shared=pack, out_dir=out, sizes=sizes)
    assert again["totals"] == summary["totals"]
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    # deterministic: a fresh build gives the same files
    other = tmp_path / "other"
    data.prepare_data(shared=pack, out_dir=other, sizes=sizes)
    for name in ("train.jsonl", "validation.jsonl", "test.jsonl"):
        assert (other / name).read_text() == (out / name).read_text()


def test_answers_in_corpus_reads_gzip_corpus(tmp_path):
    path = tmp_path / "wiki.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write((FIXTURES / "corpus.jsonl").read_text())
    rows = [{"answers": ["wilmette"]}, {"answers": ["Zanzibar Quartet", "nowhere"]}]
    assert data.answers_in_corpus(rows, path) == [True, False]


def test_load_examples_errors_tell_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="make setup"):
        data.load_examples("train", data_dir=tmp_path)
    with pytest.raises(ValueError, match="split must be"):
        data.load_examples("dev", data_dir=tmp_path)


def test_prepare_data_without_pack_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="helpers.data download"):
        data.prepare_data(shared=tmp_path, out_dir=tmp_path / "out")


def test_download_without_network_fails_clearly(tmp_path, monkeypatch):
    import urllib.error
    import urllib.request

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    assert data.main(["download", "--out", str(tmp_path)]) == 1
    with pytest.raises(RuntimeError, match="internet access"):
        data.download(tmp_path)


def test_download_builds_a_pack_from_official_files(tmp_path):
    """With the official files already in place (no network), download builds pack + corpus."""
    raw = tmp_path / "data" / "raw"
    raw.mkdir(parents=True)
    shutil.copy(FIXTURES / "nq_open.jsonl", raw / "NQ-open.dev.jsonl")
    shutil.copy(FIXTURES / "hotpotqa_distractor.json", raw / "hotpot_dev_distractor_v1.json")
    shutil.copy(FIXTURES / "hotpotqa_fullwiki.json", raw / "hotpot_dev_fullwiki_v1.json")
    root = data.download(tmp_path)
    nq = data.read_flashrag_jsonl(root / "questions" / "nq_dev.jsonl")
    assert [r["id"] for r in nq.rows] == ["nq-dev-0", "nq-dev-1"] and nq.rows[0]["data_source"] == "nq"
    hp = data.read_flashrag_jsonl(root / "questions" / "hotpotqa_fullwiki_dev.jsonl")
    assert hp.rows[0]["metadata"]["setting"] == "fullwiki"
    with gzip.open(root / "corpus" / "wiki.jsonl.gz", "rt") as fh:
        corpus = [json.loads(line) for line in fh]
    assert len(corpus) == 5 and len({c["id"] for c in corpus}) == 5
    assert any(c["contents"].startswith('"Fall Out Boy"\n') for c in corpus)
