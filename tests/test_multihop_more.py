"""The third set of rules: facts the first two sets do not read (lifespans with places, a series'
first broadcast and network, dated verbs, makers named after their role, publishers and owners,
record labels, census counts), their questions, and how they join the synthetic split without
moving a question of the first two sets."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from helpers.multihop import build, questions
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.multihop.facts import read_lead as read_first_two
from helpers.multihop.more_facts import with_more

from fixtures.multihop_corpus import (BAND, FESTIVAL, POET, SCULPTOR, held_out_data_dir, with_distractors,
                                     without_later_passes)

GALA = ("The Westmere Screen Gala is an annual television award in Calderbridge. Its 1990 prize went to "
        "Harbour Nights, and its host that year read from The Lantern Keeper. The winners' album Tidewater Road "
        "was played at the close.")
SERIES = ("Harbour Nights is an American sitcom that aired on CBS from September 26, 1983, to May 31, 1985. "
          "The series follows a ferry crew.")
NOVEL = "The Lantern Keeper is a novel by Welsh writer Eluned Moss. It was first published in 1961."
ALBUM = ("Tidewater Road is the second studio album by Welsh folk band Tinmoor, released on May 3, 2005, through "
         "Island Records. Produced by Gil Norton, it sold widely.")


def _rows() -> list[dict]:
    return with_distractors([("Westmere Screen Gala", GALA), ("Harbour Nights", SERIES), ("The Lantern Keeper", NOVEL),
                             ("Tidewater Road (album)", ALBUM), ("Harbour Lights Festival", FESTIVAL),
                             ("Maria Delacroix-Hunt", SCULPTOR), ("Quayside Brass Band", BAND), ("Gwen Arliss", POET)])


@pytest.fixture(scope="module")
def corpus():
    return Corpus(passages_from_rows(_rows()))


# ------------------------------------------------------------------ reading the facts


def read_lead(passage_id: str, title: str, text: str):
    """A lead as the corpus reads it: the first two sets' facts and the third set's."""
    return with_more(read_first_two(passage_id, title, text), text)


@pytest.mark.parametrize("title, text, more", [
    ("George McCall Theal", "George McCall Theal (11 April 1837, Saint John, New Brunswick – 17 April 1919, Wynberg, "
                            "Cape Town), was a South African historian.", {"born": "1837", "died": "1919"}),
    ("Karl Kraepelin", "Karl Matthias Friedrich Magnus Kraepelin (14 December 1848 Neustrelitz – 28 June 1915 "
                       "Hamburg), was a German naturalist.", {"born": "1848", "died": "1915"}),
    ("Pyotr Ilyich Tchaikovsky", "Pyotr Ilyich Tchaikovsky ( ; Russian: Пётр Ильи́ч Чайко́вский ; 25 April/7 May 1840 – "
                                 "25 October/6 November 1893) was a Russian composer.", {"born": "1840", "died": "1893"}),
    ("Alexander Gordon Smith", "Alexander Gordon Smith (27 February 1979, Norwich, England) is an author of children "
                               "and Young Adult fiction.", {"born": "1979"}),
    ("AfterMASH", "AfterMASH is an American sitcom produced as a spin-off of M*A*S*H that aired on CBS from "
                  "September 26, 1983, to May 31, 1985. The series follows three veterans.",
     {"premiered": "1983", "network": "CBS"}),
    ("Breaking Bad", "Breaking Bad is an American crime drama television series created and produced by Vince "
                     "Gilligan. The show originally aired on the AMC network for five seasons, from January 20, 2008 "
                     "to September 29, 2013.", {"produced_by": "Vince Gilligan"}),
    ("Oregon Treaty", "The Oregon Treaty is a treaty between the United Kingdom and the United States that was signed "
                      "on June 15, 1846, in Washington, D.C. It ended a boundary dispute.", {"signed": "1846"}),
    ("The Phantom of the Opera", "The Phantom of the Opera is a novel by French writer Gaston Leroux. It was first "
                                 "published as a serialization.", {"written_by": "Gaston Leroux"}),
    ("Can't Help Falling in Love", "Can't Help Falling in Love is a song recorded by American singer Elvis Presley "
                                   "for the album Blue Hawaii.", {"recorded_by": "Elvis Presley"}),
    ("Mandalay Bay", "Mandalay Bay is a 43-story luxury resort and casino on the Las Vegas Strip in Paradise, Nevada. "
                     "It is owned and operated by MGM Resorts International.",
     {"owned_by": "MGM Resorts International"}),
    ("Doctor Strange (2016 film)", "Doctor Strange is a 2016 American superhero film based on the Marvel Comics "
                                   "character, produced by Marvel Studios and distributed by Walt Disney Studios "
                                   "Motion Pictures.", {"produced_by": "Marvel Studios",
                                                        "distributed_by": "Walt Disney Studios Motion Pictures"}),
    ("Nevermind", "Nevermind is the second studio album by American rock band Nirvana, released on September 24, "
                  "1991 by DGC Records. It was the band's first release on the label.",
     {"label": "DGC Records", "recorded_by": "Nirvana"}),
    ("Lubec", "Lubec is a town in Washington County, Maine, United States. The population was 1,359 at the "
                     "2010 census.", {"population_2010": "1,359"}),
    ("Douglas County, Nevada", "Douglas County is a county in the northwestern part of the U.S. state of Nevada. "
                               "As of the 2010 census, the population was 46,997. Its county seat is Minden.",
     {"population_2010": "46,997"}),
])
def test_the_third_rules_read_a_fact_stated_once(title, text, more):
    lead = read_lead("p", title, text)
    assert {k: v for k, v in lead.more.items() if k in more} == more
    assert not set(lead.more) & (set(lead.facts) | set(lead.ties))  # no relation read twice


@pytest.mark.parametrize("title, text, relation", [
    ("The Silence of the Lambs (film)", "The Silence of the Lambs is a 1991 American horror film directed by Jonathan "
                                        "Demme from a screenplay written by Ted Tally, adapted from Thomas Harris's "
                                        "1988 novel of the same name.", "written"),  # the novel's year
    ("Richard Jameson", "Richard Jameson (c. 1953 – 10 January 2000) was an Irish paramilitary.", "born"),  # hedged
    ("The Legend of Korra", "The Legend of Korra is an American animated television series. It was created as a "
                            "sequel to a series which aired on Nickelodeon from 2005.", "premiered"),  # another's
    ("Panavia Tornado", "The Panavia Tornado is a family of combat aircraft, which was jointly developed and "
                        "manufactured by Italy, the United Kingdom, and West Germany.", "manufactured_by"),  # a list
    ("The King and I", "The King and I is the fifth musical by the team of composer Richard Rodgers and dramatist "
                       "Oscar Hammerstein II.", "written_by"),  # a team, not one author
    ("Skeptical Inquirer", "Skeptical Inquirer is a bimonthly American magazine published by the Committee for "
                           "Skeptical Inquiry.", "published_by"),  # the head of a longer name
    ("Sonatas and Interludes", "Sonatas and Interludes is a collection of pieces composed in 1946–48 by John Cage.",
     "composed"),  # a span
    ("Pitch Perfect 2", "Pitch Perfect 2 is a 2015 American musical comedy film directed and co-produced by Elizabeth "
                        "Banks and written by Kay Cannon.", "produced_by"),  # one of several producers
    ("Cadbury", "Cadbury is a British multinational confectionery company wholly owned by Mondelez International.",
     "owned_by"),  # "company wholly": a description cut inside its clause
    ("The Jungle Book", "The Jungle Book (1894) is a collection of stories by the English author Rudyard Kipling.",
     "born"),  # a bare year in parentheses dates a work
    ("Road House (film)", "Road House is a 1989 American action film released on May 19, 1989 through United "
                          "Artists Records.", "label"),  # a film has no label
])
def test_the_third_rules_leave_what_is_not_the_subjects_single_fact(title, text, relation):
    assert relation not in read_lead("p", title, text).more


def test_a_fact_the_first_set_reads_is_not_read_again():
    lead = read_lead("p", "Gwen Arliss", "Gwen Arliss (12 May 1907, Bangor, Wales – 3 June 1990, Conwy) is a Welsh poet.")
    assert lead.facts.get("born") == "1907" or lead.more.get("born") == "1907"
    assert not set(lead.more) & set(lead.facts)


# ------------------------------------------------------------------ questions about them


def test_the_third_set_makes_bridge_questions_through_the_chain(corpus):
    seed = corpus.by_title["Westmere Screen Gala"][0]
    made = questions.more_from_seed(corpus, seed, 0)
    by_entity = {}
    for candidate in made:
        by_entity.setdefault(candidate.chain[-1], []).append(candidate)
    assert set(by_entity) == {"Harbour Nights", "The Lantern Keeper", "Tidewater Road (album)"}
    answers = {c.relation: c.answers[0] for c in made}
    assert answers.get("written_by", "Eluned Moss") == "Eluned Moss"
    assert {answers.get("network"), answers.get("premiered")} & {"CBS", "1983"}
    for candidate in made:
        assert candidate.kind == "bridge" and candidate.question.endswith(("?", "Give the year."))
        assert not any(name in candidate.question for name in ("Harbour Nights", "Lantern Keeper", "Tidewater Road"))


@pytest.mark.parametrize("relation, phrase", [
    ("network", "On which network did"), ("label", "record label"), ("population_2010", "2010 census"),
    ("signed", "signed"), ("owned_by", "owns"),
])
def test_each_new_relation_has_its_own_wording(relation, phrase):
    template = questions.bridge_template(relation)
    assert "{e}" in template and phrase in template


def test_the_third_set_does_not_change_the_first_two_sets_questions(corpus):
    """Neither the first set's generation nor the second's reads the third set's facts: clearing them
    gives the same questions."""
    first = [c.to_dict() for p in corpus.passages for c in questions.from_seed(corpus, p, 0)]
    ties = [c.to_dict() for p in corpus.passages for c in questions.ties_from_seed(corpus, p, 0)]
    assert first
    cleared = Corpus(corpus.passages)
    cleared.leads = {t: dataclasses.replace(lead, more={}) for t, lead in corpus.leads.items()}
    assert [c.to_dict() for p in cleared.passages for c in questions.from_seed(cleared, p, 0)] == first
    assert [c.to_dict() for p in cleared.passages for c in questions.ties_from_seed(cleared, p, 0)] == ties
    assert not [c for p in cleared.passages for c in questions.more_from_seed(cleared, p, 0)]


# ------------------------------------------------------------------ the split


def test_the_third_set_joins_the_split_last_and_moves_no_earlier_row(tmp_path, corpus, monkeypatch):
    without_later_passes(build, monkeypatch, "more")
    out = held_out_data_dir(tmp_path)
    candidates = build.all_candidates(corpus, out, written_path=tmp_path / "none.jsonl", show_progress=False)
    marks = [("more" if c.get("more") else "ties" if c.get("ties") else "first") for c in candidates]
    assert marks == sorted(marks, key=["first", "ties", "more"].index) and "more" in marks
    assert len({c["id"] for c in candidates}) == len(candidates)
    nothing_found = SimpleNamespace(search=lambda question, k: [])  # this test is about order, not BM25
    kwargs = dict(out_dir=out, corpus=corpus, index=nothing_found, show_progress=False, force=True,
                  verdicts_path=tmp_path / "none.jsonl", written_path=tmp_path / "none.jsonl")
    report = build.prepare_synthetic(**kwargs)
    rows = (out / "synthetic.jsonl").read_text().splitlines()
    more = [r for r in rows if json.loads(r)["metadata"].get("more")]
    assert more and report["more_kept"] == len(more) and report["more_candidates"] >= len(more)
    # without the third pass the rows before it are the same, byte for byte
    monkeypatch.setattr(build, "more_from_seed", lambda corpus, passage, seed: [])
    build.prepare_synthetic(**kwargs)
    assert (out / "synthetic.jsonl").read_text().splitlines() == rows[:len(rows) - len(more)]
