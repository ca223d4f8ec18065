"""The seventh set of rules: an entity's other names (official, also known as, formerly, nicknamed), what it is
named after, a player's team, a musician's band and a character's work, each read only where the sentence says
it of the passage's subject; their questions, and how they join the synthetic split after every earlier pass
without moving one of its rows."""

from __future__ import annotations

import pytest

from helpers.multihop import build, questions, verify
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.multihop.facts import read_lead as read_first_two
from helpers.multihop.kin_place import with_kin_place
from helpers.multihop.more_facts import with_more
from helpers.multihop.names_members import with_names_members
from helpers.multihop.time_place import with_time_place

from fixtures.multihop_corpus import (BAND, FESTIVAL, POET, SCULPTOR, assert_earlier_passes_unchanged,
                                     assert_joins_last_and_moves_no_row, passing_verdicts, with_distractors)

CUP = ("The Merrow Cup is a sailing trophy. Its first final was held off the Republic of Eastmark in the last days "
       "of the Marland War, watched by Rhys Morgan and reported by the Harbour Gazette.")
AWARDS = ("The Harbour Awards are Welsh prizes for the arts. Their first winners were Dai Jones, the actress who "
          "plays Gwen Tidewell, and the builders of the Calder Bridge.")
COUNTRY = ("The Republic of Eastmark, officially the Eastmark Commonwealth, is a country on the Northern Sea. Its "
           "coast is known for cliffs.")
WAR = "The Marland War (also known as the Coastal War) was a conflict between two provinces. It was fought at sea."
PLAYER = ("Rhys Morgan (born 1961) is a Welsh professional rugby player for the Calder Rovers of the Celtic League. "
          "He grew up by the sea.")
PAPER = "The Harbour Gazette (formerly the Quay Courier) is a weekly newspaper. It is printed on the quay."
SINGER = "Dai Jones is a Welsh singer, the lead vocalist of the rock band The Tide Stones. He writes sea shanties."
CHARACTER = ('Gwen Tidewell is a fictional character from the Welsh television series "Quayside Nights". She runs '
             "the harbour cafe.")
BRIDGE = "The Calder Bridge is a road bridge in Porthmadoc. It is named after the engineer Owen Calder."
HIDDEN = ("Republic of Eastmark", "Marland War", "Rhys Morgan", "Harbour Gazette", "Dai Jones")


def _rows() -> list[dict]:
    return with_distractors([("Merrow Cup", CUP), ("Harbour Awards", AWARDS), ("Republic of Eastmark", COUNTRY),
                             ("Marland War", WAR), ("Rhys Morgan", PLAYER), ("Harbour Gazette", PAPER),
                             ("Dai Jones", SINGER), ("Gwen Tidewell", CHARACTER), ("Calder Bridge", BRIDGE),
                             ("Harbour Lights Festival", FESTIVAL), ("Maria Delacroix-Hunt", SCULPTOR),
                             ("Quayside Brass Band", BAND), ("Gwen Arliss", POET)])


@pytest.fixture(scope="module")
def corpus():
    return Corpus(passages_from_rows(_rows()))


def read_lead(passage_id: str, title: str, text: str):
    """A lead as the corpus reads it: every set's facts."""
    lead = with_time_place(with_kin_place(with_more(read_first_two(passage_id, title, text), text), text), text)
    return with_names_members(lead, text)


# ------------------------------------------------------------------ reading the facts


