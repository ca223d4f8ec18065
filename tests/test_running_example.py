"""The course's running example is answerable on the offline index, in exactly two hops."""

from __future__ import annotations

from helpers.data import load_rows
from helpers.reward import normalize_answer
from helpers.running_example import ANSWER, HOPS, QUERIES, RUNNING_EXAMPLE
from helpers.search import create_search_client
from helpers.search.local import get_index


def test_running_example_is_a_question_of_the_pack():
    rows = {row["id"]: row for split in ("train", "validation", "test") for row in load_rows(split)}
    row = rows[RUNNING_EXAMPLE.id]
    assert row["question"] == RUNNING_EXAMPLE.question
    assert row["answers"] == RUNNING_EXAMPLE.answers
    assert row["data_source"] == RUNNING_EXAMPLE.data_source == "hotpotqa"
    # its two gold passages are the two passages the hops retrieve
    by_id = {p.id: p.title for p in get_index().passages}
    assert sorted(by_id[g] for g in row["metadata"]["gold_passage_ids"]) == sorted(hop.title for hop in HOPS)


def test_each_hop_retrieves_its_passage_and_only_the_second_holds_the_answer():
    search = create_search_client("local")
    assert QUERIES == tuple(hop.query for hop in HOPS) and len(HOPS) == 2
    found = []
    for hop in HOPS:
        result = search.search(hop.query)
        assert result.ok, result.error
        titles = [item.title for item in result.items]
        assert hop.title in titles, (hop.query, titles)
        passage = next(item for item in result.items if item.title == hop.title)
        assert normalize_answer(hop.reveals) in normalize_answer(passage.content)
        found.append(any(normalize_answer(ANSWER) in normalize_answer(item.content) for item in result.items))
    assert found == [False, True]  # one search is not enough: the bridge entity must be searched
    # the bridge entity the first hop reveals is what the second hop searches
    assert HOPS[0].reveals in HOPS[1].query
    # the question itself does not name the bridge entity
    assert HOPS[0].reveals not in RUNNING_EXAMPLE.question


def test_the_notebooks_small_rollouts_start_on_the_running_example():
    from helpers.widgets.course import rollout_examples

    assert [e.id for e in rollout_examples(1)] == [RUNNING_EXAMPLE.id]
    three = rollout_examples(3)
    assert len(three) == 3 and three[0] == RUNNING_EXAMPLE and RUNNING_EXAMPLE.id not in {e.id for e in three[1:]}
