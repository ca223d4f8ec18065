"""Atomic facts and short descriptions read off the opening sentences of a Wikipedia passage, by rules.

A lead paragraph names its subject and says what it is: "Robert James Belushi (born October 23,
1980) is an American actor." From such a passage two things are taken:

- the **description**, the noun phrase after "is a/an/the" ("American actor"): it is what replaces
  the entity's name in a nameless question;
- **facts**, (relation, value) pairs stated once and in a checkable form: a birth or death year
  in the parentheses after the name, "founded / released / opened ... in YYYY" in the first
  sentences, or the maker of a work in the first sentence ("directed by Alan Parker", "a play
  by Edward Albee"). A relation the passage states twice, differently, is no fact.

Only passages whose text starts with their subject are read (mid-article chunks of the corpus
talk about something else as often as not).

A second set of rules (``tie_facts``) reads facts that tie the subject to another name: what it is
part of ("the capital and largest city **of Latvia**"), a capital or county seat ("Its county seat
is Minden"), the actor who plays a character, a birthplace, the author of the book a film is based
on, where a band or team is from, and the dates and makers the first set misses ("Directed by Alan
J. Pakula, the film ..."). They stay apart from the first set's facts (``Lead.ties``): questions
about them are made in a pass of their own, after the first set's, so adding a rule here moves no
question the first set made, nor the verdict recorded for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# relation -> (verb phrase in a question, group of relations that compare with each other)
RELATIONS: dict[str, tuple[str, str]] = {
    "born": ("born", "born"),
    "died": ("die", "died"),
    "founded": ("founded", "founded"),
    "established": ("established", "founded"),
    "formed": ("formed", "founded"),
    "incorporated": ("incorporated", "founded"),
    "opened": ("opened", "opened"),
    "built": ("built", "opened"),
    "completed": ("completed", "opened"),
    "inaugurated": ("inaugurated", "opened"),
    "released": ("released", "released"),
    "published": ("published", "released"),
    "premiered": ("first shown", "released"),
    "launched": ("launched", "released"),
    "performed": ("first performed", "released"),
    "held": ("held", "held"),
    "fought": ("fought", "held"),
}
# relation -> question verb for facts whose value is a name (never compared by rule)
MAKERS: dict[str, str] = {
    "directed_by": "directed", "created_by": "created", "written_by": "wrote", "composed_by": "composed",
    "designed_by": "designed", "founded_by": "founded", "developed_by": "developed",
    "recorded_by": "recorded", "painted_by": "painted", "produced_by": "produced",
}
# the noun a work's description ends with -> the maker relation of "<work> by NAME"
WORK_MAKERS = {
    **dict.fromkeys(("album", "song", "single", "EP", "ballad"), "recorded_by"),
    **dict.fromkeys(("novel", "book", "play", "poem", "story", "novella", "memoir", "essay", "opera",
                     "musical", "tragedy", "comedy", "drama", "poem", "epic"), "written_by"),
    **dict.fromkeys(("painting", "portrait"), "painted_by"),
    **dict.fromkeys(("composition", "symphony", "concerto", "hymn", "score"), "composed_by"),
    **dict.fromkeys(("film", "documentary", "movie"), "directed_by"),
    **dict.fromkeys(("sculpture", "statue", "building"), "designed_by"),
}
LOCATED = "located_in"  # the place a lead puts its subject in ("a village in Cumbria, England")
YEAR = r"(1[0-9]{3}|20[0-2][0-9])"
MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December")
_DATE_PREFIX = rf"(?:(?:{MONTHS})\s+(?:\d{{1,2}},?\s+)?|\d{{1,2}}\s+(?:{MONTHS})\s+)?"
# "(born October 23, 1980)", "(b. 1981)", "(1866–1960)", "(12 May 1907 – 3 June 1990)", and the
# corpus's "(June 3, 1925September 29, 2010)" whose dash was lost
_BORN = re.compile(rf"^[^()]{{0,120}}(?:\([^()]*\)\s*)?\((?:[^()]*?;\s*)?(?:born|b\.)\s+[^()]*?{YEAR}(?!\d)[^()]*\)")
_LIFESPAN = re.compile(rf"^[^()]{{0,120}}(?:\([^()]*\)\s*)?\((?:[^()]*?;\s*)?{_DATE_PREFIX}{YEAR}\s*[–-]?\s*{_DATE_PREFIX}{YEAR}\)")
_EVENTS = "|".join(r for r in RELATIONS if r not in ("born", "died"))
# "was born on 3 May 1921 in ...", "died in 1990" (first sentence, no parentheses)
_LIFE_EVENT = re.compile(rf"\b(born|died)\s+(?:on\s+|in\s+)?{_DATE_PREFIX}{YEAR}\b")
# first sentence: "a college established in 1950", "was founded on 3 May 1921"
_EVENT = re.compile(rf"\b({_EVENTS})\s+(?:(?:in|at|near)\s+[A-Z][^.;()]{{0,40}}?\s+)?(?:on\s+|in\s+)?"
                    rf"{_DATE_PREFIX}{YEAR}\b")
# later sentences only when they keep the subject: "It was opened in 1932."
_EVENT_LATER = re.compile(
    rf"^(?:It|The\s+\w+|This\s+\w+)\s+(?:was|were)\s+(?:first\s+|originally\s+|officially\s+)?({_EVENTS})"
    rf"\s+(?:on\s+|in\s+)?{_DATE_PREFIX}{YEAR}\b")
# "a 1970 American comedy film": the year of a work stated in its description
_LEADING_YEAR = re.compile(rf"^{YEAR}\s+(.+)$")
_WORK = re.compile(r"\b(?:film|album|novel|song|single|book|game|series|play|musical|opera|EP|documentary|"
                   r"sitcom|show|episode|comedy|drama|miniseries|adaptation|video)$")
_NAME = r"([A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|de|van|von|da|del|di|la|le|du|bin|al)){0,4})"
_NAME_END = r"(?=\s*[,.;:()]|\s+(?:and|in|for|with|from|on|at|which|who|that|as|starring|about)\b|\s*$)"
_MAKER = re.compile(rf"\b(directed|created|written|composed|designed|founded|developed|recorded|painted)"
                    rf"\s+by\s+{_NAME}{_NAME_END}")
_WORK_BY = re.compile(rf"\b({'|'.join(WORK_MAKERS)})\s+by\s+{_NAME}{_NAME_END}")
# "by American singer X", "by English": an adjective, not the maker
_NOT_A_NAME = re.compile(r"^(?:The|A|An|His|Her|Their|[A-Z][a-z]+(?:an|ish|ese|ch|i))$")
_PLACE = r"([A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|upon|on-the|del|la)){0,4})"
_PLACE_AFTER = re.compile(r"\b(?:(?:located|situated|based|headquartered|lies|sits)\s+in|"
                          r"(?:village|town|city|municipality|commune|suburb|neighbou?rhood|county|district|parish|"
                          r"hamlet|community|island|river|lake|mountain|stadium|arena|airport|station|church|"
                          r"cathedral|park|museum|school|university|college|hospital|bridge|castle|mall|"
                          r"prison)\s+(?:located\s+)?in)\s+(?:the\s+)?"
                          + _PLACE + r"(?:,\s+" + _PLACE + r")?")
_NOT_A_PLACE = re.compile(r"^(?:Northern|Southern|Eastern|Western|Central|North|South|East|West|The|A|An)$")
DANGLING = frozenset("and or but north south east west given than as".split())
REGIONS = frozenset("city state country region province capital metropolis territory nation island "
                    "continent county borough municipality commune district".split())
VAGUE = frozenset({"branch", "genus", "species", "term", "type", "form", "part", "list", "series",
                   "name", "word", "number", "group", "set", "kind", "method", "process", "concept", "era",
                   "member", "seat", "one", "period", "area", "character"})
_DESCRIPTION = re.compile(
    r"^(?:[^.;]|(?<=\b[A-Z])\.|(?<=\b(?:St|Jr|Sr|Dr|Mr|Co|vs))\.){0,160}?\b(?:is|was|are|were)\s+(an?|the)\s+(.{3,80}?)"
    r"(?=\s+(?:who|which|that|from|in|on|by|of|for|based|located|known|with|directed|"
    r"written|starring|created|best|born|held|composed|produced|developed|published|released|"
    r"situated|originally|headquartered|where|whose|at|to|between|near|first|set|consisting|owned|operated|performed|"
    r"recorded|designed|made|" + "|".join(RELATIONS) + r")\b|\s*[.,;:(]|\s*$)")
_PARENTHESES = re.compile(r"\s*\([^()]*\)")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9\)\"'])\.\s+(?=[A-Z\"])")
# what a lead may date with "(YYYY–YYYY)" that is neither born nor dies
NOT_A_LIFE = frozenset("war wars conflict battle revolution uprising rebellion campaign crisis siege period era "
                       "dynasty empire kingdom republic film series show novel collection portrait painting "
                       "theater theatre park duo trio group band company manufacturer movement".split())
MAX_DESCRIPTION_WORDS = 6
LEAD_SENTENCES = 2


@dataclass(frozen=True)
class Lead:
    """What one lead passage says about its subject."""

    passage_id: str
    title: str
    description: str | None
    facts: dict[str, str] = field(default_factory=dict)  # relation -> year or name
    ties: dict[str, str] = field(default_factory=dict)  # the second set's facts (``tie_facts``)
    more: dict[str, str] = field(default_factory=dict)  # the third set's (``more_facts.with_more``)
    kin_place: dict[str, str] = field(default_factory=dict)  # the fourth set's (``kin_place.with_kin_place``)
    time_place: dict[str, str] = field(default_factory=dict)  # the fifth set's (``time_place.with_time_place``)
    years: dict[str, str] = field(default_factory=dict)  # every set's years, for comparisons (``years.with_years``)
    names_members: dict[str, str] = field(default_factory=dict)  # the seventh set's (``names_members``)


def clean_title(title: str) -> str:
    """'Three Tall Women (play)' -> 'Three Tall Women': the name as running text writes it."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