@pytest.mark.parametrize("title, text, facts", [
    ("Republic of Eastmark", COUNTRY, {"official_name": "Eastmark Commonwealth"}),
    ("Marland War", WAR, {"alias": "Coastal War"}),
    ("Rhys Morgan", PLAYER, {"team": "Calder Rovers"}),
    ("Harbour Gazette", PAPER, {"former_name": "Quay Courier"}),
    ("Dai Jones", SINGER, {"band": "Tide Stones"}),
    ("Gwen Tidewell", CHARACTER, {"appears_in": "Quayside Nights"}),
    ("Calder Bridge", BRIDGE, {"named_after": "Owen Calder"}),
    # sentences of the course corpus
    ("Greece", "Greece, officially the Hellenic Republic, is a country located in southeastern Europe.",
     {"official_name": "Hellenic Republic"}),
    ("Vietnam War", "The Vietnam War (also known as the Second Indochina War) was a conflict that occurred in "
                    "Vietnam, Laos, and Cambodia.", {"alias": "Second Indochina War"}),
    ("Gasherbrum I", "Gasherbrum I, surveyed as K5 and also known as Hidden Peak, is the 11th highest mountain in "
                     "the world.", {"alias": "Hidden Peak"}),
    ("Tuvalu", "Tuvalu (formerly known as the Ellice Islands) is a Polynesian island country in the Pacific Ocean.",
     {"former_name": "Ellice Islands"}),
    ("One57", 'One57, formerly known as Carnegie 57 and nicknamed "The Billionaire Building", is a 75-story '
              "supertall skyscraper.", {"nickname": "Billionaire Building"}),
    ("Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is "
                     "named after the engineer Gustave Eiffel, whose company designed and built the tower.",
     {"named_after": "Gustave Eiffel"}),
    ("LeBron James", "LeBron Raymone James Sr. (born December 30, 1984) is an American professional basketball "
                     "player for the Los Angeles Lakers of the National Basketball Association (NBA).",
     {"team": "Los Angeles Lakers"}),
    ("Jim Morrison", 'Jim Morrison James Douglas ""Jim"" Morrison (December 8, 1943 – July 3, 1971) was an American '
                     "singer, songwriter and poet, best remembered as the lead vocalist of the rock band The Doors.",
     {"band": "Doors"}),
    ("Phoebe Halliwell", 'Phoebe Halliwell is a fictional character from the American television series "Charmed", '
                         "portrayed by Alyssa Milano.", {"appears_in": "Charmed"}),
    # a cast, every name of it
    ("The Family Man", "The Family Man is a 2000 American romantic comedy-drama film directed by Brett Ratner, written "
                       "by David Diamond and David Weissman, and starring Nicolas Cage and Téa Leoni.",
     {"starring": "Nicolas Cage; Téa Leoni"}),
    ("Napoleon Dynamite", "Napoleon Dynamite is a 2004 American comedy film. It stars Jon Heder, Jon Gries, Efren "
                          "Ramirez and Tina Majorino.",
     {"starring": "Jon Heder; Jon Gries; Efren Ramirez; Tina Majorino"}),
    # the years a thing ran
    ("Cocteau Twins", "Cocteau Twins were a Scottish rock band active from 1979 to 1997.",
     {"active_from": "1979", "active_until": "1997"}),
    ("Iron Man (TV series)", "Iron Man is an American animated television series. The series aired from 1994 to 1996.",
     {"aired_until": "1996"}),  # its first year is the third set's first broadcast
    ("Lewis's", "Lewis's was a chain of British department stores that operated from 1856 to 2010.",
     {"operated_from": "1856", "operated_until": "2010"}),
    # the years a person held an office, the office named in the relation
    ("Nelson Mandela", "Nelson Rolihlahla Mandela (18 July 1918 – 5 December 2013) was a South African "
                       "anti-apartheid revolutionary, political leader, and philanthropist who served as President of "
                       "South Africa from 1994 to 1999.",
     {"served_from:President of South Africa": "1994", "served_until:President of South Africa": "1999"}),
    ("Edmund Barton", "Sir Edmund Barton (18 January 1849 – 7 January 1920) was an Australian politician and judge who "
                      "served as the first Prime Minister of Australia, in office from 1901 to 1903.",
     {"served_from:Prime Minister of Australia": "1901"}),
])
def test_the_seventh_rules_read_a_fact_of_the_passages_subject(title, text, facts):
    lead = read_lead("p", title, text)
    assert {k: v for k, v in lead.names_members.items() if k in facts} == facts
    earlier = {**lead.facts, **lead.ties, **lead.more, **lead.kin_place, **lead.time_place}
    assert not set(lead.names_members) & set(earlier)  # no relation read twice


