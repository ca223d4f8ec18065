"""The fourth set of rules: a place's population, the place a city is the largest city or the seat of,
and a person's parent, read only where the sentence's subject is the passage's; their questions, and how
they join the synthetic split without moving a question of the first three sets."""

from __future__ import annotations

import pytest

from helpers.multihop import build, questions
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.multihop.facts import read_lead as read_first_two
from helpers.multihop.kin_place import with_kin_place
from helpers.multihop.more_facts import with_more

from fixtures.multihop_corpus import (BAND, FESTIVAL, POET, SCULPTOR, assert_earlier_passes_unchanged,
                                     assert_joins_last_and_moves_no_row,
                                     with_distractors)

REGATTA = ("The Tidewater Regatta is an annual sailing race off the Welsh coast. Its 1990 race started at "
           "Calder Bay, was won by Rhys Morgan, and ended in Merrow Harbour.")
TOWN = ("Calder Bay is a town in and the county seat of Wenlock County, in the state of Marland. It has a "
        "population of 23,620. The town grew around its harbour.")
CITY = "Merrow Harbour is the capital and largest city in Eastmark. It lies at the mouth of the Merrow."
SAILOR = ("Rhys Morgan (born 1961) is a Welsh yachtsman. He is the son of former Olympic rower Huw Morgan. "
          "Morgan Sailing School was named after him.")


def _rows() -> list[dict]:
    return with_distractors([("Tidewater Regatta", REGATTA), ("Calder Bay", TOWN), ("Merrow Harbour", CITY),
                             ("Rhys Morgan", SAILOR), ("Harbour Lights Festival", FESTIVAL),
                             ("Maria Delacroix-Hunt", SCULPTOR), ("Quayside Brass Band", BAND), ("Gwen Arliss", POET)])


@pytest.fixture(scope="module")
def corpus():
    return Corpus(passages_from_rows(_rows()))


def read_lead(passage_id: str, title: str, text: str):
    """A lead as the corpus reads it: every set's facts."""
    return with_kin_place(with_more(read_first_two(passage_id, title, text), text), text)


# ------------------------------------------------------------------ reading the facts


@pytest.mark.parametrize("title, text, facts", [
    ("Calder Bay", TOWN, {"seat_of_county": "Wenlock County", "population": "23,620"}),
    ("Merrow Harbour", CITY, {"largest_city_of": "Eastmark"}),
    ("Rhys Morgan", SAILOR, {"son_of": "Huw Morgan"}),  # the name stops at its sentence's end
    ("Belize City", "Belize City is the largest city in Belize and was once the capital of British Honduras.",
     {"largest_city_of": "Belize"}),
    ("Cleveland", "Cleveland is a major city in the U.S. state of Ohio, and the county seat of Cuyahoga County. "
                  "The city proper has a population of 388,072, making it the 51st-largest city in the country.",
     {"seat_of_county": "Cuyahoga County", "population": "388,072"}),
    ("Tavares", "Tavares is a city in Lake County, Florida, United States. It is the county seat of Lake "
                         "County. The Town Hall stands on Main Street.", {"seat_of_county": "Lake County"}),
    ("Sacramento", "Sacramento is the capital city of the U.S. state of California. Sacramento's "
                               "estimated 2018 population of 501,334 makes it the sixth-largest city in California.",
     {"population": "501,334"}),
    ("New York City", "New York City is the most populous city in the United States. With an estimated 2017 "
                      "population of 8,622,698, New York City is also the most densely populated major city.",
     {"population": "8,622,698"}),
    ("Sullivan County, New Hampshire", "Sullivan County is a county in the U.S. state of New Hampshire. As of the "
                                       "2010 census, the population was 43,742, making it the second-least populous "
                                       "county in New Hampshire.", {"population_2010": "43,742"}),
    ("Brent Barry", "Brent Barry (born 1971) is an American retired professional basketball player. He is the son "
                    "of former NBA player Rick Barry.", {"son_of": "Rick Barry"}),
    ("Icarus", "In Greek mythology, Icarus is the son of the master craftsman Daedalus, the creator of the "
               "Labyrinth.", {"son_of": "Daedalus"}),
])
def test_the_fourth_rules_read_a_fact_of_the_passages_subject(title, text, facts):
    lead = read_lead("p", title, text)
    assert {k: v for k, v in lead.kin_place.items() if k in facts} == facts
    earlier = {**lead.facts, **lead.ties, **lead.more}
    assert not set(lead.kin_place) & set(earlier)  # no relation read twice


