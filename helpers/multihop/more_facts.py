"""A third set of rules: facts that leads state in forms the first two sets do not read.

- a **lifespan** written with places or calendar notes inside its parentheses: "(11 April 1837,
  Saint John, New Brunswick – 17 April 1919, Wynberg, Cape Town)", "(14 December 1848 Neustrelitz –
  28 June 1915 Hamburg)", a birth date followed by a birthplace "(27 February 1979, Norwich, England)";
- a television series' **first broadcast** and its **network**: "aired on CBS from September 29,
  1963", "ran on Disney Channel from September 15, 2001";
- the year a thing was **signed, written, recorded, discovered, ...**: "is a treaty ... signed on
  June 15, 1846", "a poem written in 1897";
- a **maker whose name follows their role**: "a novel by French writer Gaston Leroux", "a song
  recorded by American singer Elvis Presley" (the first set stops at "by French");
- the **producer, publisher, distributor, owner or manufacturer**: "produced by Byron Kennedy",
  "published by DC Comics", "owned and operated by MGM Resorts International";
- a record's **label** ("released on May 3, 2005, through Island Records") and a place's **census
  count** ("The population was 1,359 at the 2010 census"; the question names the census).

Each is read once (a relation stated twice, differently, is no fact) and only where the first two
sets read nothing for that relation (``Lead.more``): questions about them are made in a pass of
their own, after the others', so no earlier question or verdict moves.
"""

from __future__ import annotations

import dataclasses
import re

from helpers.multihop.facts import (_DATE_PREFIX, _NAME, _PARENTHESES, NOT_A_LIFE, WORK_MAKERS, YEAR, Lead, _tie_name,
                                    lead_text, sentences)

# relation -> the verb of "In what year was {e} {v}?"
EVENTS: dict[str, str] = {
    "signed": "signed", "enacted": "enacted", "ratified": "ratified", "discovered": "discovered",
    "introduced": "introduced", "recorded": "recorded", "written": "written", "composed": "composed",
    "painted": "painted", "constructed": "constructed", "erected": "erected", "designated": "designated",
}
# relation -> the verb of "Who {v} {e}?"
CREDITS: dict[str, str] = {
    "published_by": "published", "manufactured_by": "manufactured", "distributed_by": "distributed",
    "owned_by": "owns", "produced_by": "produced",
}
NETWORK = "network"
LABEL = "label"
POPULATION = "population_"  # + the census year: "population_2010"
# relation -> its question templates ({e}: the hidden entity, {y}: a census year)
TEMPLATES: dict[str, tuple[str, ...]] = {
    NETWORK: ("On which network did {e} first air?", "Which television network first broadcast {e}?"),
    LABEL: ("On which record label was {e} released?", "Which record label released {e}?"),
    POPULATION: ("What was the population of {e} at the {y} census?", "How many people lived in {e} at the {y} census?"),
}

# words that hedge a date: "c. 1953", "presumably on or after May 8, 1927", "fl. 1600"
_HEDGE = re.compile(r"\b(?:c\.|ca\.|circa|fl\.|presumably|probably|about|before|after|baptised|baptized)|\?")
# the first parentheses within the opening words
_FIRST_PARENTHESES = re.compile(r"^[^()]{0,120}\(([^()]*)\)")
_SPAN_DASH = re.compile(r"\s[–-]\s")
_YEAR = re.compile(rf"(?<!\d){YEAR}(?!\d)")
# "(27 February 1979, Norwich, England)": a full date, then a capitalised place
_BIRTH_WITH_PLACE = re.compile(rf"^\s*{_DATE_PREFIX}{YEAR},\s+[A-Z]")
# "aired on CBS from September 29, 1963", "ran on the AMC network for five seasons, from January 20, 2008"
_AIRED = re.compile(r"\b(?:aired|airs|ran|was\s+broadcast|broadcast)\s+(?:originally\s+)?"
                    r"(?:on\s+(?:the\s+)?([A-Z][\w&!'.-]*(?:\s+[A-Z][\w&!'.-]*){0,3})"
                    r"(?:\s+(?:television\s+)?(?:network|channel))?\s+)?"
                    rf"(?:for\s+[^.,;()]{{0,30}}?,?\s+)?from\s+{_DATE_PREFIX}{YEAR}\b")
