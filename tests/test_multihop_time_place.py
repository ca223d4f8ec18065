"""The fifth set of rules: when a war or a state began and ended, a founding year stated before or after the
subject's name, a capital in a sentence of its own, a team's home venue and headquarters, and where a person
is from, each read only where the sentence is about the passage's subject; their questions, and how they join
the synthetic split without moving a question of the first four sets."""

from __future__ import annotations


import pytest

from helpers.multihop import build, questions
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.multihop.facts import read_lead as read_first_two
from helpers.multihop.kin_place import with_kin_place
from helpers.multihop.more_facts import with_more
from helpers.multihop.time_place import with_time_place

from fixtures.multihop_corpus import (BAND, FESTIVAL, POET, SCULPTOR, assert_earlier_passes_unchanged,
                                     assert_joins_last_and_moves_no_row,
                                     with_distractors)

ACCORD = ("The Tidewater Accord is a treaty that ended the Marland War. It was drafted in the Republic of Eastmark, "
          "first printed by the Harbour Gazette, and carried on tour by the Calder Rovers.")
CUP = "The Pembrey Cup is a rugby trophy. Its first winner was Rhys Morgan, who lifted it in a storm."
WAR = "The Marland War (1921–1924) was a conflict between two coastal provinces. It ended with the Tidewater Accord."
COUNTRY = ("The Republic of Eastmark is a country on the Northern Sea. The national capital is Merrow Harbour. "
           "Its coast is known for cliffs.")
PAPER = ("The Harbour Gazette is a weekly newspaper. Founded in 1887, the newspaper is printed on the quay. "
         "It sells well.")
TEAM = ("The Calder Rovers are a professional rugby team. The Rovers play their home games at Quayside Park. "
        "The team is headquartered in Porthmadoc, Gwynedd.")
PLAYER = "Rhys Morgan (born 1961) is a former rugby player from Pembrey, Carmarthenshire. He coached the Rovers."
TITLES = ("Marland War", "Republic of Eastmark", "Harbour Gazette", "Calder Rovers", "Rhys Morgan")


def _rows() -> list[dict]:
    return with_distractors([("Tidewater Accord", ACCORD), ("Pembrey Cup", CUP), ("Marland War", WAR),
                             ("Republic of Eastmark", COUNTRY), ("Harbour Gazette", PAPER), ("Calder Rovers", TEAM),
                             ("Rhys Morgan", PLAYER), ("Harbour Lights Festival", FESTIVAL),
                             ("Maria Delacroix-Hunt", SCULPTOR), ("Quayside Brass Band", BAND), ("Gwen Arliss", POET)])


@pytest.fixture(scope="module")
def corpus():
    return Corpus(passages_from_rows(_rows()))


def read_lead(passage_id: str, title: str, text: str):
    """A lead as the corpus reads it: every set's facts."""
    lead = with_kin_place(with_more(read_first_two(passage_id, title, text), text), text)
    return with_time_place(lead, text)


# ------------------------------------------------------------------ reading the facts


