"""Scripted teacher and SFT datums (tokenizer only, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.data import SearchExample
from helpers.protocol import tool_message
from helpers.search import format_results
from helpers.search.types import SearchItem, SearchResult, SearchStats
from helpers.datums import build_sft_datum
from helpers.reward import find_answer_in
from helpers.sft import SFTConfig, run_sft
from helpers.teacher import teacher_trajectory
from helpers.train import weight_micro_batch_for_global_mean


class ScriptedSearch:
    """Returns pre-set results per query and records the queries it saw."""

    def __init__(self, results):
        self.results = results
        self.queries = []
        self.stats = SearchStats()

    def search(self, query):
        self.queries.append(query)
        items = self.results.get(query, [])
        return SearchResult(ok=True, items=[SearchItem(title=t, content=c) for t, c in items], latency=0.0)


def test_find_answer_in_keeps_the_evidence_spelling_and_word_boundaries():
    evidence = "The Eiffel Tower stands in Paris. Parisian cafes abound."
    assert find_answer_in(evidence, ["eiffel tower"]) == "Eiffel Tower"
    assert find_answer_in("Parisian cafes", ["Paris"]) is None
    assert find_answer_in(evidence, ["London", "paris"]) == "Paris"
    assert find_answer_in(evidence, ["", "  "]) is None


def test_teacher_searches_again_for_a_name_it_read_in_the_evidence():
    """The bridge of a two-hop question: the label named in the first evidence, not a gold title."""
    example = SearchExample(id="h1", question="Which city hosts the label of Fall Out Boy?", answers=["Wilmette"],
                            data_source="hotpotqa")
    first = [("Fall Out Boy", "An American rock band signed to Island Records and Fueled Ramen."), ("Other", "x")]
    search = ScriptedSearch({
        "Which city hosts the label of Fall Out Boy?": first,
        "Island Records": [("Island Records", "A label based in London.")],
        "Fueled Ramen": [("Fueled Ramen", "A record label based in Wilmette, Illinois.")],
    })
    demo = teacher_trajectory(example, search)
    # names in text order; 'An American' loses its article, 'Fall Out Boy' is already in the question
    assert search.queries == ["Which city hosts the label of Fall Out Boy?", "American", "Island Records", "Fueled Ramen"]
    assert demo.queries == ["Which city hosts the label of Fall Out Boy?", "Fueled Ramen"] and demo.answer == "Wilmette"
    assert demo.messages[-1] == {"role": "assistant", "content": "Answer: Wilmette"}
    roles = [m["role"] for m in demo.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    tools = [m["content"] for m in demo.messages if m["role"] == "tool"]
    assert "Island Records" in tools[0] and "London" not in " ".join(tools)  # only the search that worked is shown
    # a cap on the teacher's tries: with one try it gives up, and the question is skipped
    assert teacher_trajectory(example, ScriptedSearch(search.results), max_tries=1) is None


def test_reachable_queries_only_use_what_the_policy_has_read():
    from helpers.teacher import names_in, reachable_queries

    assert names_in("In 1999 The Church of England met Sam Snead. There it was.") == ["Church of England", "Sam Snead"]
    items = [SearchItem(title="Masters Tournament", content="Won by Sam Snead at Augusta National in 1949."),
             SearchItem(title="Augusta National", content="The Masters Tournament course.")]
    queries = reachable_queries("who won the Masters in 1949", items, ["Sam Snead"])
    # evidence names first (not the answer, not a title, not already asked), then question names, then question + title
    assert queries == ["Masters", "who won the Masters in 1949 Masters Tournament",
                       "who won the Masters in 1949 Augusta National"]
    assert not any("Snead" in q for q in queries)


def test_two_search_demonstrations_can_be_repeated():
    from helpers.sft import sft_datums

    class Demo:
        def __init__(self, calls, text):
            self.search_calls = calls
            self.messages = [{"role": "user", "content": text}, {"role": "assistant", "content": "Answer: x"}]

    seen = []
    datums = sft_datums(lambda messages: seen.append(messages[0]["content"]) or messages[0]["content"],
                        [Demo(1, "one"), Demo(2, "two"), Demo(1, "three")], repeat_two_search=3)
    assert datums == ["one", "two", "two", "two", "three"] and seen == ["one", "two", "three"]  # rendered once each


def test_teacher_stops_after_one_search_and_skips_unanswerable():
    example = SearchExample(id="n1", question="who wrote hamlet", answers=["William Shakespeare"], data_source="nq")
    search = ScriptedSearch({"who wrote hamlet": [("Hamlet", "A tragedy by William Shakespeare.")]})
    demo = teacher_trajectory(example, search)
    assert demo.search_calls == 1 and demo.answer == "William Shakespeare"
    nothing = ScriptedSearch({})
    assert teacher_trajectory(example, nothing) is None and len(nothing.queries) == 1


@pytest.fixture(scope="module")
def tokenizer(small_model_name):
    from helpers.models import load_tokenizer

    return load_tokenizer(small_model_name)


def test_sft_datum_weights_only_assistant_tokens(tokenizer):
    from helpers.protocol import build_prompt, parse_assistant

    example = SearchExample(id="n1", question="who wrote hamlet", answers=["William Shakespeare"], data_source="nq")
    search = ScriptedSearch({"who wrote hamlet": [("Hamlet", "A tragedy by William Shakespeare.")]})
    demo = teacher_trajectory(example, search, tokenizer, 400)
    item = build_sft_datum(tokenizer, demo.messages)
    inputs = item.datum.loss_fn_inputs
    targets, weights = inputs["target_tokens"].to_numpy(), inputs["weights"].to_numpy()
    assert set(np.unique(weights).tolist()) == {0.0, 1.0}
    spans, current = [], []
    for token, weight in zip(targets.tolist(), weights.tolist()):
        if weight:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    assert len(spans) == 2  # the tool call turn and the answer turn; never the observation
    end = tokenizer.eos_token if tokenizer.eos_token == "<|im_end|>" else "<|im_end|>"
    call_text = tokenizer.decode(spans[0])
    assert call_text.endswith(end)
    parsed = parse_assistant(call_text[: -len(end)])
    assert parsed.kind == "tool" and parsed.query == "who wrote hamlet"
    assert tokenizer.decode(spans[1]) == "Answer: William Shakespeare" + end
    # The first trained token is exactly where the rollout's first prompt ends.
    prompt = build_prompt(tokenizer, demo.messages[:2])
    first = int(np.argmax(weights))
    assert item.datum.model_input.to_ints()[: first + 1] == prompt


def test_sft_micro_batch_weights_scale_by_share(tokenizer):
    example = SearchExample(id="n1", question="who wrote hamlet", answers=["William Shakespeare"], data_source="nq")
    search = ScriptedSearch({"who wrote hamlet": [("Hamlet", "A tragedy by William Shakespeare.")]})
    item = build_sft_datum(tokenizer, teacher_trajectory(example, search, tokenizer, 400).messages)
    [scaled] = weight_micro_batch_for_global_mean([item], total_samples=4)
    original = item.datum.loss_fn_inputs["weights"].to_numpy()
    assert scaled.loss_fn_inputs["weights"].to_numpy() == pytest.approx(original * 0.25)


def test_sft_refuses_evaluation_splits(tmp_path):
    with pytest.raises(ValueError, match="train split"):
        run_sft(SFTConfig(split="test", out=str(tmp_path / "sft"), resume=False), service=object(),
                search_client=object(), examples=[])


def test_teacher_hints_are_tried_before_the_reachable_queries():
    example = SearchExample(id="h2", question="Which city hosts the band's label?", answers=["Wilmette"],
                            data_source="hotpotqa")
    first = [("Fall Out Boy", "A band on Fueled Ramen."), ("Other", "x")]
    search = ScriptedSearch({
        "Which city hosts the band's label?": first,
        "Fueled Ramen": [("Fueled Ramen", "A record label based in Wilmette, Illinois.")],
    })
    # a hint the first search already returned and a hint that spells the answer are not used
    demo = teacher_trajectory(example, search, hints=["Fall Out Boy", "Wilmette, Illinois", "Some Label"])
    assert search.queries == ["Which city hosts the band's label?", "Some Label", "Fueled Ramen"]
    assert demo.queries == ["Which city hosts the band's label?", "Fueled Ramen"]


def test_gold_titles_come_from_the_split_metadata_and_the_corpus():
    from helpers.data import load_examples, load_rows
    from helpers.search.local import get_index
    from helpers.teacher import gold_titles

    examples = load_examples("train", data_source="hotpotqa", limit=3)
    titles = gold_titles(examples)
    by_id = {p.id: p.title for p in get_index().passages}
    meta = {r["id"]: r["metadata"] for r in load_rows("train")}
    for e in examples:
        assert titles[e.id] == [by_id[g] for g in meta[e.id]["gold_passage_ids"]]
        assert len(titles[e.id]) == 2  # HotpotQA: two supporting passages


@pytest.fixture(scope="module", params=["qwen2.5-0.5b", "smollm2-135m"])
def both_tokenizers(request):
    from helpers.models import load_tokenizer

    return load_tokenizer(request.param)


def test_call_marker_probability_reads_the_marker_where_the_assistant_opens_a_call(both_tokenizers):
    """Teacher-forced: low when the policy would not write <tool_call> at the call (format 0 on 2026-11-30).

    On Qwen the marker is spelled in pieces and the template's `>` merges with the newline after
    it (`>\n`), so the encoded marker never occurs in the rendered demonstration; it still counts.
    """
    import math

    from helpers.protocol import render_tokens
    from helpers.sft import call_marker_probability

    tokenizer = both_tokenizers
    example = SearchExample(id="n1", question="who wrote hamlet", answers=["William Shakespeare"], data_source="nq")
    search = ScriptedSearch({"who wrote hamlet": [("Hamlet", "A tragedy by William Shakespeare.")]})
    demo = teacher_trajectory(example, search, tokenizer, 400)
    full = render_tokens(tokenizer, demo.messages, add_generation_prompt=False)
    pieces = len(tokenizer.encode("<tool_call>", add_special_tokens=False))
    in_marker = {t for t in set(full) if tokenizer.decode([t]).strip() and tokenizer.decode([t]).rstrip("\n") in "<tool_call>"}

    class Policy:
        def __init__(self, marker_logprob):
            self.marker_logprob, self.prompts = marker_logprob, []

        def compute_logprobs(self, prompt):
            from concurrent.futures import Future

            ids = prompt.to_ints()
            self.prompts.append(ids)
            logprobs = [None] + [self.marker_logprob if t in in_marker else -0.01 for t in ids[1:]]
            future = Future()
            future.set_result(logprobs)
            return future

    confident, lost = Policy(-0.01), Policy(-3.0)
    assert call_marker_probability(confident, tokenizer, [demo]) == pytest.approx(math.exp(-0.01 * pieces))
    assert call_marker_probability(lost, tokenizer, [demo]) == pytest.approx(math.exp(-3.0 * pieces))
    assert lost.prompts == [full]  # the whole demonstration, once
    # a demonstration without any call has nothing to check
    answer_only = [m for m in demo.messages if m["role"] in ("system", "user")] + [
        {"role": "assistant", "content": "Answer: William Shakespeare"}]
    no_call = type(demo)(demo.example, answer_only, [], "William Shakespeare")
    assert call_marker_probability(confident, tokenizer, [no_call]) is None


def test_the_top_title_teacher_of_results_h200_is_still_there():
    example = SearchExample(id="h1", question="Which city hosts the label?", answers=["Wilmette"], data_source="hotpotqa")
    search = ScriptedSearch({
        "Which city hosts the label?": [("Fall Out Boy", "Signed to Fueled Ramen."), ("Other", "x")],
        "Fueled Ramen": [("Fueled Ramen", "Based in Wilmette.")],
        "Which city hosts the label? Fall Out Boy": [("Fall Out Boy", "The band formed in Wilmette.")],
    })
    demo = teacher_trajectory(example, search, second_query="top_title")
    assert search.queries == ["Which city hosts the label?", "Which city hosts the label? Fall Out Boy"]
    assert demo.queries[1] == "Which city hosts the label? Fall Out Boy"
    with pytest.raises(ValueError, match="second_query"):
        teacher_trajectory(example, ScriptedSearch(search.results), second_query="oracle")


def test_sft_and_grpo_questions_never_overlap():
    """The preset's SFT scripts the first N train questions and GRPO skips them (467 were shared before)."""
    from helpers.data import load_examples
    from helpers.experiment import make_plan
    from helpers.sft import sft_examples

    plan = make_plan("h200", "x")
    sft = sft_examples(plan.sft)
    grpo = load_examples(plan.grpo.split, data_source=plan.grpo.data_source, limit=plan.grpo.limit, skip=plan.grpo.skip)
    assert len(sft) == plan.sft.limit and len(grpo) > 0
    assert not {e.id for e in sft} & {e.id for e in grpo}
    assert {e.data_source for e in sft} == {"nq", "hotpotqa"}  # the file is mixed: no reshuffle needed


