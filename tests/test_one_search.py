"""Questions one search settles: the measure, its figure, the chain view and notebook 01's checker."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import pytest

from helpers.checkers.one_search import check_one_search_enough
from helpers.course.one_search import one_search_figure, one_search_shares, settled_by_one_search
from helpers.data import load_rows
from helpers.search.local import LocalIndex
from helpers.widgets.chain import ChainExplorer, chain_html


@pytest.fixture(scope="module")
def index():
    return LocalIndex.load()


def solution(question, gold_ids, search):
    if not gold_ids:
        raise ValueError("no gold passages")
    return set(gold_ids) <= set(search(question))


def test_the_checker_passes_the_rule_and_fails_the_stub_and_near_misses(capsys):
    def stub(question, gold_ids, search):
        raise NotImplementedError("write one_search_enough")

    def any_gold(question, gold_ids, search):  # one gold passage found is not the question settled
        if not gold_ids:
            raise ValueError
        return bool(set(gold_ids) & set(search(question)))

    def no_refusal(question, gold_ids, search):  # all() of nothing is True: an empty gold list must be refused
        return set(gold_ids) <= set(search(question))

    def searches_twice(question, gold_ids, search):
        if not gold_ids:
            raise ValueError
        return set(gold_ids) <= set(search(question)) | set(search(question + " director"))

    assert check_one_search_enough(solution)
    for wrong in (stub, any_gold, no_refusal, searches_twice, None):
        assert not check_one_search_enough(wrong)
    assert "not yet" in capsys.readouterr().out


def test_one_search_settles_most_nq_questions_fewer_hotpotqa_ones_and_no_synthetic_one(index):
    train = load_rows("train")
    rows = {source: [r for r in train if r["data_source"] == source] for source in ("nq", "hotpotqa")}
    rows["synthetic"] = load_rows("synthetic")
    shares = one_search_shares(rows, index)
    assert shares["synthetic"]["n"] == len(rows["synthetic"]) > 1000 and shares["synthetic"]["settled"] == 0
    assert shares["nq"]["share"] > shares["hotpotqa"]["share"] > 0.2
    for source, s in shares.items():
        assert s["n"] + s["unjudged"] == len(rows[source])
        assert s["share"] == pytest.approx(s["settled"] / s["n"])
    # the share is the learner's rule applied with the real search
    sample = rows["hotpotqa"][:40]
    search = lambda q: [p.id for p in index.search(q, k=3)]  # noqa: E731
    assert [settled_by_one_search(r, index) for r in sample] == [
        solution(r["question"], r["metadata"]["gold_passage_ids"], search) for r in sample]
    fig = one_search_figure(shares)
    bars = fig.axes[0].patches
    assert [b.get_height() for b in bars] == pytest.approx([100 * shares[s]["share"] for s in shares])


def test_a_row_without_gold_passages_is_named_not_judged(index):
    with pytest.raises(ValueError, match="no gold passage ids"):
        settled_by_one_search({"id": "q1", "question": "who?", "metadata": {}}, index)
    shares = one_search_shares({"x": [{"id": "q1", "question": "who?", "metadata": {}}]}, index)
    assert shares["x"] == {"n": 0, "settled": 0, "share": 0.0, "unjudged": 1}


def _passage(pid, title):
    return SimpleNamespace(id=pid, title=title)


ROW = {"id": "mh-1", "question": "In what year was the <b>actor</b> in the passage about Jaws born?",
       "answers": ["1946"], "metadata": {"chain": ["Jaws", "Roy <Scheider>"], "gold_passage_ids": ["a", "b"],
                                         "descriptions": ["American actor"], "hops": 2, "relation": "born"}}


def test_the_chain_view_marks_what_one_search_found_and_escapes_the_text():
    html = chain_html(ROW, [_passage("a", "Jaws"), _passage("z", "Shark & co")])
    assert "&lt;b&gt;actor&lt;/b&gt;" in html and "Roy &lt;Scheider&gt;" in html and "Shark &amp; co" in html
    assert "<b>actor</b>" not in html
    assert "✓ chain passage 1" in html and "American actor" in html
    assert "Not found by one search:</b> Roy &lt;Scheider&gt;" in html
    settled = chain_html(ROW, [_passage("b", "Roy"), _passage("a", "Jaws")])
    assert "One search found every chain passage" in settled and "Not found" not in settled
    with pytest.raises(ValueError, match="not a synthetic chain row"):
        chain_html({"id": "q", "question": "?", "metadata": {"gold_passage_ids": ["a"]}}, [])


def test_the_explorer_shows_the_row_the_slider_points_at(index):
    rows = load_rows("synthetic")[:5]
    explorer = ChainExplorer(rows, index)
    assert explorer.position.max == 4
    explorer.position.value = 3
    assert explorer.view.value == chain_html(rows[3], index.search(rows[3]["question"], k=3))
    assert "Not found by one search" in explorer.view.value  # every synthetic question needs a second search
    with pytest.raises(ValueError, match="no synthetic rows"):
        ChainExplorer([], index)
