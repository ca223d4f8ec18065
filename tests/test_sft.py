"""Scripted teacher and SFT datums (tokenizer only, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.data import SearchExample
from helpers.search.types import SearchItem, SearchResult, SearchStats
from helpers.sft import (
    SFTConfig,
    build_sft_datum,
    find_answer_in,
    run_sft,
    teacher_trajectory,
    weight_sft_micro_batch,
)


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


def test_teacher_searches_again_with_the_top_title_when_needed():
    example = SearchExample(id="h1", question="Which city hosts the band's label?", answers=["Wilmette"],
                            data_source="hotpotqa")
    search = ScriptedSearch({
        "Which city hosts the band's label?": [("Fall Out Boy", "An American rock band."), ("Other", "x")],
        "Which city hosts the band's label? Fall Out Boy": [("Fall Out Boy", "The band formed in wilmette, Illinois.")],
    })
    demo = teacher_trajectory(example, search)
    assert search.queries == ["Which city hosts the band's label?", "Which city hosts the band's label? Fall Out Boy"]
    assert demo.search_calls == 2 and demo.answer == "wilmette"
    assert demo.messages[-1] == {"role": "assistant", "content": "Answer: wilmette"}
    roles = [m["role"] for m in demo.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]


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
    [scaled] = weight_sft_micro_batch([item], total_samples=4)
    original = item.datum.loss_fn_inputs["weights"].to_numpy()
    assert scaled.loss_fn_inputs["weights"].to_numpy() == pytest.approx(original * 0.25)


def test_sft_refuses_evaluation_splits(tmp_path):
    with pytest.raises(ValueError, match="train split"):
        run_sft(SFTConfig(split="test", out=str(tmp_path / "sft"), resume=False), service=object(),
                search_client=object(), examples=[])