def distinct(a: str, b: str) -> bool:
    """Two entities are distinct when neither clean name contains the other ("Break Up" and
    "Break-Up" are one name). It lives here, not in ``chains``, so that a set of rules can refuse a
    value that names the subject itself without importing the module that imports it."""
    x = " ".join(re.findall(r"\w+", clean_title(a).lower()))
    y = " ".join(re.findall(r"\w+", clean_title(b).lower()))
    return bool(x) and bool(y) and f" {x} " not in f" {y} " and f" {y} " not in f" {x} "


def lead_text(title: str, text: str) -> str:
    """The text with the title the wiki-18 chunks repeat at their start removed."""
    text = text.strip()
    if title and text.startswith(title + " ") and text[len(title) + 1:].lstrip().startswith(clean_title(title).split(" ")[0]):
        return text[len(title):].strip()
    return text


def is_lead(title: str, text: str) -> bool:
    """Whether the passage opens with its subject (first word of the title within the first words)."""
    name = clean_title(title)
    if not name:
        return False
    first = name.split()[0].lower()
    opening = text[: len(name) + 40].lower()
    return first in opening.split(" ")[:6] or opening.startswith(name.lower())


def sentences(text: str, count: int) -> list[str]:
    return _SENTENCE_END.split(text, maxsplit=count)[:count]


