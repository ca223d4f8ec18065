"""Evaluation rows and baselines' prompts (no model)."""

from __future__ import annotations

import pytest

from helpers.data import SearchExample
from helpers.eval import EvalConfig, evaluate, single_turn_messages, trajectory_row
from helpers.reward import contains_answer
from helpers.rollout import AssistantTurn, SearchRecord, Trajectory
from helpers.search.types import SearchItem, SearchResult, SearchStats

EXAMPLE = SearchExample(id="q", question="Who wrote Hamlet?", answers=["William Shakespeare", "Shakespeare"],
                        data_source="nq")


def test_lenient_match_is_normalised_and_word_bounded():
    assert contains_answer("I think it was the great W. Shakespeare.", EXAMPLE.answers)
    assert contains_answer("answer: SHAKESPEARE!", EXAMPLE.answers)
    assert not contains_answer("Shakespeareana is a genre", EXAMPLE.answers)
    assert not contains_answer("", EXAMPLE.answers)


def test_eval_config_uses_one_trajectory_per_question_and_the_same_budgets():
    config = EvalConfig(rollout=dict(max_search_calls=3, max_assistant_turns=4, max_trajectory_tokens=2048, search_budget=2))
    rollout = config.rollout_config()
    assert rollout.group_size == 1
    assert (rollout.max_search_calls, rollout.max_assistant_turns, rollout.max_trajectory_tokens) == (3, 4, 2048)
    assert rollout.search_budget == 2
    assert config.resolved_label() == "agent"
    assert EvalConfig(model_path="/x/sft/sampler").resolved_label() == "agent:sampler"


def test_trajectory_row_reports_strict_and_lenient():
    turn = AssistantTurn(prompt_tokens=[1] * 10, completion_tokens=[2] * 5, logprobs=[-1.0] * 5, text="")
    t = Trajectory(example=EXAMPLE, group_index=0, messages=[], turns=[turn, turn])
    t.turns = [turn, AssistantTurn(prompt_tokens=[1] * 30, completion_tokens=[3] * 4, logprobs=[-1.0] * 4, text="")]
    t.final_text = "It is Shakespeare, I believe."
    t.search_calls = 1
    t.searches = [SearchRecord(turn_index=0, call_id="c", query="hamlet author", ok=True, error=None, latency=0.1,
                               items_returned=3)]
    row = trajectory_row(t, "agent", "base")
    assert row["exact_match"] is False and row["lenient_match"] is True and row["valid_format"] is False
    assert row["queries"] == ["hamlet author"] and row["sampled_tokens"] == 9 and row["trajectory_tokens"] == 34
    assert row["data_source"] == "nq" and row["label"] == "base"


class OneSearch:
    def __init__(self):
        self.stats = SearchStats()
        self.queries = []

    def search(self, query):
        self.queries.append(query)
        return SearchResult(ok=True, items=[SearchItem(title="Hamlet", content="A play by William Shakespeare.")],
                            latency=0.0)


def test_closed_book_has_no_evidence_and_rag_retrieves_the_question_once():
    messages, results = single_turn_messages(EXAMPLE, "closed_book")
    assert results == [] and "Evidence" not in messages[-1]["content"] and "Answer:" in messages[0]["content"]
    search = OneSearch()
    messages, results = single_turn_messages(EXAMPLE, "rag", search)
    assert search.queries == ["Who wrote Hamlet?"] and len(results) == 1
    assert "A play by William Shakespeare." in messages[-1]["content"]
    assert messages[-1]["content"].endswith("Question: Who wrote Hamlet?")


def test_evaluate_rejects_bad_modes():
    with pytest.raises(ValueError, match="mode"):
        evaluate(EvalConfig(mode="oracle"), sampling_client=object(), examples=[])
    with pytest.raises(ValueError, match="model_path"):
        evaluate(EvalConfig(mode="rag", model_path="x"), sampling_client=object(), examples=[])


def test_an_evaluation_searches_with_the_stated_number_of_passages(monkeypatch):
    import helpers.eval as eval_module

    asked = {}

    class Tokenizer:
        pass

    class Sampler:
        def get_tokenizer(self):
            return Tokenizer()

    def fake_client(backend, **options):
        asked.update(options, backend=backend)
        return object()

    monkeypatch.setattr(eval_module, "create_search_client", fake_client)
    rows = evaluate(EvalConfig(search_topk=5, tracker="none"), sampling_client=Sampler(), examples=[], progress=False)
    assert rows == [] and asked == {"backend": "local", "topk": 5}
    with pytest.raises(ValueError, match="search_topk"):
        EvalConfig(search_topk=0)


def test_evaluate_refuses_a_search_client_returning_other_passages_than_its_config_records(tmp_path):
    from helpers.search import check_client_topk
    from helpers.search.local import LocalIndex, LocalSearchClient

    index = LocalIndex.from_rows([{"id": "p1", "contents": "\"T\"\nsome text"}])
    output = tmp_path / "rows.jsonl"
    with pytest.raises(ValueError, match="returns 1 passages a search but the config says search_topk=3"):
        evaluate(EvalConfig(tracker="none", output=str(output)), search_client=LocalSearchClient(index, topk=1),
                 examples=[], sampling_client=object(), progress=False)
    assert not output.exists()  # refused before anything ran
    check_client_topk(LocalSearchClient(index, topk=3), 3)  # the same k, and a client stating none, pass
    check_client_topk(object(), 3)
