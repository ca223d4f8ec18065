"""The offline BM25 backend, the evidence formatting and the retrieval-quality report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers.search import SearchItem, SearchResult, create_search_client, format_item, format_results
from helpers.search import local
from helpers.search.format import NO_RESULTS, cut
from helpers.search.http import valid_unicode
from helpers.reward import normalize_answer as normalize
from helpers.search.quality import answer_in, format_quality, retrieval_quality

FIXTURES = Path(__file__).parent / "fixtures" / "search"


@pytest.fixture(scope="module")
def rows():
    return [json.loads(line) for line in (FIXTURES / "corpus.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def index(rows):
    return local.LocalIndex.from_rows(rows)


def test_analyze_lowercases_drops_stopwords_and_stems():
    assert local.analyze("The Rivers of FRANCE") == ["river", "franc"]
    assert local.analyze("the of a") == []


def test_split_contents():
    assert local.split_contents('"Paris"\nParis is a city.') == ("Paris", "Paris is a city.")
    assert local.split_contents("no title line") == ("", "no title line")


def test_index_ranks_the_relevant_passage_first(index):
    hits = index.search("who won the first nobel prize in physics", k=3)
    assert hits[0].id == "wfix00000001"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.score > 0 for h in hits)
    assert index.search("Seine river city", k=1)[0].title == "Paris"
    # stemming: 'flowing' finds 'flows'
    assert index.search("flowing Alps", k=1)[0].id == "wfix00000008"


def test_index_handles_empty_unknown_and_large_k(index, rows):
    assert index.search("", k=3) == []
    assert index.search("the of and", k=3) == []
    assert index.search("qwertyuiop", k=3) == []
    assert index.search("river", k=0) == []
    assert len(index.search("river", k=100)) <= len(rows)


def test_build_index_is_cached_and_loads_equal(tmp_path, rows, index, capsys):
    corpus = tmp_path / "wiki.jsonl"
    shutil.copy(FIXTURES / "corpus.jsonl", corpus)
    out = tmp_path / "index"
    local.build_index(corpus, out, show_progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["passages"] == len(rows)
    stamp = (out / "manifest.json").stat().st_mtime_ns
    local.build_index(corpus, out, show_progress=False)
    assert "up to date" in capsys.readouterr().out
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
    loaded = local.LocalIndex.load(out)
    for query in ("eiffel tower paris", "hamlet shakespeare", "rock band Wilmette"):
        assert [p.id for p in loaded.search(query, 3)] == [p.id for p in index.search(query, 3)]
    # a changed corpus is re-indexed
    corpus.write_text(corpus.read_text() + json.dumps({"id": "wnew", "contents": '"New"\nzebra crossing'}) + "\n")
    local.build_index(corpus, out, show_progress=False)
    assert local.LocalIndex.load(out).search("zebra", 1)[0].id == "wnew"


def test_a_lone_surrogate_in_the_corpus_becomes_a_replacement_character(tmp_path):
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text(json.dumps({"id": "w1", "contents": '"Paris"\nParis \ud83d lies on the Seine'}) + "\n"
                      + json.dumps({"id": "w2", "contents": '"Lyon"\nLyon lies on the Rhone'}) + "\n")
    local.build_index(corpus, tmp_path / "index", show_progress=False)
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    for index in (local.LocalIndex.load(tmp_path / "index"), local.LocalIndex.from_rows(rows)):
        result = local.LocalSearchClient(index).search("seine")
        assert result.ok and result.items[0].content == "Paris \ufffd lies on the Seine"
        assert valid_unicode(format_results(result))  # a tokenizer can encode the observation


def test_missing_corpus_and_index_say_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="COURSE_SHARED"):
        local.build_index(tmp_path / "absent.jsonl.gz", tmp_path / "index")
    with pytest.raises(FileNotFoundError, match="make setup"):
        local.LocalIndex.load(tmp_path / "nothing")


def test_local_client_top3_cut_and_stats(index, rows):
    client = local.LocalSearchClient(index)
    result = client.search("Nobel prize Röntgen X-rays discovery river")
    assert result.ok and result.status == 200 and len(result.items) == 3
    assert result.items[0].title in {"Nobel Prize in Physics", "X-ray"}
    assert result.items[0].url.startswith("https://en.wikipedia.org/wiki/")
    by_title = {r["contents"].split("\n")[0].strip('"'): r["id"] for r in rows}
    assert [i.passage_id for i in result.items] == [by_title[i.title] for i in result.items]
    assert all(i.passage_id not in format_results(result) for i in result.items)
    long = client.search("LONGSTART LONGEND omicron")
    assert [i.title for i in long.items] == ["Long passage"]
    assert len(long.items[0].content) <= 1200 and long.items[0].content.endswith("…")
    empty = client.search("the of a")
    assert empty.ok and empty.items == []
    stats = client.stats.as_dict()
    assert stats["requests"] == 3 and stats["successes"] == 3 and stats["results"] == 3 + 1 + 0
    assert stats["errors"] == 0


def test_local_client_never_raises(index):
    class Broken:
        def search(self, query, k):
            raise MemoryError("boom")

    client = local.LocalSearchClient(Broken())
    result = client.search("anything")
    assert not result.ok and "boom" in result.error
    assert client.stats.errors == 1 and client.stats.requests == 1


def test_create_search_client_local_and_unknown(index):
    client = create_search_client("local", index=index, topk=2)
    assert isinstance(client, local.LocalSearchClient) and client.topk == 2
    assert len(client.search("river flows").items) == 2
    with pytest.raises(ValueError, match="unknown search backend"):
        create_search_client("bing")


def test_format_item_matches_the_seed_layout():
    item = SearchItem(title="Paris", content="Paris is the capital\nof France.", source="Wikipedia",
                      url="https://en.wikipedia.org/wiki/Paris")
    assert format_item(1, item) == (
        "[1] Title: Paris\n"
        "    Content: Paris is the capital of France.\n"
        "    Source: Wikipedia\n"
        "    URL: https://en.wikipedia.org/wiki/Paris"
    )
    bare = format_item(2, SearchItem(title="", content="text"))
    assert bare == "[2] Title: Untitled\n    Content: text"


def test_format_results_ok_empty_and_error():
    items = [SearchItem("A", "first"), SearchItem("B", "second")]
    text = format_results(SearchResult(ok=True, items=items, latency=0.1))
    assert text.startswith("[1] Title: A") and "\n\n[2] Title: B" in text
    assert format_results(SearchResult(ok=True, items=items, latency=0.1), max_items=1).count("Title:") == 1
    assert format_results(SearchResult(ok=True, items=[], latency=0.1)) == NO_RESULTS
    failed = format_results(SearchResult(ok=False, items=[], latency=1.0, status=429, error="HTTP 429 rate limited"))
    assert failed.startswith("Search failed: HTTP 429 rate limited")


def test_cut_keeps_short_text_and_cuts_at_words():
    assert cut("short", 10) == "short"
    out = cut("alpha beta gamma delta epsilon", 15)
    assert len(out) <= 15 and out.endswith("…") and out.startswith("alpha beta")


def test_quality_normalize_and_answer_match():
    assert normalize("The  Eiffel-Tower!") == "eiffeltower"
    assert answer_in(["Built from 1887 to 1889."], ["1889"])
    assert not answer_in(["in 18890 years"], ["1889"])  # whole words only


def test_retrieval_quality_counts_answers_and_gold(index):
    rows = [
        {"question": "first nobel prize physics", "answers": ["Röntgen"], "data_source": "nq",
         "metadata": {"gold_passage_ids": ["wfix00000001"]}},
        {"question": "hamlet tragedy", "answers": ["not in any passage"], "data_source": "nq",
         "metadata": {"gold_passage_ids": ["wfix00000004"]}},
        {"question": "river through paris near the eiffel tower", "answers": ["Seine"], "data_source": "hotpotqa",
         "metadata": {"gold_passage_ids": ["wfix00000003", "wfix00000005"]}},
    ]
    report = retrieval_quality(rows, index, ks=(1, 3), show_progress=False)
    assert report["nq"]["n"] == 2
    assert report["nq"]["answer@1"] == 0.5 and report["nq"]["recall@1"] == 1.0
    assert report["hotpotqa"]["recall@3"] == 0.5 and report["hotpotqa"]["all@3"] == 0.0
    assert report["hotpotqa"]["answer@3"] == 1.0
    table = format_quality(report)
    assert "| nq | 2 |" in table and "50.0 %" in table


def test_numpy_builder_scores_exactly_like_bm25s(rows):
    import bm25s
    import numpy as np

    stemmer, _ = local._analyzer()
    reference = bm25s.BM25()
    reference.index(bm25s.tokenize([r["contents"] for r in rows], stopwords="en", stemmer=stemmer,
                                   show_progress=False), show_progress=False)
    ours = local.LocalIndex.from_rows(rows).retriever
    assert len(ours.scores["data"]) == len(reference.scores["data"])
    for query in ("first nobel prize physics", "river flows through paris", "omega alpha", "Shakespeare tragedy"):
        tokens = local.analyze(query)
        want = reference.get_scores_from_ids([reference.vocab_dict[t] for t in tokens if t in reference.vocab_dict])
        got = ours.get_scores_from_ids([ours.vocab_dict[t] for t in tokens if t in ours.vocab_dict])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert got.max() > 0


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000), st.integers(min_value=2, max_value=1500))
def test_cut_never_exceeds_the_limit(text, limit):
    out = cut(text, limit)
    assert len(out) <= limit
    assert out == text.strip() or out.endswith("…")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.text(max_size=500), st.one_of(st.none(), st.text(max_size=50)))
def test_format_item_always_four_lines_at_most_with_one_line_fields(title, content, source):
    text = format_item(3, SearchItem(title=title, content=content, source=source, url=None))
    lines = text.split("\n")
    assert lines[0].startswith("[3] Title: ") and lines[1].startswith("    Content: ")
    assert len(lines) == 2 + bool(" ".join((source or "").split()))


def test_every_search_backend_returns_the_one_declared_number_of_passages_by_default():
    import inspect

    from helpers.eval import EvalConfig
    from helpers.search import SEARCH_TOPK, create_search_client
    from helpers.search.deepseek import DeepSeekSearchClient
    from helpers.search.local import LocalIndex, LocalSearchClient
    from helpers.search.retriever import RetrieverSearchClient
    from helpers.search.server import RetrievalServer
    from helpers.search.wikipedia import WikipediaSearchClient
    from helpers.search.zhihu import ZhihuSearchClient
    from helpers.train import TrainConfig

    def default(fn, name="topk"):
        return inspect.signature(fn).parameters[name].default

    backends = (LocalSearchClient, RetrieverSearchClient, WikipediaSearchClient, ZhihuSearchClient,
                DeepSeekSearchClient, RetrievalServer)
    assert {default(cls.__init__) for cls in backends} == {SEARCH_TOPK}
    assert default(create_search_client) == default(LocalIndex.search, "k") == SEARCH_TOPK
    assert TrainConfig().search_topk == EvalConfig().search_topk == SEARCH_TOPK
