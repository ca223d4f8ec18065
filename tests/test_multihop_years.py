"""The sixth pass: comparisons on the years every set of rules reads (which war began first, which newspaper
was founded first, who was born first), and how they join the synthetic split without moving a question of
the first five sets."""

from __future__ import annotations

import pytest

from helpers.multihop import build, questions, verify, years
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.multihop.facts import Lead

from fixtures.multihop_corpus import (BAND, FESTIVAL, POET, SCULPTOR, assert_earlier_passes_unchanged,
                                     assert_joins_last_and_moves_no_row, passing_verdicts, with_distractors)

TREATY = ("The Treaty of Calder is a peace treaty. It closed the Marland War and the Eastmark Rebellion, and its "
          "text was printed by the Harbour Gazette and the Quayside Courier.")
WAR = "The Marland War (1921 – 1924) was a conflict between two coastal provinces. It was fought at sea."
REBELLION = "The Eastmark Rebellion (1898 – 1901) was an uprising in the hill country. It failed."
GAZETTE = "The Harbour Gazette is a weekly newspaper. Founded in 1887, the newspaper is printed on the quay."
COURIER = "The Quayside Courier is a daily newspaper. Founded in 1902, the newspaper is sold at the harbour."
# a person whose birth year only the third set reads (a lifespan with places), and the coach his passage names
PLAYER = ("Rhys Morgan (4 May 1931, Pembrey – 2 June 1990, Llanelli) was a Welsh rugby player. He was coached by "
          "Owen Price.")
COACH = "Owen Price (born 1911) is a Welsh rugby coach. He coached in the valleys."
# near misses: two newspapers founded in one year, and a seed passage that states a hidden entity's year
ALMANAC = "The Calder Almanac is a yearbook. It lists the Harbour Gazette and the Bay Herald."
HERALD = "The Bay Herald is a Sunday newspaper. Founded in 1887, the newspaper is printed in the bay."
CHRONICLE = ("The Marland Chronicle is a history book. It tells of the Marland War, fought from 1921 to 1924, "
             "and of the Eastmark Rebellion.")
HIDDEN = ("Marland War", "Eastmark Rebellion", "Harbour Gazette", "Quayside Courier", "Owen Price", "Bay Herald")


def _rows() -> list[dict]:
    return with_distractors([("Treaty of Calder", TREATY), ("Marland War", WAR), ("Eastmark Rebellion", REBELLION),
                             ("Harbour Gazette", GAZETTE), ("Quayside Courier", COURIER), ("Rhys Morgan", PLAYER),
                             ("Owen Price", COACH), ("Calder Almanac", ALMANAC), ("Bay Herald", HERALD),
                             ("Marland Chronicle", CHRONICLE), ("Harbour Lights Festival", FESTIVAL),
                             ("Maria Delacroix-Hunt", SCULPTOR), ("Quayside Brass Band", BAND),
                             ("Gwen Arliss", POET)])


@pytest.fixture(scope="module")
def corpus():
    return Corpus(passages_from_rows(_rows()))


def _made(corpus, title: str) -> list[questions.Candidate]:
    return questions.comparisons_from_seed(corpus, corpus.by_title[title][0], 0)


# ------------------------------------------------------------------ the years


@pytest.mark.parametrize("title, found", [
    ("Marland War", {"began": "1921", "ended": "1924"}),  # the fifth set's span
    ("Harbour Gazette", {"founded": "1887"}),  # the fifth set's founding year in an opening phrase
    ("Rhys Morgan", {"born": "1931", "died": "1990"}),  # the third set's lifespan with places
    ("Owen Price", {"born": "1911"}),  # the first set's
])
def test_every_sets_years_are_gathered(corpus, title, found):
    assert corpus.lead(title).years == found


def test_a_name_or_a_count_is_no_year():
    lead = Lead("p", "Thing", "thing", facts={"directed_by": "Ann Lee"},
                more={"population_2010": "1,359", "signed": "1846"},
                time_place={"capital": "Merrow", "founded": "c. 1900"})
    assert years.year_facts(lead) == {"signed": "1846"}


def test_the_earlier_sets_value_counts_where_two_read_one_relation():
    lead = Lead("p", "Thing", "thing", facts={"born": "1901"}, more={"born": "1902", "died": "1950"})
    assert years.year_facts(lead) == {"born": "1901", "died": "1950"}


@pytest.mark.parametrize("first, second, compared", [
    ("began", "began", True), ("founded", "formed", True), ("premiered", "released", True),
    ("signed", "signed", True), ("began", "founded", False), ("born", "died", False), ("signed", "written", False),
])
def test_only_years_of_one_group_compare(first, second, compared):
    assert bool(questions.comparable_years({first: "1900"}, {second: "1901"})) == compared


def test_equal_years_never_compare():
    assert questions.comparable_years({"founded": "1887"}, {"founded": "1887"}) == []


# ------------------------------------------------------------------ the questions


def test_two_entities_of_one_passage_are_compared_by_their_descriptions(corpus):
    made = _made(corpus, "Treaty of Calder")
    by_pair = {frozenset(c.chain[1:]): c for c in made}
    wars = by_pair[frozenset({"Marland War", "Eastmark Rebellion"})]
    assert wars.kind == "comparison" and len(wars.chain) == 3 and wars.compared == [1, 2]
    assert wars.answers == ["Eastmark Rebellion"]  # 1898 (or 1901) before 1921 (or 1924)
    assert wars.relation in ("began", "ended") and set(wars.descriptions) == {"conflict", "uprising"}
    assert "both mentioned in the Wikipedia passage about Treaty of Calder" in wars.question
    assert wars.question.startswith(("Which began first", "Which ended first", "Of the"))
    papers = by_pair[frozenset({"Harbour Gazette", "Quayside Courier"})]
    assert papers.answers == ["Harbour Gazette"] and "founded" in papers.question
    for candidate in made:
        assert not any(name in candidate.question for name in HIDDEN) and candidate.question.endswith("?")