class IdSearch(ScriptedSearch):
    """ScriptedSearch whose items carry corpus ids: results are {query: [(title, content, id), ...]}."""

    def search(self, query):
        self.queries.append(query)
        items = [SearchItem(title=t, content=c, passage_id=i) for t, c, i in self.results.get(query, [])]
        return SearchResult(ok=True, items=items, latency=0.0)


def _bridge_case(data_source="hotpotqa"):
    from types import SimpleNamespace

    question = "Which band from Wilmette signed with the label that released Take This to Your Grave?"
    example = SimpleNamespace(id="b1", question=question, answers=["Fall Out Boy"], data_source=data_source,
                              metadata={"gold_passage_ids": ["g-band", "g-label"]})
    search = IdSearch({
        question: [("Fall Out Boy", "Fall Out Boy, from Wilmette, signed with Fueled Ramen in 2003.", "g-band")],
        "Fueled Ramen": [("Fueled Ramen", "An American record label that released Take This to Your Grave.",
                          "g-label")],
    })
    return example, search


def test_a_decomposing_teacher_searches_the_bridge_and_answers_from_the_first_evidence():
    example, search = _bridge_case()
    demo = teacher_trajectory(example, search, decompose=1.0)
    assert demo.queries == [example.question, "Fueled Ramen"] and demo.decomposed and demo.answer_search == 0
    tools = [m["content"] for m in demo.messages if m["role"] == "tool"]
    assert "Fall Out Boy" in tools[0] and "Fall Out Boy" not in tools[1]  # the answer is only in the first
    assert demo.messages[-1] == {"role": "assistant", "content": "Answer: Fall Out Boy"}
    plain = teacher_trajectory(example, search, decompose=0.0)
    assert plain.queries == [example.question] and not plain.decomposed
    nq, nq_search = _bridge_case("nq")
    assert teacher_trajectory(nq, nq_search, decompose=1.0).search_calls == 1  # bridges are HotpotQA's
    example.metadata["gold_passage_ids"] = ["g-band"]  # nothing left to find: no second search
    assert teacher_trajectory(example, search, decompose=1.0).search_calls == 1
    with pytest.raises(ValueError):
        teacher_trajectory(example, search, decompose=1.5)


