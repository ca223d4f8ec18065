"""benchmarks/reader_ceiling.py: the same questions with the gold passages handed to the first search."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from fixtures.doubles import ScriptedSamplingClient, call

from helpers.data import SearchExample
from helpers.eval import EvalConfig, evaluate
from helpers.evidence import reader_summary
from helpers.models import load_tokenizer
from helpers.search.gold_first import gold_first_search
from helpers.search.local import LocalIndex, LocalSearchClient

spec = importlib.util.spec_from_file_location(
    "reader_ceiling", Path(__file__).resolve().parents[1] / "benchmarks" / "reader_ceiling.py")
reader_ceiling = importlib.util.module_from_spec(spec)
sys.modules["reader_ceiling"] = reader_ceiling  # its dataclass resolves annotations through its module
spec.loader.exec_module(reader_ceiling)

# BM25 ranks the distractor first for the question's words; the gold passages name the answer
CORPUS = [
    {"id": "d1", "contents": '"Distractor"\nWhich band was formed first, Lit or Adorable? Both bands were formed, first Lit.'},
    {"id": "g1", "contents": '"Adorable (band)"\nAdorable were formed in 1990 in Coventry.'},
    {"id": "g2", "contents": '"Lit (band)"\nLit were formed in 1988 as Razzle.'},
    {"id": "g3", "contents": '"Adorable"\nAn English indie band.'},
]
QUESTION = "Which band was formed first, Lit or Adorable?"
EXAMPLE = SearchExample("h1", QUESTION, ["Adorable (band)"], "hotpotqa", {"gold_passage_ids": ["g1", "g2", "g3"]})


@pytest.fixture(scope="module")
def index():
    return LocalIndex.from_rows(CORPUS)


def ids(result):
    return [item.passage_id for item in result.items]


def test_a_query_that_is_the_question_gets_its_gold_passages_up_to_k_and_any_other_the_index(index):
    bm25 = LocalSearchClient(index, topk=2)
    client = gold_first_search([EXAMPLE], bm25)
    assert client.topk == 2
    assert ids(bm25.search(QUESTION))[0] == "d1"  # what the index alone returns first
    # case, punctuation and articles ignored, as the evaluation's "first query rewritten" reads a query
    for query in (QUESTION, "which band was formed first lit or adorable", "  WHICH band was formed first, Lit or Adorable "):
        assert ids(client.search(query)) == ["g1", "g2"]  # the gold passages, at most k of them
    assert client.handed == 3
    other = client.search("Lit band formed")
    assert ids(other) == ids(bm25.search("Lit band formed")) and client.handed == 3


def test_questions_without_gold_passages_in_the_corpus_are_left_to_the_index(index):
    unknown = SearchExample("h2", "Who founded Coventry?", ["x"], "hotpotqa", {"gold_passage_ids": ["nowhere"]})
    client = gold_first_search([unknown], LocalSearchClient(index, topk=2))
    assert client.gold == {}
    assert ids(client.search("Who founded Coventry?")) == ids(LocalSearchClient(index, topk=2).search("Who founded Coventry?"))


def reads_the_first_title(prompt: str, index: int) -> str:
    """Searches the question once, then answers with the first passage title it was shown."""
    if "<tool_response>" not in prompt:
        return call(QUESTION)
    return "Answer: " + re.search(r"\[1\] Title: (.+)", prompt.split("<tool_response>", 1)[1]).group(1).strip()


def test_the_gold_first_run_measures_what_the_policy_makes_of_the_gold_passages(index):
    tokenizer = load_tokenizer("smollm2-135m")
    config = EvalConfig(tracker="none", search_topk=2)
    rows = {}

    def sampler():
        scripted = ScriptedSamplingClient(tokenizer, reads_the_first_title)
        scripted.get_tokenizer = lambda: tokenizer  # as a pytrio sampling client hands its tokenizer
        return scripted

    for label, client in (("bm25", LocalSearchClient(index, topk=2)),
                          ("gold first", gold_first_search([EXAMPLE], LocalSearchClient(index, topk=2)))):
        rows[label] = evaluate(config, search_client=client, examples=[EXAMPLE], progress=False,
                               sampling_client=sampler())
    bm25, gold = (reader_summary(rows[k]) for k in ("bm25", "gold first"))
    assert rows["bm25"][0]["answer"] == "Distractor" and bm25["em"] == 0.0
    assert rows["gold first"][0]["answer"] == "Adorable (band)" and gold["em"] == 1.0
    # three gold passages, two handed over: not every gold passage read
    assert bm25["every_gold_read"] == gold["every_gold_read"] == 0 and gold["em_rest"] == 1.0


def test_summary_splits_em_by_whether_every_gold_passage_was_read_and_counts_yes_no_answers():
    def row(em, gold, seen, answers=("x",), answer="x", searches=1):
        return {"exact_match": em, "lenient_match": em, "search_calls": searches, "gold_passage_ids": gold,
                "evidence_ids": seen, "answers": list(answers), "answer": answer}

    rows = [row(True, ["a", "b"], [["a"], ["b"]], searches=2), row(False, ["a", "b"], [["a", "c"]]),
            row(False, ["a"], [["a"]], answers=["no"], answer="Yes"), row(True, [], [["a"]], answers=["yes"], answer="yes")]
    s = reader_summary(rows)
    assert (s["questions"], s["em"], s["two_searches"]) == (4, 0.5, 0.25)
    assert (s["every_gold_read"], s["em_every_gold_read"], s["em_rest"]) == (2, 0.5, 0.5)
    assert (s["yes_no"], s["em_yes_no"], s["said_yes"]) == (2, 0.5, 2)
    assert reader_summary([])["em"] is None


def test_main_runs_the_gold_search_alone_beside_the_recorded_rows_and_refuses_rows_of_other_questions(
        tmp_path, monkeypatch, index, capsys):
    import json

    import helpers.data
    import helpers.eval
    import helpers.search

    monkeypatch.setattr(helpers.data, "load_examples", lambda *a, **k: [EXAMPLE])
    monkeypatch.setattr(helpers.search, "create_search_client", lambda backend, topk: LocalSearchClient(index, topk=topk))
    seen = []

    def fake_evaluate(config, search_client=None, examples=None, **_):
        seen.append(search_client.name)
        return [{"id": "h1", "exact_match": True, "lenient_match": True, "search_calls": 1, "answers": ["x"],
                 "answer": "x", "gold_passage_ids": ["g1", "g2"], "evidence_ids": [["g1", "g2"]]}]

    monkeypatch.setattr(helpers.eval, "evaluate", fake_evaluate)
    recorded = tmp_path / "test.jsonl"
    recorded.write_text(json.dumps({"id": "h1", "exact_match": False, "lenient_match": False, "search_calls": 2,
                                    "answers": ["x"], "answer": "y", "gold_passage_ids": [], "evidence_ids": []})
                        + "\n" + json.dumps({"id": "other", "exact_match": True}) + "\n")
    results = reader_ceiling.main(["--model-path", "a", "--topk", "2", "--searches", "gold", "--recorded", str(recorded)])
    assert seen == ["gold-first"]  # the index's run left out
    assert list(results) == ["recorded", "gold first"] and results["recorded"]["em"] == 0.0
    assert results["gold first"]["em"] == 1.0 and results["gold first"]["every_gold_read"] == 1
    assert "| recorded |" in capsys.readouterr().out
    recorded.write_text(json.dumps({"id": "other", "exact_match": True}) + "\n")
    with pytest.raises(SystemExit, match="holds 0 of the 1 questions"):
        reader_ceiling.main(["--model-path", "a", "--searches", "gold", "--recorded", str(recorded)])