@pytest.mark.parametrize("title, text, facts", [
    ("Marland War", WAR, {"began": "1921", "ended": "1924"}),
    ("Republic of Eastmark", COUNTRY, {"capital": "Merrow Harbour"}),
    ("Harbour Gazette", PAPER, {"founded": "1887"}),
    ("Calder Rovers", TEAM, {"home_venue": "Quayside Park", "headquarters": "Porthmadoc, Gwynedd"}),
    ("Rhys Morgan", PLAYER, {"person_from": "Pembrey, Carmarthenshire"}),
    # a span in the first sentence's verb, or in the parentheses after other names
    ("World War II", "World War II (often abbreviated to WWII), also known as the Second World War, was a global war "
                     "that lasted from 1939 to 1945, although related conflicts began earlier.",
     {"began": "1939", "ended": "1945"}),
    ("Korean War", "The Korean War (in Hangul: 한국전쟁 ; Hanja: 韓國戰爭 ; 25 June 1950 – 27 July 1953) was a war between "
                   "North Korea and South Korea.", {"began": "1950", "ended": "1953"}),
    ("Soviet Union", "The Union of Soviet Socialist Republics, commonly known as the Soviet Union, was a socialist "
                     "state in Eurasia that existed from 30 December 1922 to 26 December 1991.",
     {"began": "1922", "ended": "1991"}),
    ("Vietnam War", "The Vietnam War was a conflict that occurred in Vietnam, Laos, and Cambodia from 1 November 1955 "
                    "to the fall of Saigon on 30 April 1975.", {"began": "1955", "ended": "1975"}),
    ("American Revolution", "The American Revolution was a colonial revolt that took place between 1765 and 1783.",
     {"began": "1765", "ended": "1783"}),
    # a founding year before the main clause, or in a later sentence that names the subject
    ("United Artists", "United Artists is an American film and television entertainment studio. Founded in 1919 by "
                       "D. W. Griffith, Charlie Chaplin, Mary Pickford, and Douglas Fairbanks, the studio was premised "
                       "on allowing actors to control their own interests.", {"founded": "1919"}),
    ("Google", "Google LLC is an American multinational technology company. Google was founded in 1998 by Larry Page "
               "and Sergey Brin while they were students.", {"founded": "1998"}),
    ("Rolling Stone", "Rolling Stone is an American biweekly magazine that focuses on popular culture. It was founded "
                      "in San Francisco in 1967 by Jann Wenner.", {"founded": "1967"}),
    ("Las Vegas", "Las Vegas is a major city in Southern Nevada. It is a resort city. Las Vegas, officially "
                  "incorporated in 1911 and named in 1915, is the largest city in the American Southwest.",
     {"incorporated": "1911"}),
    # a capital in a sentence of its own
    ("California", "California is a state in the Pacific Region of the United States. With 39.5 million residents, "
                   "it is the most populous state. The state capital is Sacramento.", {"capital": "Sacramento"}),
    ("Brazil", "Brazil, officially the Federative Republic of Brazil, is the largest country in South America. The "
               "capital is Brasília, and the most populated city is São Paulo.", {"capital": "Brasília"}),
    ("Missouri", "Missouri is a state in the Midwestern United States. The largest urban areas are Kansas City and "
                 "Columbia; the capital is Jefferson City, near the center of the state.", {"capital": "Jefferson City"}),
    ("Greece", "Greece, officially the Hellenic Republic, is a country located in Southern Europe. Athens is the "
               "nation's capital and largest city.", {"capital": "Athens"}),
    # a venue, headquarters, a person's place
    ("Dallas Cowboys", "The Dallas Cowboys are a professional American football team based in Dallas. The team is "
                       "headquartered in Frisco, Texas, and plays its home games at AT&T Stadium in Arlington, Texas.",
     {"home_venue": "AT&T Stadium", "headquarters": "Frisco"}),
    ("Forbes", "Forbes is an American business magazine. Published bi-weekly, it features articles on finance. Its "
               "headquarters is located in Jersey City, New Jersey.", {"headquarters": "Jersey City, New Jersey"}),
    ("George Thorogood", "George Thorogood (born February 24, 1950) is an American musician, singer and songwriter "
                         "from Wilmington, Delaware.", {"person_from": "Wilmington, Delaware"}),
])
def test_the_fifth_rules_read_a_fact_of_the_passages_subject(title, text, facts):
    lead = read_lead("p", title, text)
    assert {k: v for k, v in lead.time_place.items() if k in facts} == facts
    earlier = {**lead.facts, **lead.ties, **lead.more, **lead.kin_place}
    assert not set(lead.time_place) & set(earlier)  # no relation read twice