def test_share_picks_the_same_questions_whatever_the_order():
    from helpers.teacher import in_share

    keys = [f"q{i}" for i in range(2000)]
    picked = [k for k in keys if in_share(k, 0.3)]
    assert 0.26 < len(picked) / len(keys) < 0.34
    assert picked == [k for k in reversed(keys) if in_share(k, 0.3)][::-1]
    assert not any(in_share(k, 0.0) for k in keys) and all(in_share(k, 1.0) for k in keys)


@pytest.fixture(scope="module")
def fixture_index():
    import json
    from pathlib import Path

    from helpers.search import local

    rows = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "search" / "corpus.jsonl")
            .read_text().splitlines() if line.strip()]
    return local.LocalIndex.from_rows(rows)


def test_keyword_queries_are_names_then_the_rarest_words_never_the_question_again(fixture_index):
    from helpers.search.local import analyze
    from helpers.teacher import keyword_queries

    question = "who was the actress Shirley Temple and which river flows through Paris"
    queries = keyword_queries(question, fixture_index)
    assert queries[:3] == ["Shirley Temple Paris", "Shirley Temple", "Paris"]
    assert all(analyze(q) != analyze(question) and "who" not in q.split() for q in queries)
    assert len(queries[3].split()) == 3 and all(w in question.split() for q in queries[3:] for w in q.split())


