"""Years joined by a dash without spaces ("(1812–1815)", "1939-1945", "1917–18") are stated years for the
multi-hop answer check, as spaced ones are; a year inside a longer number, a date or a word is not, and the
reward's normalisation is not touched."""

from __future__ import annotations

import pytest

from helpers.multihop import questions, verify
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.reward import normalize_answer

from fixtures.multihop_corpus import with_distractors

SPAN_WAR = "The War of Ardwen (1812–1815) was a conflict between two river kingdoms. It ended with a treaty."
HYPHEN_WAR = "The Selby Rising (1939-1945) was an uprising in the fen country. It failed."
CHARTER = ("The Ardwen Charter is a treaty. It closed the War of Ardwen and the Selby Rising, and its text "
           "was printed in the river towns.")


@pytest.mark.parametrize("text, year", [
    (SPAN_WAR, "1812"),
    (SPAN_WAR, "1815"),  # en dash
    (HYPHEN_WAR, "1945"),  # hyphen-minus
    ("The siege (1939—1945) ended in a truce.", "1939"),  # em dash
    ("Ada Park (1866\u20101960) was a painter.", "1960"),  # Unicode hyphen
    ("He played in the 1917–18 season.", "1917"),  # the first year of an abbreviated span
    ("He served from 1942–1949; then he retired.", "1949"),
    ("The war (1812 – 1815) was short.", "1815"),  # a spaced dash read as before
])
def test_a_year_joined_to_another_by_a_dash_is_stated(text, year):
    assert verify.contains(text, year)


@pytest.mark.parametrize("text, year", [
    ("He played in the 1917–18 season.", "1918"),  # only the first year is written in full
    ("She was born on 1963-01-22 in Leeds.", "1963"),  # a date
    ("ISBN 0-06-1812-1815-7", "1815"),  # inside a longer run of numbers and dashes
    ("Part 12345-1815 is a valve.", "1815"),  # after a longer number
    ("Part 1812–18150 is a valve.", "1812"),  # before a longer number
    ("Coach: Blackstock2002–2006", "2002"),  # glued to a word
])
def test_a_year_inside_a_longer_number_or_a_word_is_not_stated(text, year):
    assert not verify.contains(text, year)


def test_the_rewards_normalisation_is_unchanged():
    assert normalize_answer("(1812–1815)") == "18121815"
    assert normalize_answer("1939-1945") == "19391945"


def _bridge(answer: str) -> dict:
    return {"kind": "bridge", "answers": [answer]}


def test_a_bridge_whose_last_passage_states_the_year_in_a_span_passes():
    texts = ["Ardwen Charter\n" + CHARTER, "War of Ardwen\n" + SPAN_WAR]
    assert verify.answer_in_last_not_first(_bridge("1815"), texts)
    assert verify.answer_in_last_not_first(_bridge("1812"), texts)


def test_a_bridge_whose_earlier_passage_states_the_year_in_a_span_fails():
    seed = "Ada Park (1866–1960) was a painter. She painted the War of Ardwen."
    texts = ["Ada Park\n" + seed, "Ben Hale\nBen Hale (born 1866) was a painter."]
    assert not verify.answer_in_last_not_first(_bridge("1866"), texts)


def test_a_comparison_reads_each_year_in_its_own_passages_span():
    candidate = {"kind": "comparison", "years": ["1812", "1939"], "compared": [1, 2]}
    texts = ["Ardwen Charter\n" + CHARTER, "War of Ardwen\n" + SPAN_WAR, "Selby Rising\n" + HYPHEN_WAR]
    assert verify.answer_in_last_not_first(candidate, texts)
    # a seed passage that states a hidden entity's year in a span decides the question alone
    leaked = [texts[0] + " The Selby Rising (1939–1945) is its subject."] + texts[1:]
    assert not verify.answer_in_last_not_first(candidate, leaked)


@pytest.fixture(scope="module")
def corpus():
    return Corpus(passages_from_rows(with_distractors([("Ardwen Charter", CHARTER), ("War of Ardwen", SPAN_WAR),
                                                       ("Selby Rising", HYPHEN_WAR)])))


def test_the_fifth_sets_span_bridges_pass_the_answer_check(corpus):
    made = questions.time_place_from_seed(corpus, corpus.by_title["Ardwen Charter"][0], 0)
    spans = [c for c in made if c.relation in ("began", "ended")]
    assert spans
    for candidate in spans:
        assert candidate.answers[0] in ("1812", "1815", "1939", "1945")
        assert verify.answer_in_last_not_first(candidate.to_dict(), corpus.texts(candidate.passage_ids))


def test_the_sixth_passs_comparisons_of_dash_spans_pass_the_answer_check(corpus):
    made = questions.comparisons_from_seed(corpus, corpus.by_title["Ardwen Charter"][0], 0)
    assert made
    for candidate in made:
        assert verify.answer_in_last_not_first(candidate.to_dict(), corpus.texts(candidate.passage_ids))