# the verb's own date: "signed on June 15, 1846, in Washington", "written by Alexander Pushkin in 1824", not
# "a screenplay written by Ted Tally, adapted from Thomas Harris's 1988 novel", nor a span "composed in 1946–48"
_BY_NAME = r"(?:by\s+[A-Z][\w.'-]*(?:\s+[A-Z][\w.'-]*){0,3}\s+)?"
_AT_PLACE = r"(?:(?:in|at|near)\s+[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}\s+)?"
# in a later sentence "..., which aired on Nickelodeon from 2005" is another series'
_AIRED_LATER = re.compile(r"(?<!which )(?<!that )" + _AIRED.pattern)
_EVENT_DATE = rf"\s+{_BY_NAME}{_AT_PLACE}(?:on\s+|in\s+)?{_DATE_PREFIX}{YEAR}(?!\s*[–-]\s*\d)\b"
_EVENT = re.compile(rf"\b({'|'.join(EVENTS)}){_EVENT_DATE}")
# a later sentence only where it opens with the subject: "It was written in 1958 ..."
_EVENT_LATER = re.compile(rf"^It\s+(?:was|is)\s+(?:first\s+|originally\s+)?({'|'.join(EVENTS)}){_EVENT_DATE}")
# a maker's role, the last word before their name: "French writer", "American metalcore band"
ROLES = ("writer|author|poet|novelist|playwright|dramatist|artist|painter|sculptor|singer|rapper|musician|band|"
         "group|duo|trio|composer|songwriter|singer-songwriter|journalist|cartoonist|illustrator|DJ|producer")
# one maker, not a list: "manufactured by Italy, the United Kingdom, and West Germany", "by the team of
# composer Richard Rodgers and dramatist Oscar Hammerstein II"
# nor the head of a longer name: "the Committee for Skeptical Inquiry" gives no "Committee"
_NOT_A_LIST = r"(?!\s+and\s+(?:(?!by\b)[a-z]+\s+){0,2}[A-Z])(?!\s+(?:for|of)\s+[A-Z])(?!,\s+(?:the\s+)?[A-Z][\w ]{0,30},?\s+and\s)"
_ROLE_NAME_END = r"(?=\s*[,.;:()]|\s+(?:and|in|for|with|from|on|at|which|who|that|as|about|released|published)\b|\s*$)"
_WORK_BY_ROLE = re.compile(
    rf"\b({'|'.join(w for w in WORK_MAKERS if WORK_MAKERS[w] != 'directed_by')}|tale)\s+by\s+(?:the\s+)?"
    rf"(?:[A-Z][a-z]+\s+)?(?:[a-z][\w-]*\s+(?:and\s+)?){{0,3}}(?:{ROLES})\s+{_NAME}{_ROLE_NAME_END}{_NOT_A_LIST}")
_CREDIT = re.compile(rf"(?<!-)\b(published|manufactured|distributed|owned|produced)\s+(?:and\s+\w+\s+)?by\s+(?:the\s+)?"
                     rf"{_NAME}{_ROLE_NAME_END}{_NOT_A_LIST}")
# "a song recorded by American singer Elvis Presley": a maker's verb, then their role
_VERB_BY_ROLE = re.compile(
    rf"(?<!-)\b(written|recorded|composed|created|painted|designed|developed|performed|sung)\s+by\s+(?:the\s+)?"
    rf"(?:[A-Z][a-z]+\s+)?(?:[a-z][\w-]*\s+(?:and\s+)?){{0,3}}(?:{ROLES})\s+{_NAME}{_ROLE_NAME_END}{_NOT_A_LIST}")
# "released on May 3, 2005, through Island Records": a record's label, for a record only
_LABEL = re.compile(r"\breleased\s+(?:[^.;()]{0,40}?\s)?(?:by|on|through|via)\s+(?:the\s+)?"
                    r"([A-Z][\w'.&-]*(?:\s+[A-Z][\w'.&-]*){0,3}\s+Records)\b")
RECORDS = frozenset("album single song EP soundtrack record".split())
# "The population was 7,218 at the 2010 census": a count with its census, so the question can name it
_POPULATION = re.compile(rf"\bpopulation\s+(?:was|of)\s+(\d{{1,3}}(?:,\d{{3}})+|\d{{2,}})\s+(?:at|in)\s+the\s+"
                         rf"{YEAR}\s+(?:[A-Z][\w.]*\s+)?census\b")