@pytest.mark.parametrize("title, text, relation", [
    # a population that belongs to another subject, or is no single count
    ("Kelso", "Kelso is a town in Fenwick County, which has a population of 40,210.", "population"),
    ("Kelso", "Kelso is a town near Brill. Brill has a population of 9,000 and a market.", "population"),
    ("Kelso", "Kelso is a village in Brill, a district with a population of 9,000.", "population"),
    ("Philadelphia", "Philadelphia is the largest city in the Commonwealth of Pennsylvania. The Delaware Valley's "
                     "population of 7,206,807 ranks it as the eighth-largest metropolitan area.", "population"),
    ("Dakar", "Dakar is the capital and largest city of Senegal. The city proper has a population of 1,030,594, "
              "whereas the population of the metropolitan area is 2,452,656.", "population"),
    ("Vienna", "Vienna is the federal capital and largest city of Austria. It is Austria's primate city, with a "
               "population of about 1.9 million.", "population"),
    ("Lubec", "Lubec is a town in Washington County, Maine, United States. The population was 1,359 at the 2010 "
              "census.", "population"),  # the census count the earlier rules read
    # the largest city: not the first, not of a lower-case place, not of another subject
    ("Tartu", "Tartu is the second largest city of Estonia, after Tallinn.", "largest_city_of"),
    ("Bath", "Bath is the largest city in the ceremonial county of Somerset.", "largest_city_of"),
    ("Allen's Landing", "Allen's Landing is the birthplace of the city of Houston, the largest city in Texas.",
     "largest_city_of"),
    ("Riga", "Riga is the capital and largest city of Latvia.", "largest_city_of"),  # the second set's part-of
    # a seat that is no county's, or another place's
    ("St Paul's Cathedral", "St Paul's Cathedral is an Anglican cathedral, the seat of the Bishop of London.",
     "seat_of_county"),
    ("Old Chittenden County Courthouse", "The Old Chittenden County Courthouse was a historic government building in "
                                         "downtown Burlington, the county seat of Chittenden County, Vermont.",
     "seat_of_county"),
    # two parents, a title after the name, a name cut at an abbreviation's full stop
    ("Nancy Sinatra", "Nancy Sinatra (born 1940) is an American singer. She is the elder daughter of Frank Sinatra "
                      "and Nancy Barbato.", "daughter_of"),
    ("Saul Metzstein", "Saul Metzstein is a Scottish film director. He is the son of architect Isi Metzstein, and "
                       "Danielle Kahn.", "son_of"),
    ("Adrian Conan Doyle", "Adrian Conan Doyle (1910–1970) was the youngest son of Sir Arthur Conan Doyle and his "
                           "second wife Jean.", "son_of"),
    ("Lady Alexandra Curzon", "Lady Alexandra Curzon (1904–1995) was the third daughter of George Curzon, 1st "
                              "Marquess Curzon of Kedleston.", "daughter_of"),
    ("Saint Emeric of Hungary", "Saint Emeric (1007–1031) was the son of King St. Stephen I of Hungary.", "son_of"),
    ("Juliet", "Juliet is the female protagonist of a tragedy. Juliet is the only daughter of the patriarch of the "
               "House of Capulet.", "daughter_of"),
    # a parent is read for a person only
    ("Hansen", "Hansen is a Scandinavian patronymic surname. It is the son of nobody in particular.", "son_of"),
])
def test_the_fourth_rules_leave_what_is_not_the_subjects_single_fact(title, text, relation):
    assert relation not in read_lead("p", title, text).kin_place


def test_a_name_stops_at_its_sentence_end():
    lead = read_lead("p", "Racine", "Racine is a city in southeastern Wisconsin. It is the seat of Racine "
                                               "County. The County Board meets downtown.")
    assert lead.kin_place.get("seat_of_county") == "Racine County"
    assert read_lead("p", "Rhys Morgan", SAILOR).kin_place["son_of"] == "Huw Morgan"


# ------------------------------------------------------------------ questions about them


def test_the_fourth_set_makes_bridge_questions_through_the_chain(corpus):
    seed = corpus.by_title["Tidewater Regatta"][0]
    made = questions.kin_place_from_seed(corpus, seed, 0)
    assert {c.chain[-1] for c in made} == {"Calder Bay", "Merrow Harbour", "Rhys Morgan"}
    answers = {c.relation: c.answers[0] for c in made}
    assert answers.get("son_of") == "Huw Morgan" and answers.get("largest_city_of") == "Eastmark"
    assert {answers.get("population"), answers.get("seat_of_county")} & {"23,620", "Wenlock County"}
    for candidate in made:
        assert candidate.kind == "bridge" and candidate.question.endswith("?") and len(candidate.chain) == 2
        assert not any(name in candidate.question for name in ("Calder Bay", "Merrow Harbour", "Rhys Morgan"))


@pytest.mark.parametrize("relation, phrase", [
    ("population", "population of"), ("largest_city_of", "the largest city"), ("seat_of_county", "seat of which county"),
    ("seat_of_municipality", "seat of which municipality"), ("son_of", "son"), ("daughter_of", "daughter"),
])
def test_each_new_relation_has_its_own_wording(relation, phrase):
    template = questions.bridge_template(relation)
    assert "{e}" in template and phrase in template


def test_the_fourth_set_does_not_change_the_earlier_sets_questions(corpus):
    """No earlier pass reads the fourth set's facts: clearing them gives the same questions."""
    assert_earlier_passes_unchanged(corpus, "kin_place", (questions.from_seed, questions.ties_from_seed, questions.more_from_seed),
                                    questions.kin_place_from_seed)


# ------------------------------------------------------------------ the split


def test_the_fourth_set_joins_the_split_last_and_moves_no_earlier_row(tmp_path, corpus, monkeypatch):
    assert_joins_last_and_moves_no_row(build, corpus, tmp_path, monkeypatch, "kin_place", "kin_place_from_seed")


# ------------------------------------------------------------------ wordings


def test_the_largest_city_question_needs_no_appended_instruction():
    """Both wordings ask for the country or region in the question itself ("... is the largest city of which
    country or region?"); neither tells the reader what not to answer."""
    for pick in (0, 1):
        template = questions.bridge_template("largest_city_of", lambda options: options[pick])
        assert template.endswith("?") and template.count("?") == 1 and "Answer with" not in template
        assert "country or region" in template


def test_a_parent_question_does_not_repeat_the_kin_noun(corpus):
    """"The son mentioned in the passage about X is the son of whom?" says "son" twice: the second wording
    asks for a parent instead."""
    assert questions.bridge_template("son_of", lambda options: options[1]) == "Who is a parent of {e}?"
    assert questions.bridge_template("daughter_of", lambda options: options[1]) == "Who is a parent of {e}?"
    seed = corpus.by_title["Tidewater Regatta"][0]
    for candidate in questions.kin_place_from_seed(corpus, seed, 0):
        assert "is the son of whom" not in candidate.question and "is the daughter of whom" not in candidate.question