def description(text: str) -> str | None:
    """The noun phrase after 'is a/an/the' in the first sentence, or None."""
    first = sentences(text, 1)[0] if text else ""
    for _ in range(2):  # pronunciations, dates and other names, nested at most once
        first = _PARENTHESES.sub("", first)
    match = _DESCRIPTION.match(first)
    if not match:
        return None
    phrase = " ".join(match.group(2).replace('"', "").split())
    if len(phrase.split()) > MAX_DESCRIPTION_WORDS and " and " in phrase:
        phrase = phrase.split(" and ")[0]  # "a city and the county town of ...": the first half
    words = phrase.split()
    if not words or len(words) > MAX_DESCRIPTION_WORDS or not words[-1][:1].islower():
        return None  # a proper name at the end ("a film by Sam Raimi") is not a description
    last = words[-1].lower()
    if last in DANGLING or (last.endswith("ed") and len(last) > 4):
        return None  # cut in the middle of a clause: "a material claimed", "a lead single and"
    return phrase


def facts(text: str) -> dict[str, str]:
    """(relation -> year) stated once, unambiguously, in the opening sentences."""
    found: dict[str, set[str]] = {}
    if match := _BORN.match(text):
        found.setdefault("born", set()).add(match.group(1))
    elif match := _LIFESPAN.match(text):
        found.setdefault("born", set()).add(match.group(1))
        found.setdefault("died", set()).add(match.group(2))
    lead = sentences(text, LEAD_SENTENCES)
    for relation, year in _LIFE_EVENT.findall(lead[0] if lead else ""):
        found.setdefault(relation, set()).add(year)
    for relation, year in _EVENT.findall(lead[0] if lead else ""):
        found.setdefault(relation, set()).add(year)
    for sentence in lead[1:]:
        for relation, year in _EVENT_LATER.findall(sentence):
            found.setdefault(relation, set()).add(year)
        if sentence.startswith(("It ", "The ")):
            for verb, name in _MAKER.findall(sentence):
                found.setdefault(f"{verb}_by", set()).add(_trim_name(name))
    first = lead[0] if lead else ""
    for verb, name in _MAKER.findall(first):
        found.setdefault(f"{verb}_by", set()).add(_trim_name(name))
    for work, name in _WORK_BY.findall(first):
        found.setdefault(WORK_MAKERS[work], set()).add(_trim_name(name))
    if (place := _PLACE_AFTER.search(first)) and not _NOT_A_PLACE.match(place.group(1)):
        where = place.group(1) + (f", {place.group(2)}" if place.group(2) else "")
        found.setdefault(LOCATED, set()).add(_trim_name(where))
    return {relation: next(iter(values)) for relation, values in found.items()
            if len(values) == 1 and not _NOT_A_NAME.match(next(iter(values)))}