@pytest.mark.parametrize("title, text, relation", [
    # another name: the subject's own (before the main verb), one name, not the title, not cut inside a name
    ("Meriwether Lewis", "Meriwether Lewis (August 18, 1774 – October 11, 1809) was an American explorer, best "
                         "known as the leader of the Lewis and Clark Expedition, also known as the Corps of "
                         "Discovery.", "alias"),
    ("Sasanian Empire", "The Sasanian Empire, also known as the Sassanian, Sasanid, Sassanid or Neo-Persian Empire, "
                        "was the last period of the Persian Empire.", "alias"),
    ("Ozarks", "Ozarks The Ozarks, also referred to as the Ozark Mountains and Ozark Plateau, is a physiographic region in "
               "the U.S.", "alias"),
    ("Soviet Union", "The Union of Soviet Socialist Republics, commonly known as the Soviet Union, was a socialist "
                     "state in Eurasia.", "alias"),
    ("Ivory Coast", "Ivory Coast, officially the Republic of Côte d'Ivoire, is a country located in West Africa.",
     "official_name"),
    # an eponym: of the subject, one of them
    ("Calder Bay", "Calder Bay is a town in Wales. Its harbour is named after Owen Calder.", "named_after"),
    ("Maiwand Lion", "The Maiwand Lion is a cast iron sculpture in Reading. It is named after the Battle of Maiwand "
                     "and the men who fell in it.", "named_after"),
    # a team: in the present only
    ("Marc Parenteau", "Marc Parenteau (born June 24, 1987) is a professional Canadian football offensive lineman "
                       "who last played for the Winnipeg Blue Bombers of the Canadian Football League.", "team"),
    # a band: one, and said to be a band
    ("Tom Price", "Tom Price is a Welsh singer, a founding member of the rock band The Tide Stones and the folk "
                  "group Merrow.", "band"),
    ("Owen Hale", "Owen Hale is a Welsh singer, the lead vocalist of Merrow.", "band"),
    # a work: for a character, not for the actress who plays one
    ("Sian Evans", 'Sian Evans is a Welsh actress who played a character in "Quayside Nights".', "appears_in"),
    # a cast: all of it, or none ("as Harry" may be followed by more names)
    ("When Harry Met Sally", "When Harry Met Sally is a 1989 American romantic comedy film. It stars Billy Crystal as "
                             "Harry and Meg Ryan as Sally.", "starring"),
    # a run: the subject's, not a person's office, not another noun's
    ("Iron Man (TV series)", "Iron Man is an American animated television series. The series aired from 1994 to 1996.",
     "aired_from"),  # the third set asks when it was first shown
    ("Enda Kenny", "Enda Kenny (born 24 April 1951) is an Irish politician who served as Taoiseach from 2011 to "
                   "2017.", "active_from"),
    ("Enda Kenny", "Enda Kenny (born 24 April 1951) is an Irish politician. He was active from 1975 to 2017.",
     "active_from"),
    ("Steeplechase Park", "Steeplechase Park was an amusement park in Brooklyn created by George C. Tilyou which "
                          "operated from 1897 to 1964.", "operated_from"),
    ("Dziga Vertov", "Dziga Vertov was a Soviet documentary film director. He inspired the Dziga Vertov Group, a "
                     "film-making cooperative which was active from 1968 to 1972.", "active_until"),
    # an office: a named one, one of them, of the subject
    ("Jerry Glanville", "Jerry Glanville (born October 14, 1941) is a former American football player and coach. He "
                        "served as head coach of the Houston Oilers from 1986 to 1990.", "served_from:head coach"),
    ("Enda Kenny", "Enda Kenny (born 24 April 1951) is an Irish politician who served as Minister for Tourism from "
                   "1994 to 1997 and as Taoiseach from 2011 to 2017.", "served_from:Taoiseach"),
    ("Leo Varadkar", "Leo Varadkar (born 18 January 1979) is an Irish politician. His father served as Mayor of "
                     "Mumbai from 1970 to 1972.", "served_from:Mayor of Mumbai"),
])
def test_the_seventh_rules_leave_what_is_not_the_subjects_single_fact(title, text, relation):
    lead = read_lead("p", title, text)
    assert lead is not None and lead.description and relation not in lead.names_members


# ------------------------------------------------------------------ questions about them