def test_the_first_query_is_rewritten_only_where_keywords_retrieve_more_gold(fixture_index):
    from types import SimpleNamespace

    from helpers.search import local
    from helpers.teacher import rewritten_first_query

    search = local.LocalSearchClient(fixture_index, topk=1)
    missed = SimpleNamespace(id="r1", question="who was the actress Shirley Temple and which river flows through Paris",
                             answers=["Seine"], data_source="nq", metadata={"gold_passage_ids": ["wfix00000003"]})
    demo = teacher_trajectory(missed, search, rewrite="gain")
    assert demo.queries == ["Paris"] and demo.rewritten and demo.answer == "Seine"
    assert teacher_trajectory(missed, search).queries[0] == missed.question  # off by default
    found = SimpleNamespace(id="r2", question="what tower was built in paris from 1887 to 1889 near the river",
                            answers=["Champ de Mars"], data_source="nq", metadata={"gold_passage_ids": ["wfix00000002"]})
    assert rewritten_first_query(found, search, ["wfix00000002"], "gain") is None  # the question already finds it
    kept = rewritten_first_query(found, search, ["wfix00000002"], "no_loss")
    assert kept and kept != found.question and "Champ de Mars" in search.search(kept).items[0].content
    spelled = SimpleNamespace(**{**vars(missed), "answers": ["Paris"]})
    assert rewritten_first_query(spelled, search, ["wfix00000003"], "gain") is None  # never spells the answer
    with pytest.raises(ValueError):
        rewritten_first_query(found, search, ["wfix00000002"], "always")