def _trim_name(name: str) -> str:
    """'Chris Kennedy.' -> 'Chris Kennedy' (a sentence's full stop), but 'John Smith Jr.' stays."""
    last = name.split()[-1]
    return name[:-1] if name.endswith(".") and len(last) > 3 else name


def read_lead(passage_id: str, title: str, text: str) -> Lead | None:
    """The description and facts of a lead passage; None for a passage that is not a lead.

    A work's year in its description ("a 1970 American comedy film") becomes its release fact
    and leaves the description, which then no longer gives the answer away.
    """
    body = lead_text(title, text)
    if not is_lead(title, body):
        return None
    phrase, known = description(body), facts(body)
    if phrase and (dated := _LEADING_YEAR.match(phrase)):
        year, phrase = dated.group(1), dated.group(2)
        if _WORK.search(phrase):
            if known.get("released", year) == year:
                known["released"] = year
            else:
                known.pop("released")
    if phrase and phrase.lower() in VAGUE:
        phrase = None
    if phrase and phrase.split()[-1].lower() in NOT_A_LIFE:
        known.pop("born", None)  # "(1917–1922)" after a war or a duo is no birth and death
        known.pop("died", None)
    if LOCATED in known and (not phrase or phrase.split()[-1].lower() in REGIONS):
        del known[LOCATED]  # "the U.S. state ... is located where?" has a guessable answer
    ties = {relation: value for relation, value in tie_facts(body, phrase).items() if relation not in known}
    return Lead(passage_id, title, phrase, known, ties)


# ------------------------------------------------------------------ the second set of rules

# where a name ends: "President of" and "Cascade Range of" lose their dangling word
_DANGLING_NAME_WORDS = frozenset("of de del la upon on-the".split())
_NOT_A_TIE = frozenset({"U.S.", "US", "USA", "U.S", "UK", "St", "St.", "Mr", "Dr"})
# "... the capital and largest city" + " of Latvia": what the described thing belongs to
# (the name must end where a name ends: "of the Federal government" names no "Federal")
_OF = re.compile(rf"^\s+of\s+(?:the\s+)?{_PLACE}{_NAME_END}")
# "... an American rock band" + " from Boston, Massachusetts" / " based in Leeds"
_FROM = re.compile(rf"^\s+(?:from|based\s+in)\s+(?:the\s+)?{_PLACE}(?:,\s+{_PLACE})?")
# "the husband of Queen Victoria" asks "of what?" about a person; "festival commemorating the birth" is a
# description cut inside its clause: neither makes a part-of question
KIN_NOUNS = frozenset("husband wife son daughter consort mother father brother sister widow child grandson "
                      "granddaughter nephew niece cousin".split())
HOME_NOUNS = frozenset("band group duo trio quartet team club company orchestra choir franchise".split())
CHARACTER_NOUNS = frozenset("character protagonist antagonist villain superhero heroine".split())
_CAPITAL = re.compile(rf"\b(?:[Ii]ts|[Tt]he\s+\w+'s|[Ww]hose)\s+capital(?:\s+city|\s+and\s+(?:the\s+)?"
                      rf"(?:largest|most\s+populous)\s+city)?\s+(?:is|was)\s+{_PLACE}")
