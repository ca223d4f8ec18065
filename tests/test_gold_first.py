"""helpers.search.gold_first: the reading curriculum's search, and a GRPO session that trains with it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fixtures.doubles import FakeTrainer

from helpers.data import SearchExample
from helpers.metrics import search_counters, search_metrics
from helpers.search.gold_first import gold_first_search, handed_over
from helpers.search.local import LocalIndex, LocalSearchClient

# BM25 ranks the distractors first for the question's words; the gold passage names the answer
CORPUS = [
    {"id": "d1", "contents": '"Distractor one"\nWho founded the Coventry band Adorable? Many founded bands.'},
    {"id": "d2", "contents": '"Distractor two"\nThe Coventry band Adorable was founded, who knows.'},
    {"id": "g1", "contents": '"Adorable (band)"\nPete Fijalkowski formed Adorable in 1990.'},
    {"id": "x1", "contents": '"Lit (band)"\nLit were formed in 1988 as Razzle.'},
]
QUESTION = "Who founded the Coventry band Adorable?"
ONE_GOLD = SearchExample("q1", QUESTION, ["Pete Fijalkowski"], "nq", {"gold_passage_ids": ["g1"]})


@pytest.fixture(scope="module")
def index():
    return LocalIndex.from_rows(CORPUS)


def ids(result):
    return [item.passage_id for item in result.items]


def test_which_questions_are_handed_over_is_a_fixed_share_of_them():
    questions = [f"question number {i}?" for i in range(2000)]
    half = [q for q in questions if handed_over(q, 0.5)]
    assert 0.45 < len(half) / len(questions) < 0.55
    assert half == [q for q in questions if handed_over(q, 0.5)]  # the same questions every time
    assert set(q for q in questions if handed_over(q, 0.2)) <= set(half)  # a smaller share is a subset
    assert not any(handed_over(q, 0.0) for q in questions) and all(handed_over(q, 1.0) for q in questions)
    # case, punctuation and articles do not change the verdict: it is the question that is hashed
    assert all(handed_over(q.upper() + " ", 0.5) == (q in half) for q in questions[:200])


def test_filled_the_gold_passage_takes_the_lowest_ranked_others_place_and_the_count_is_the_index(index):
    bm25 = LocalSearchClient(index, topk=2)
    assert ids(bm25.search(QUESTION)) == ["d1", "d2"]  # the index alone misses the gold passage
    filled = gold_first_search([ONE_GOLD], LocalSearchClient(index, topk=2), fill=True)
    assert ids(filled.search(QUESTION)) == ["d1", "g1"]  # k passages, as the index returns
    bare = gold_first_search([ONE_GOLD], LocalSearchClient(index, topk=2))
    assert ids(bare.search(QUESTION)) == ["g1"]  # the reader ceiling's: the gold passages alone
    three = gold_first_search([ONE_GOLD], LocalSearchClient(index, topk=3), fill=True)
    found = LocalSearchClient(index, topk=3).search(QUESTION)
    assert "g1" in ids(found) and ids(three.search(QUESTION)) == ids(found)  # found already: unchanged
    # any other query goes to the index
    assert ids(filled.search("Lit band Razzle")) == ids(bm25.search("Lit band Razzle"))


def test_a_failing_index_leaves_the_handed_over_search_its_gold_passages(index):
    client = gold_first_search([ONE_GOLD], LocalSearchClient(index, topk=2), fill=True)

    def broken(query, k):
        raise OSError("index file gone")

    client.index._index = type("Broken", (), {"search": staticmethod(broken), "passages": index.passages})()
    assert ids(client.search(QUESTION)) == ["g1"] and client.handed == 1
    other = client.search("Lit band Razzle")  # the index's own client turns its fault into an error result
    assert not other.ok and "index file gone" in other.error


def test_handed_over_searches_count_in_the_step_metrics_beside_the_index_searches(index):
    client = gold_first_search([ONE_GOLD], LocalSearchClient(index, topk=2), fill=True)
    before = search_counters(client)
    client.search(QUESTION)
    client.search("Lit band")
    step = search_metrics(before, search_counters(client))
    assert step["search_requests"] == 2 and step["search_gold_handed"] == 1
    assert "search_gold_handed" not in search_metrics({}, search_counters(LocalSearchClient(index)))


def test_a_share_of_none_hands_nothing_over_and_bad_settings_are_refused(index):
    client = gold_first_search([ONE_GOLD], LocalSearchClient(index, topk=2), share=0.0, fill=True)
    assert client.gold == {} and ids(client.search(QUESTION)) == ["d1", "d2"]
    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        gold_first_search([ONE_GOLD], LocalSearchClient(index), share=1.5)
    with pytest.raises(ValueError, match="local search backend"):
        gold_first_search([ONE_GOLD], SimpleNamespace(topk=2, search=lambda q: None))


def test_a_training_session_with_a_gold_first_share_searches_through_the_curriculum(index, tmp_path):
    from helpers.train import TrainConfig, open_session

    with pytest.raises(ValueError, match="gold_first_share"):
        TrainConfig(gold_first_share=-0.1)
    trainer = FakeTrainer()
    trainer.get_tokenizer = lambda: None
    service = SimpleNamespace(create_lora_training_client=lambda **kwargs: trainer)
    plain = open_session(TrainConfig(out=str(tmp_path / "plain"), model="m", search_topk=2), service=service,
                         search_client=LocalSearchClient(index, topk=2), examples=[ONE_GOLD])
    assert ids(plain.search_client.search(QUESTION)) == ["d1", "d2"]
    config = TrainConfig(out=str(tmp_path / "read"), model="m", search_topk=2, gold_first_share=1.0)
    session = open_session(config, service=service, search_client=LocalSearchClient(index, topk=2),
                           examples=[ONE_GOLD])
    assert ids(session.search_client.search(QUESTION)) == ["d1", "g1"] and session.search_client.handed == 1