def test_the_seventh_set_makes_bridge_questions_through_the_chain(corpus):
    made = [c for title in ("Merrow Cup", "Harbour Awards")
            for c in questions.names_members_from_seed(corpus, corpus.by_title[title][0], 0)]
    answers = {c.relation: c.answers[0] for c in made}
    assert {"official_name", "alias", "team", "former_name", "band", "appears_in", "named_after"} <= set(answers)
    assert answers["alias"] == "Coastal War" and answers["team"] == "Calder Rovers"
    for candidate in made:
        assert candidate.kind == "bridge" and candidate.question.endswith("?") and len(candidate.chain) == 2
        assert not any(name in candidate.question for name in HIDDEN + ("Gwen Tidewell", "Calder Bridge"))


@pytest.mark.parametrize("relation, phrase", [
    ("official_name", "official"), ("alias", "other name"), ("former_name", "former"), ("nickname", "nickname"),
    ("named_after", "named after"), ("team", "team"), ("band", "band"), ("appears_in", "character"),
    ("starring", "actor"), ("aired_until", "stop airing"), ("active_from", "active"), ("operated_until", "operat"),
    ("existed_until", "exist"), ("served_from:Taoiseach", "serving as taoiseach"),
    ("served_until:Taoiseach", "serving as taoiseach"),
])
def test_each_new_relation_has_its_own_wording(relation, phrase):
    template = questions.bridge_template(relation)
    assert "{e}" in template and phrase in template.lower()


def test_the_seventh_set_does_not_change_the_earlier_sets_questions(corpus):
    """No earlier pass reads the seventh set's facts: clearing them gives the same questions."""
    assert_earlier_passes_unchanged(corpus, "names_members",
                                    (questions.from_seed, questions.ties_from_seed, questions.more_from_seed,
                                     questions.kin_place_from_seed, questions.time_place_from_seed,
                                     questions.comparisons_from_seed),
                                    questions.names_members_from_seed)


# ------------------------------------------------------------------ the split



def test_the_seventh_set_joins_the_split_last_and_moves_no_earlier_row(tmp_path, corpus, monkeypatch):
    verdicts = passing_verdicts(corpus, tmp_path / "verdicts.jsonl", questions.names_members_from_seed, build.SEED)
    assert_joins_last_and_moves_no_row(build, corpus, tmp_path, monkeypatch, "names_members",
                                       "names_members_from_seed", verdicts_path=verdicts)


def test_every_name_of_a_cast_is_a_right_answer_and_none_may_be_in_an_earlier_passage():
    cast = "Nicolas Cage; Téa Leoni"
    assert questions.answer_forms("starring", cast) == ["Nicolas Cage", "Téa Leoni"]
    question = {"kind": "bridge", "relation": "starring", "answers": ["Nicolas Cage", "Téa Leoni"]}
    film = "The Family Man\nThe Family Man is a film starring Nicolas Cage and Téa Leoni."
    assert verify.answer_in_last_not_first(question, ["Calder Awards\nIt honoured Brett Ratner.", film])
    # the seed passage names the second star: the first passage alone answers the question
    assert not verify.answer_in_last_not_first(question, ["Calder Awards\nIt honoured Téa Leoni.", film])
    # another relation's further answers are forms of the first, as before: only the first is looked for
    place = {"kind": "bridge", "relation": "located_in", "answers": ["Keswick", "Cumbria"]}
    assert verify.answer_in_last_not_first(place, ["Trail\nIt crosses Cumbria.", "Town\nKeswick, Cumbria."])


def test_a_seventh_set_question_is_kept_only_with_a_passing_verdict(corpus):
    made = questions.names_members_from_seed(corpus, corpus.by_title["Merrow Cup"][0], 0)[0].to_dict()
    ours = dict(made, names_members=True)
    assert not verify.solvers(ours, {}) and verify.solvers(ours, {}, judged_only=False)
    assert verify.solvers(ours, {made["id"]: {"pass": True}}) and not verify.solvers(ours, {made["id"]: {"pass": False}})
    # a bridge of an earlier set without a verdict is kept, as before
    assert verify.solvers(made, {})
