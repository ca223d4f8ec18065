"""The outcome reward: one Answer line, normalised exact match, 1 / 0 / -0.1."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.reward import FORMAT_PENALTY, RewardResult, extract_answer, normalize_answer, score_answer


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("The Eiffel Tower.", "eiffel tower"),
        ("  A   tale of  Two Cities! ", "tale of two cities"),
        ("«Lyon», France", "lyon france"),
        ("anthem", "anthem"),  # 'an' only as a word
        ("Théâtre—de l’Odéon", "théâtrede lodéon"),
        ("", ""),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Answer: Paris", "Paris"),
        ("I searched twice.\n  answer:   Lyon, France  \n", "Lyon, France"),
        ("ANSWER:France", "France"),
        ("Answer: Paris\nAnswer: Lyon", None),  # two answer lines
        ("Answer:   ", None),  # empty
        ("Answer:\nParis", None),  # the answer must be on its line
        ("The answer: Paris", None),  # not at the start of a line
        ("Paris", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("newline", ["\u2028", "\u2029", "\x85", "\r", "\x0b", "\x0c"])
def test_every_unicode_line_break_separates_answer_lines(newline):
    assert extract_answer(f"Answer: Paris{newline}Answer: Lyon") is None  # two answers, not one
    assert extract_answer(f"I looked it up.{newline}Answer: Lyon") == "Lyon"
    assert score_answer(f"Answer: Paris{newline}Answer: Lyon", ["Paris"]).reward == FORMAT_PENALTY


@pytest.mark.parametrize("text", ["An\u017fwer: Paris", "AN\u017fWER: Paris", "Answer\uff1a Paris", "\u0391nswer: Paris"])
def test_look_alike_letters_do_not_make_an_answer_line(text):
    assert extract_answer(text) is None


def test_score_answer_three_levels():
    assert score_answer("Answer: The Eiffel Tower.", ["eiffel tower"]) == RewardResult(1.0, True, True, "The Eiffel Tower.")
    assert score_answer("Answer: Lyon", ["Paris", "France"]) == RewardResult(0.0, True, False, "Lyon")
    assert score_answer("Lyon", ["Lyon"]) == RewardResult(FORMAT_PENALTY, False, False, None)
    assert score_answer("Answer: Lyon\nanswer: Lyon", ["Lyon"]).reward == FORMAT_PENALTY


def test_a_turn_with_tool_call_markup_is_never_a_valid_answer():
    text = '<tool_call>{"name": "search"}</tool_call>\nAnswer: Paris'
    assert score_answer(text, ["Paris"]) == RewardResult(FORMAT_PENALTY, False, False, None)
    assert score_answer("<tool_call> Answer: Paris", ["Paris"]).reward == FORMAT_PENALTY


def test_an_answer_that_normalises_to_nothing_matches_nothing():
    assert score_answer("Answer: the", ["a"]) == RewardResult(0.0, True, False, "the")


def test_any_reference_may_match():
    assert score_answer("Answer: JFK", ["John F. Kennedy", "jfk"]).exact_match


lines = st.sampled_from(["Answer:", "answer: ", "Answer: Paris", "\n", " ", "the", "an", ".", "<tool_call>", "é", "\r\n"])
texts = st.one_of(st.text(max_size=60), st.lists(st.one_of(lines, st.text(max_size=5)), max_size=10).map("".join))
references = st.lists(st.text(max_size=12), max_size=3)


@settings(max_examples=3000, deadline=None)
@given(texts, references)
def test_reward_never_raises_and_stays_in_its_three_levels(text, refs):
    result = score_answer(text, refs)
    assert result.reward in {1.0, 0.0, FORMAT_PENALTY}
    assert result.valid_format == (result.reward != FORMAT_PENALTY)
    assert result.exact_match == (result.reward == 1.0)
    if result.valid_format:
        assert result.answer == extract_answer(text)


@settings(max_examples=1500, deadline=None)
@given(st.text(max_size=40))
def test_normalisation_is_idempotent_and_matches_itself(answer):
    once = normalize_answer(answer)
    assert normalize_answer(once) == once
    if len(f"Answer: {answer}".splitlines()) == 1 and once and "<tool_call>" not in answer:
        variant = answer.upper() if answer.isascii() else answer
        assert score_answer(f"Answer: {answer}", [f"'{variant}'!"]).reward in {1.0, FORMAT_PENALTY}


def test_one_matcher_finds_a_gold_answer_inside_a_text_on_word_boundaries():
    from helpers.reward import contains_answer, matching_answer

    assert matching_answer("It was built by Gustave Eiffel in 1889.", ["1887", "1889"]) == "1889"
    assert not contains_answer("in 18890 years", ["1889"])  # whole words only
    assert contains_answer("«Théâtre de l’Odéon», Paris", ["Theatre", "théâtre de l'Odéon"])  # Unicode punctuation
    assert not contains_answer("the answer", ["The"])  # an answer that normalises to nothing matches nothing
    corpus = normalize_answer("The Eiffel Tower, Paris.")
    assert contains_answer(corpus, ["eiffel tower"], normalized=True)
