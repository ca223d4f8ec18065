"""Facts that tie a passage's subject to a count or another name: a place's population, the place it
is the largest city or the seat of, and a person's parent, read where the passage's opening sentences
state them of the passage's own subject.

- a **population** stated as a count without a census: "It has a population of 23,620", "The city
  proper has a population of 388,072, making it ...", "Castleford ... with a population of 40,210";
- the place a city is the **largest city** of: "Belize City is the largest city in Belize", "Prague is
  the capital and largest city in the Czech Republic", "It is the largest city in Maryland County";
- the county (municipality, district, ...) a town is the **seat** of: "Cleveland is a major city in
  the U.S. state of Ohio, and the county seat of Cuyahoga County", "It is the administrative seat of
  Gentofte Municipality";
- a person's **parent**, one name: "He is the son of former NBA player Rick Barry", "Icarus is the son
  of the master craftsman Daedalus".

The hard part is whose fact it is. A passage's later sentences talk about other things too: "The Delaware
Valley's population of 7.2 million ...", "... Burlington, the county seat of Chittenden County" in the
passage about a courthouse, "Lear wrote the poem for Janet Symonds, the daughter of ...". So a fact is
read only from a sentence whose grammatical subject is the passage's: the first sentence's main verb
("<subject> is ..."), or a later sentence that opens with "It", "He", "She", the subject's name, or
"The city/town/..." that its description names. And a fact is a single value: no "son of Frank
Sinatra and Nancy Sinatra", no passage that gives two populations (a city's and its metropolitan area's),
no count hedged by "about" or rounded to "1.5 million", and a name ends where a sentence or a name
ends ("... the seat of Racine County. The city ..." gives "Racine County", never "Racine County. The").

Each relation is read only where `facts` and `more_facts` read nothing for it, and only for a subject of the
right kind (a place for population, largest city and seat; not a place for a parent). Questions about
these facts are made in a pass of their own (``Lead.kin_place``, ``questions.kin_place_from_seed``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from helpers.multihop.facts import YEAR, _NAME_END, _PARENTHESES, Lead, _tie_name, clean_title, lead_text, sentences

POPULATION = "population"
LARGEST_CITY = "largest_city_of"
SEAT_OF = "seat_of_"  # + the unit, lower case: "seat_of_county", "seat_of_municipality"
PARENT = ("son_of", "daughter_of")
TEMPLATES: dict[str, tuple[str, ...]] = {
    POPULATION: ("What is the population of {e}, according to its own Wikipedia passage?",
                 "How many people live in {e}, according to its own Wikipedia passage?"),
    LARGEST_CITY: ("In which country or region is {e} the largest city?",
                   "{e} is the largest city of which country or region?"),
    SEAT_OF: ("{e} is the seat of which {u}?", "Which {u} has {e} as its seat?"),
    # the second asks for a parent without repeating "son": "the son mentioned in ..." is a description too
    "son_of": ("Whose son is {e}?", "Who is a parent of {e}?"),
    "daughter_of": ("Whose daughter is {e}?", "Who is a parent of {e}?"),
}
# what a subject must be for each fact: the last word of its description
PLACE_NOUNS = frozenset("city town village locality municipality suburb community borough hamlet commune capital "
                        "metropolis settlement seat port district parish township county country state province "
                        "island territory nation".split())
PERSON_HINTS = frozenset("son daughter actor actress singer politician player author writer director musician "
                         "king queen prince princess god goddess hero protagonist character artist model "
                         "producer officer poet businessman businesswoman lawyer surgeon wrestler".split())
UNITS = ("County|Municipality|District|Province|Parish|Borough|Prefecture|Department|Shire|Township|"
         "Governorate|Oblast|Raion|Regency|Canton|Region")
LEAD_SENTENCES = 3
# the subject as a later sentence names it (besides its name and "It"): "The city", "The town proper"
_NOUN_SUBJECT = r"The\s+(?:{nouns})(?:\s+proper)?"

# a count, not a hedge or a round figure: "388,072", "23620"; never "about 1.5 million", "over 325 million"
_COUNT = r"(\d{1,3}(?:,\d{3})+|\d{3,})(?![\d,.]*\d)(?!\s*(?:million|billion|thousand))"
_HEDGE = r"(?<!about )(?<!approximately )(?<!around )(?<!roughly )(?<!over )(?<!nearly )(?<!almost )(?<!some )" \
         r"(?<!than )(?<!under )"
_POP_WORDS = r"(?:(?:a|an)\s+)?(?:(?:estimated|total|resident|official)\s+)?(?:(?:1[89]|20)\d\d\s+)?"
# "has a population of 23,620", "with a population of 40,210", "had a population in 2011 of 3,063,456"
_HAS_POPULATION = re.compile(rf"\b(?:has|had|have|[Ww]ith|counts)\s+{_POP_WORDS}population\s+(?:in\s+{YEAR}\s+)?of\s+"
                             rf"{_HEDGE}{_COUNT}")
# "Sacramento's estimated 2018 population of 501,334 makes it ...", "Its population of 921,727"
_OWN_POPULATION = r"(?:{subject})(?:'s|’s)\s+{words}population\s+of\s+{hedge}{count}"
# every count a lead gives a population: two of them (a city's and its area's) are no single fact
_ANY_POPULATION = re.compile(r"\bpopulation\b[^.;]{0,40}?\d|\d[\d,.]*\s*(?:million\s+)?(?:inhabitants|people|residents)\b")
_AREA_WORDS = re.compile(r"\b(?:metropolitan|metro|urban\s+area|agglomeration|wider|whole|region's|county's|"
                         r"district's)\b")
# a sentence that opens with its census: "As of the 2010 census, the population was 43,742", "At the 2011 census,
# Gillieston Heights had a population of 1,372", "At the United Kingdom Census 2011, its population was 123,867"
_CENSUS_OPENING = (rf"^(?:As\s+of|At|According\s+to)\s+the\s+(?:{YEAR}\s+(?:[A-Z][\w.]*\s+)?[Cc]ensus|"
                   rf"(?:[A-Z][\w.]*\s+){{0,3}}Census\s+{YEAR}),?\s+(?:(?:<subject>)\s+had\s+{_POP_WORDS}population\s+"
                   rf"of|(?:the|its)\s+(?:total\s+)?population\s+was)\s+{_HEDGE}{_COUNT}")
# "The population is 7,218.", "Its population was 921,727": a place's lead speaks of its own
_THE_POPULATION = re.compile(rf"^(?:The|Its)\s+(?:total\s+|estimated\s+)?population\s+(?:is|was)\s+{_HEDGE}{_COUNT}"
                             rf"(?!\s+(?:at|in)\s+the\s+{YEAR})")

# "is the largest city in Belize", "is the capital and largest city in the Czech Republic"
_PLACE_NAME = r"([A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|del|la|upon)){0,4})"
_LARGEST = re.compile(rf"^(?:is|was)\s+(?:also\s+)?the\s+(?:capital(?:\s+city)?\s+and\s+(?:the\s+)?)?largest\s+city"
                      rf"\s+(?:of|in)\s+(?:the\s+)?{_PLACE_NAME}{_NAME_END}(?!\s+and\s+[A-Z])")
# "is the county seat of Carter County", "is a city in and the county seat of Brown County", "is a city
# that is the county seat of ...", "is the largest city and county seat of Tipton County"
_SEAT = re.compile(rf"^(?:is|was)\s+(?:also\s+)?(?:(?:a|an|the)\s+[^,;()]{{0,80}}?,?\s+(?:and|that\s+is)\s+)?"
                   rf"(?:the\s+)?(?:county\s+|administrative\s+|municipal\s+)?seat\s+of\s+(?:the\s+)?"
                   rf"((?:[A-Z][\w'’.-]*\s+){{1,4}}({UNITS}))(?=\s*[,.;:()]|\s+(?:and|in|which|with|on|at)\b|\s*$)")
# "is the son of former NBA player Rick Barry", "was the third daughter of George Curzon"; a role is lower-case
# words, an acronym or an adjective of a nation or kind before a lower-case word ("former Olympic rower", not
# "Domhnall mac Raghnaill"), never "of" ("the patriarch of the House of Capulet" names no parent) nor "and"
# ("of Zeus and Hera" names two)
_ROLE_WORDS = r"(?:(?!(?:of|and)\b)(?:[a-z][\w-]*|[A-Z]{2,}|[A-Z][a-z]+(?:an|ish|ese|ch|ic|i)(?=\s+[a-z]))\s+){0,4}"
_PARENT = re.compile(rf"^(?:is|was)\s+(?:also\s+)?(?:the|a)\s+(?:(?:only|elder|eldest|older|oldest|younger|youngest|"
                     rf"first|second|third|fourth|fifth|illegitimate|adopted)\s+)?(son|daughter)\s+of\s+(?:the\s+)?"
                     rf"{_ROLE_WORDS}{_PLACE_NAME}{_NAME_END}")
# after the parent's name, a second parent or a title makes it no single name: "... and Nancy Sinatra",
# ", and Danielle Kahn", "and his mother Jocasta", "and his first wife, Barbara Ann Olsen", "and entrepreneur
# Jeffrey Bonas", ", 1st Marquess Curzon",
# "by his wife Fulvia"
_ANOTHER_PARENT = re.compile(r"^,\s+[A-Z0-9]|\band\s+(?:[a-z]+\s+){0,2}[A-Z]|\bby\s+(?:(?:his|her)\s+\w+\s+)?[A-Z]|"
                             r"\band\s+(?:his|her|their)\s+(?:\w+\s+)?(?:wife|husband|partner|mother|father)\b")
# abbreviations a sentence split leaves at a name's end: "the son of King St" (of "King St. Stephen")
ABBREVIATIONS = frozenset("St Mt Ft Dr Mr Mrs Ms Gen Col Rev Capt Lt Sgt Prof Hon Sr".split())


def _subject_patterns(title: str, phrase: str) -> list[str]:
    """How a later sentence may open with the passage's subject: its name (whole or before the comma,
    "Waco" for "Waco, Texas"), "It", or "The <noun of its description>"."""
    name = clean_title(title)
    names = {name, name.split(",")[0]}
    nouns = "|".join(re.escape(w) for w in phrase.split() if w.isalpha() and w.islower())
    out = [re.escape(n) for n in sorted(names, key=len, reverse=True) if n]
    if nouns:
        out.append(_NOUN_SUBJECT.format(nouns=nouns))
    return out


def _main_verb(sentence: str) -> str | None:
    """The first sentence from its main verb on ("is the largest city ..."), parentheses removed."""
    match = re.search(r"\b(?:is|was)\s", sentence)
    return sentence[match.start():] if match else None


def _later_verb(sentence: str, openers: list[str]) -> str | None:
    """A later sentence from its verb on, where it opens with the subject ("It is ...", "He was ...")."""
    match = re.match(rf"^(?:{'|'.join(openers)})(?:,[^,;()]{{1,80}},)?\s+((?:is|was)\s.*)$", sentence)
    return match.group(1) if match else None


def population(text: str, title: str, phrase: str) -> tuple[str, str] | None:
    """(relation, count) for the one population count the opening sentences give the subject, or None: relation
    "population_<year>" where the sentence names its census ("As of the 2010 census, the population was
    43,742"), else "population"."""
    lead = sentences(text, LEAD_SENTENCES)
    if sum(len(_ANY_POPULATION.findall(s)) for s in lead) != 1:
        return None  # none, or two (the city's and its area's, two dates): no single fact
    subjects = _subject_patterns(title, phrase)
    own = re.compile(_OWN_POPULATION.format(subject="|".join(subjects + ["Its", "its"]), words=_POP_WORDS,
                                            hedge=_HEDGE, count=_COUNT))
    census = re.compile(_CENSUS_OPENING.replace("<subject>", "|".join(subjects + ["it", r"the\s+city", r"the\s+town"])))
    for i, sentence in enumerate(lead):
        if "population" not in sentence:
            continue
        if _AREA_WORDS.search(sentence):
            return None
        if match := census.match(sentence):
            return POPULATION + "_" + (match.group(1) or match.group(2)), match.group(3)
        if match := own.search(sentence) or _THE_POPULATION.match(sentence):
            return POPULATION, match.group(1)
        has = _HAS_POPULATION.search(sentence)
        if not has:
            return None
        before = sentence[:has.start()]
        if re.search(r"\b(?:which|whose|where|that|who)\b|'s\b|’s\b", before):
            return None  # "..., which has a population of ...": another noun's
        if re.search(r",\s+(?:a|an|the)\s+[a-z][^,]*$", before):
            return None  # "... in Y, a district with a population of ...": the apposition's
        if i == 0 or re.match(rf"^(?:{'|'.join(subjects + ['It'])})\s", sentence):
            return POPULATION, has.groups()[-1]
        # "With an estimated population of 264,488 in 2016, Fort Wayne is ..."
        if before == "" and re.search(rf",\s+(?:{'|'.join(subjects + ['it'])})\s+(?:is|was|has)\b", sentence):
            return POPULATION, has.groups()[-1]
        return None
    return None


def kin_place_facts(text: str, title: str, phrase: str | None, known: set[str] = frozenset(),
                    known_values: set[str] = frozenset()) -> dict[str, str]:
    """The facts above for the opening sentences `text` of `title` (relation -> value), each stated once
    and none of the relations in `known` nor a value in `known_values` (what `facts` and `more_facts`
    read); `phrase`
    is what the passage says its subject is (the noun phrase after "is a")."""
    if not phrase:
        return {}
    words = phrase.lower().split()
    is_place = words[-1] in PLACE_NOUNS
    # a person: a description that says so, a birth or death the earlier sets read, or "He"/"She" sentences
    is_person = not is_place and bool(PERSON_HINTS & set(words) or {"born", "died", "born_in"} & set(known)
                                      or re.search(r"(?:^|\.\s)(?:He|She)\s", text))
    found: dict[str, set[str]] = {}

    def add(relation: str, value: str | None) -> None:
        if value and value.split()[-1] not in ABBREVIATIONS:
            found.setdefault(relation, set()).add(value)

    lead = sentences(text, LEAD_SENTENCES)
    openers = _subject_patterns(title, phrase) + ["It", "He", "She"]
    for i, sentence in enumerate(lead):
        bare = sentence
        for _ in range(2):
            bare = _PARENTHESES.sub("", bare)
        rest = _main_verb(bare) if i == 0 else _later_verb(bare, openers)
        if not rest:
            continue
        if is_place and (largest := _LARGEST.match(rest)):
            add(LARGEST_CITY, _tie_name(largest.group(1)))
        if is_place and (seat := _SEAT.match(rest)):
            add(SEAT_OF + seat.group(2).lower(), _tie_name(seat.group(1)))
        if is_person and (parent := _PARENT.match(rest)) and not _ANOTHER_PARENT.search(rest[parent.end():]):
            add(f"{parent.group(1)}_of", _tie_name(parent.group(2)))
    if is_place and (counted := population(text, title, phrase)):
        add(*counted)
    out = {relation: next(iter(values)) for relation, values in found.items() if len(values) == 1}
    if sum(r.startswith(SEAT_OF) for r in out) > 1:  # the seat of two units: neither is the answer
        out = {r: v for r, v in out.items() if not r.startswith(SEAT_OF)}
    if "son_of" in out and "daughter_of" in out:
        out = {r: v for r, v in out.items() if r not in PARENT}
    return {relation: value for relation, value in out.items()
            if relation not in known and value not in known_values
            and not (relation == POPULATION and any(k.startswith("population_") for k in known))}


def template(relation: str, choose: Callable[[Sequence[str]], str]) -> str | None:
    """The question template of one of these relations ({e}: the hidden entity), None for another's."""
    if relation.startswith(SEAT_OF):
        return choose(TEMPLATES[SEAT_OF]).replace("{u}", relation[len(SEAT_OF):])
    if relation in TEMPLATES:
        return choose(TEMPLATES[relation])
    return None


def with_kin_place(lead: Lead | None, text: str) -> Lead | None:
    """`lead` (with the earlier sets' facts) with these facts added as ``Lead.kin_place``."""
    if lead is None:
        return None
    body = lead_text(lead.title, text)
    earlier = {**lead.facts, **lead.ties, **lead.more}
    return dataclasses.replace(lead, kin_place=kin_place_facts(body, lead.title, lead.description, set(earlier),
                                                               set(earlier.values())))