_COUNTY_SEAT = re.compile(rf"\b(?:[Ii]ts|[Tt]he|[Ww]hose)\s+county\s+seat\s+(?:is|was)\s+{_PLACE}")
_PLAYED_BY = re.compile(rf"\b(?:played|portrayed|voiced)\s+by\s+{_NAME}{_NAME_END}(?!\s+and\b)")
_BORN_IN = re.compile(rf"\bborn\s+(?:[^()]{{0,40}}?\s)??in\s+(?:the\s+)?{_PLACE}(?:,\s+{_PLACE})?")
_BASED_ON = re.compile(rf"\bbased\s+on\s+(?:the|a|an|his|her)\s+(?:{YEAR}\s+)?(?:[\w-]+\s+)?(?:novel|book|play|"
                       rf"short\s+story|story|comic|memoir|novella|musical)(?:\s+of\s+the\s+same\s+name)?"
                       rf"\s+by\s+{_NAME}{_NAME_END}(?!\s+and\b)")  # "by Lisberger and MacBird": no one author
# a later sentence that opens with its maker: "Directed by Alan J. Pakula, the film stars ..."
_SENTENCE_MAKER = re.compile(rf"^(Directed|Written|Created|Composed|Designed|Developed|Produced)\s+by\s+{_NAME}{_NAME_END}")
# a lifespan after other parentheses' leftovers: "(; ; , 19 December 1906 – 10 November 1982)"
_LIFESPAN_AFTER = re.compile(rf"^[^()]{{0,120}}\([;,\s]*[^()]*?[;,]\s*{_DATE_PREFIX}{YEAR}\s*[–-]\s*{_DATE_PREFIX}{YEAR}\)")
TIE_SENTENCES = 3


def _tie_name(value: str) -> str | None:
    """A clean name for a tie's value, or None when it is no name ("Dutch", "Canada's", "U.S.")."""
    words = _trim_name(value.strip()).split()
    while words and words[-1].lower() in _DANGLING_NAME_WORDS:
        words.pop()
    name = " ".join(words).rstrip(".,")
    if (not name or name in _NOT_A_TIE or name.endswith(("'s", "’s")) or _NOT_A_NAME.match(name)
            or _NOT_A_PLACE.match(name) or len(name) < 3):
        return None
    return name


def tie_facts(text: str, phrase: str | None) -> dict[str, str]:
    """Facts that tie the subject to another name or date (relation -> value), each stated once;
    `phrase` is what the passage says its subject is (the noun phrase after "is a")."""
    found: dict[str, set[str]] = {}

    def add(relation: str, *parts: str | None) -> None:
        names = [_tie_name(p) for p in parts if p]
        if names and all(names):
            found.setdefault(relation, set()).add(", ".join(names))

    first = sentences(text, 1)[0] if text else ""
    bare = first
    for _ in range(2):
        bare = _PARENTHESES.sub("", bare)
    if phrase and (match := _DESCRIPTION.match(bare)):
        rest = bare[match.end(2):]
        words = phrase.lower().split()
        if (of := _OF.match(rest)) and words[-1] not in KIN_NOUNS and not any(w.endswith("ing") for w in words):
            add("part_of", of.group(1))
        if phrase.split()[-1].lower() in HOME_NOUNS and (home := _FROM.match(rest)):
            add("home", home.group(1), home.group(2))
    lead = sentences(text, TIE_SENTENCES)
    for sentence in lead:
        for place in _CAPITAL.findall(sentence):
            add("capital", place)
        for place in _COUNTY_SEAT.findall(sentence):
            add("county_seat", place)
        for name in _BASED_ON.findall(sentence):
            add("based_on", name[-1])
        if phrase and CHARACTER_NOUNS & set(phrase.lower().split()):
            for name in _PLAYED_BY.findall(sentence):
                add("played_by", name)
    for sentence in lead[:2]:
        for place, region in _BORN_IN.findall(sentence):
            add("born_in", place, region)
    for sentence in lead[1:]:
        if maker := _SENTENCE_MAKER.match(sentence):
            add(f"{maker.group(1).lower()}_by", maker.group(2))
    out = {relation: next(iter(values)) for relation, values in found.items() if len(values) == 1}
    if (span := _LIFESPAN_AFTER.match(text)) and not (phrase and phrase.split()[-1].lower() in NOT_A_LIFE):
        out.setdefault("born", span.group(1))
        out.setdefault("died", span.group(2))
    return out