@pytest.mark.parametrize("title, text, relation", [
    # a span: not "BC", not a person's office, not in a later sentence about another name, not backwards
    ("New Kingdom", "The New Kingdom was an ancient Egyptian state that lasted from 1550 to 1070 BC.",
     "began"),
    ("Woodrow Wilson", "Woodrow Wilson (December 28, 1856 – February 3, 1924) was an American statesman who served as "
                       "President from 1913 to 1921.", "began"),
    ("Marland Republic", "The Marland Republic was a short-lived state. Its successor, the Free Province, existed from "
                         "1930 to 1938.", "began"),
    ("Marland Rising", "The Marland Rising was an uprising that lasted from 1930 to 1921.", "began"),
    ("Marland Rising", "The Marland Rising was an uprising that lasted from 1930 to 1931 and a revolt that lasted from "
                       "1940 to 1941.", "began"),
    # a founding year: of the subject only, stated once, not where an earlier set reads one
    ("University of Texas at Austin", "The University of Texas at Austin is a public research university. Founded in "
                                      "1881, its campus is located in Austin, Texas.", "founded"),
    ("Calder Club", "The Calder Club is a rowing club. Founded in 1901, the club rowed on the river. It was founded in "
                    "1920 again after the war.", "founded"),
    ("Harbour Review", "The Harbour Review is a literary magazine founded in 1950. It was founded in Cardiff in 1951 by "
                       "Ann Jones.", "founded"),
    # a capital: of a governing place, its own, not one an earlier set reads
    ("Vichy France", "Vichy France is the common name of the French State. The capital of France is Paris.", "capital"),
    ("Springfield", "Springfield is a city in Illinois. The capital is Chicago.", "capital"),
    ("Latveria", "Latveria is a country in Europe. Its capital is Doomstadt.", "capital"),  # the second set's
    # a venue or headquarters that is no single name, or another's
    ("Calder Rovers", "The Calder Rovers are a professional rugby team. The Rovers play their home games at the Park "
                      "and the Arena.", "home_venue"),
    ("Harbour Gazette", "The Harbour Gazette is a weekly newspaper. The parent company's headquarters is located in "
                        "London.", "headquarters"),
    # where a person is from: a person's, a place's, not the whole country
    ("Brittany Pierce", "Brittany S. Pierce is a fictional character from Glee.", "person_from"),
    ("Ferdi Taygan", "Ferdi Taygan (born December 5, 1956), is a former professional tennis player from the United "
                     "States.", "person_from"),
])
def test_the_fifth_rules_leave_what_is_not_the_subjects_single_fact(title, text, relation):
    assert relation not in read_lead("p", title, text).time_place


# ------------------------------------------------------------------ questions about them


def test_the_fifth_set_makes_bridge_questions_through_the_chain(corpus):
    made = [c for title in ("Tidewater Accord", "Pembrey Cup")
            for c in questions.time_place_from_seed(corpus, corpus.by_title[title][0], 0)]
    assert {c.chain[-1] for c in made} <= set(TITLES) and len({c.chain[-1] for c in made}) >= 4
    answers = {c.relation: c.answers[0] for c in made}
    assert answers.get("person_from") == "Pembrey"
    assert {"began", "ended"} & set(answers) and answers.get(next(iter({"began", "ended"} & set(answers)))) in (
        "1921", "1924")
    for candidate in made:
        assert candidate.kind == "bridge" and "?" in candidate.question and len(candidate.chain) == 2
        assert not any(name in candidate.question for name in TITLES)


@pytest.mark.parametrize("relation, phrase", [
    ("began", "begin"), ("ended", "end"), ("home_venue", "home games"), ("headquarters", "headquartered"),
    ("person_from", "from"), ("capital", "capital of"), ("founded", "founded"), ("incorporated", "incorporated"),
])
def test_each_new_relation_has_its_own_wording(relation, phrase):
    template = questions.bridge_template(relation)
    assert "{e}" in template and phrase in template


def test_a_place_answer_is_right_with_or_without_its_region(corpus):
    made = questions.time_place_from_seed(corpus, corpus.by_title["Pembrey Cup"][0], 0)
    assert [c.answers for c in made if c.relation == "person_from"] == [["Pembrey", "Pembrey, Carmarthenshire"]]


def test_the_fifth_set_does_not_change_the_earlier_sets_questions(corpus):
    """No earlier pass reads the fifth set's facts: clearing them gives the same questions."""
    assert_earlier_passes_unchanged(corpus, "time_place", (questions.from_seed, questions.ties_from_seed, questions.more_from_seed, questions.kin_place_from_seed),
                                    questions.time_place_from_seed)


# ------------------------------------------------------------------ the split


def test_the_fifth_set_joins_the_split_last_and_moves_no_earlier_row(tmp_path, corpus, monkeypatch):
    assert_joins_last_and_moves_no_row(build, corpus, tmp_path, monkeypatch, "time_place", "time_place_from_seed")