def test_the_call_marker_warning_names_too_little_training_before_the_tokenizer():
    from helpers.sft import ENOUGH_DEMONSTRATIONS_SEEN, call_marker_warning

    assert call_marker_warning(None, 1, 1) is None and call_marker_warning(0.9, 1, 1) is None
    little = call_marker_warning(0.04, 2, 1)
    assert "0.04" in little and "too few" in little and "fast profile" in little and "tokenizer" not in little
    trained = call_marker_warning(0.04, ENOUGH_DEMONSTRATIONS_SEEN, 20)
    assert "tokenizer splits the marker" in trained and "too few" not in trained


def test_the_teacher_shows_the_items_a_rollout_would_show(tokenizer):
    """The demonstration's observation is cut where the rollout cuts it: every kept item's tool turn
    fits the budget, rendered through the whole chat template, and one more item would not."""
    from helpers.protocol import build_messages, render_tokens
    from helpers.rollout import search_call_message

    long = "Wilmette is a village in Cook County, Illinois, on the shore of Lake Michigan. " * 4
    items = [("Fueled Ramen", "A record label based in Wilmette, Illinois. " + long)] + \
        [(f"Other {k}", long) for k in range(5)]
    example = SearchExample(id="q1", question="Where is Fueled Ramen based?", answers=["Wilmette"], data_source="nq")
    search = ScriptedSearch({example.question: items})
    budget = 206  # where counting the content alone, plus a fixed overhead, would keep one item too many
    demo = teacher_trajectory(example, search, tokenizer, max_tool_response_tokens=budget)
    shown = demo.messages[3]["content"]
    kept = shown.count("Title:")
    assert 1 <= kept < len(items)

    before = [*build_messages(example.question), search_call_message(example.question, "call_1")]
    closed = render_tokens(tokenizer, before, add_generation_prompt=False)

    def tool_turn_tokens(count: int) -> int:
        result = search.search(example.question)
        content = format_results(SearchResult(ok=True, items=result.items[:count], latency=0.0))
        return len(render_tokens(tokenizer, [*before, tool_message("call_1", content)], add_generation_prompt=True)) - len(closed)

    assert tool_turn_tokens(kept) <= budget < tool_turn_tokens(kept + 1)