# "As of the 2010 census, the population was 46,997": the census first
_CENSUS_POPULATION = re.compile(rf"\b[Aa]s\s+of\s+the\s+{YEAR}\s+(?:[A-Z][\w.]*\s+)?census,\s+(?:the|its)\s+"
                                rf"(?:\w+\s+)?population\s+was\s+(\d{{1,3}}(?:,\d{{3}})+|\d{{2,}})(?![\d,])")
# a description cut inside its clause ("company wholly" owned by, "superhero appearing" in) names nothing
_CUT = re.compile(r"(?:ly|ing|sold)$")
MIN_LIFE, MAX_LIFE = 10, 110  # a birth and death year further apart or closer are no lifespan


def lifespan(text: str, phrase: str | None) -> dict[str, str]:
    """Birth and death years from the first parentheses when they hold places or calendar notes
    the first set's patterns do not allow; nothing for a war, a work or a group (``NOT_A_LIFE``)."""
    match = _FIRST_PARENTHESES.match(text)
    if not match or not phrase or phrase.split()[-1].lower() in NOT_A_LIFE or _HEDGE.search(match.group(1)):
        return {}
    inside = match.group(1)
    halves = _SPAN_DASH.split(inside)
    if len(halves) == 2:
        born, died = ({*_YEAR.findall(half)} for half in halves)  # one year on each side of the dash
        if len(born) == len(died) == 1 and MIN_LIFE <= int(min(died)) - int(min(born)) <= MAX_LIFE:
            return {"born": min(born), "died": min(died)}
        return {}
    if len(halves) == 1 and len(_YEAR.findall(inside)) == 1:
        # only "(date, Place)" after the last "; ": a single bare year may date a work, not a birth
        if birth := _BIRTH_WITH_PLACE.match(inside.split(";")[-1]):
            return {"born": birth.group(1)}
    return {}


def more_facts(text: str, phrase: str | None, known: set[str] = frozenset()) -> dict[str, str]:
    """Facts of a lead passage in the forms above (relation -> value), each stated once, none of the
    relations in `known` (those already read for this subject); `phrase` is what the passage says its
    subject is (the noun phrase after "is a")."""
    found: dict[str, set[str]] = {}
    if phrase and _CUT.search(phrase.split()[-1]):
        return {}

    def add(relation: str, value: str | None) -> None:
        if value:
            found.setdefault(relation, set()).add(value)

    lead = sentences(text, 2)
    first = lead[0] if lead else ""
    # a later sentence counts only while it keeps the subject ("It initially aired on Fox ...")
    own = [first] + [s for s in lead[1:] if s.startswith(("It ", "The series ", "The show "))]
    for sentence in own:
        for network, year in (_AIRED if sentence is first else _AIRED_LATER).findall(sentence):
            add("premiered", year)
            add(NETWORK, _tie_name(network) if network else None)
        for relation, year in (_EVENT if sentence is first else _EVENT_LATER).findall(sentence):
            add(relation, year)
        for relation, name in _CREDIT.findall(sentence):
            add(f"{relation}_by", _tie_name(name))
        if phrase and phrase.split()[-1] in RECORDS:
            for label in _LABEL.findall(sentence):
                add(LABEL, label)
    for sentence in sentences(text, 3):  # a place's census count follows its description
        for count, year in _POPULATION.findall(sentence):
            add(POPULATION + year, count)
        for year, count in _CENSUS_POPULATION.findall(sentence):
            add(POPULATION + year, count)
    bare = first
    for _ in range(2):
        bare = _PARENTHESES.sub("", bare)
    for work, name in _WORK_BY_ROLE.findall(bare):
        add(WORK_MAKERS.get(work, "written_by"), _tie_name(name))
    for verb, name in _VERB_BY_ROLE.findall(bare):
        add("recorded_by" if verb in ("performed", "sung") else f"{verb}_by", _tie_name(name))

    out = {relation: next(iter(values)) for relation, values in found.items() if len(values) == 1}
    for relation, year in lifespan(text, phrase).items():
        out.setdefault(relation, year)
    return {relation: value for relation, value in out.items() if relation not in known}


def with_more(lead: Lead | None, text: str) -> Lead | None:
    """`lead` (``facts.read_lead`` of the passage `text`) with the third set's facts added."""
    if lead is None:
        return None
    body = lead_text(lead.title, text)
    return dataclasses.replace(lead, more=more_facts(body, lead.description, set(lead.facts) | set(lead.ties)))