def test_the_seed_is_compared_with_an_entity_its_passage_names(corpus):
    [made] = [c for c in _made(corpus, "Rhys Morgan") if len(c.chain) == 2]
    assert made.chain == ["Rhys Morgan", "Owen Price"] and made.compared == [0, 1]
    assert made.answers == ["Owen Price"] and made.years == ["1931", "1911"]
    assert "Rhys Morgan" in made.question and "the Welsh rugby coach mentioned in" in made.question
    assert made.question.startswith(("Who was born first", "Of Rhys Morgan and"))


def test_at_most_a_few_comparisons_per_seed(corpus):
    made = _made(corpus, "Treaty of Calder")
    assert len(made) <= questions.YEARS_PER_SEED + questions.ACROSS_PER_SEED


def test_an_entity_is_compared_with_one_another_passage_names(corpus):
    """Four passages: the seed A names X, another passage B names Y; A and B are named, X and Y described."""
    across = [c for p in corpus.passages for c in questions.comparisons_from_seed(corpus, p, 0) if len(c.chain) == 4]
    assert across
    for made in across:
        a, x, b, y = made.chain
        assert made.compared == [1, 3] and made.kind == "comparison" and a != b
        assert f"mentioned in the Wikipedia passage about {a}" in made.question
        assert f"mentioned in the Wikipedia passage about {b}" in made.question
        assert x not in made.question and y not in made.question
        assert made.answers[0] == (x if int(made.years[0]) < int(made.years[1]) else y)
        assert made.years[0] != made.years[1]
        assert verify.names_hidden(made.to_dict())
        texts = corpus.texts(made.passage_ids)
        # B's passage states neither year (A's is the checks' to refuse: ``answer_in_last_not_first``)
        assert not any(verify.contains(texts[2], year) for year in made.years)
        refused = any(verify.contains(texts[0], year) for year in made.years)
        assert verify.answer_in_last_not_first(made.to_dict(), texts) != refused


def test_names_hidden_still_hides_a_comparisons_described_entities(corpus):
    made = next(c for p in corpus.passages for c in questions.comparisons_from_seed(corpus, p, 0) if len(c.chain) == 4)
    named = dict(made.to_dict(), question=made.question.replace("the " + made.descriptions[1], made.chain[3], 1))
    assert made.chain[3] in named["question"] and not verify.names_hidden(named)


def test_two_newspapers_of_one_year_are_not_compared(corpus):
    assert not [c for c in _made(corpus, "Calder Almanac") if set(c.chain[1:]) == {"Harbour Gazette", "Bay Herald"}]


def test_a_seed_passage_that_states_a_hidden_year_fails_the_check(corpus):
    """The Chronicle states the war's 1921 and 1924: the seed passage alone would decide which began first."""
    made = [c for c in _made(corpus, "Marland Chronicle") if c.relation in ("began", "ended")]
    assert made
    for candidate in made:
        texts = corpus.texts(candidate.passage_ids)
        assert not verify.answer_in_last_not_first(candidate.to_dict(), texts)
    fair = [c for c in _made(corpus, "Treaty of Calder")]
    assert all(verify.answer_in_last_not_first(c.to_dict(), corpus.texts(c.passage_ids)) for c in fair)


def test_each_group_has_its_wording():
    first = lambda options: options[0]  # noqa: E731
    assert years.template("began", first) == "Which began first: {a} or {b}?"
    assert years.template("born", first) == "Who was born first: {a} or {b}?"
    assert years.template("founded", first) == "Which was founded first: {a} or {b}?"
    assert years.template("signed", first) == "Which was signed first: {a} or {b}?"


# ------------------------------------------------------------------ the split


def test_the_sixth_pass_does_not_change_the_earlier_passes_questions(corpus):
    """No earlier pass reads ``Lead.years``: clearing them gives the same questions, and the sixth pass none."""
    assert_earlier_passes_unchanged(corpus, "years", (questions.from_seed, questions.ties_from_seed,
                                                      questions.more_from_seed, questions.kin_place_from_seed,
                                                      questions.time_place_from_seed),
                                    questions.comparisons_from_seed)



def test_the_sixth_pass_joins_the_split_last_and_moves_no_earlier_row(tmp_path, corpus, monkeypatch):
    verdicts = passing_verdicts(corpus, tmp_path / "verdicts.jsonl", questions.comparisons_from_seed, build.SEED)
    assert_joins_last_and_moves_no_row(build, corpus, tmp_path, monkeypatch, "comparisons", "comparisons_from_seed",
                                       verdicts_path=verdicts)


def test_a_comparison_is_kept_only_with_a_passing_verdict(corpus):
    made = next(c for p in corpus.passages for c in questions.comparisons_from_seed(corpus, p, 0)).to_dict()
    ours = dict(made, comparisons=True)
    assert not verify.solvers(ours, {}) and verify.solvers(ours, {}, judged_only=False)
    assert verify.solvers(ours, {made["id"]: {"pass": True}}) and not verify.solvers(ours, {made["id"]: {"pass": False}})
    # a comparison the first set of rules makes (no pass mark) needs a verdict too; an earlier pass's bridge
    # without a verdict is kept, as before
    assert not verify.solvers(made, {}) and verify.solvers(made, {}, judged_only=False)
    assert verify.solvers(dict(made, kind="bridge"), {})
