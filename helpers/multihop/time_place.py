"""Facts of time and of government that leads state in forms the earlier rules do not read: when a war or a
state began and ended, the year something was founded when the sentence says so before or after its
subject's name, and a country's or state's capital given in a sentence of its own.

- the **span** of a war, conflict, revolution or state, in the parentheses after its name or in its first
  sentence: "The War of 1812 (1812–1815) was a conflict ...", "World War II ... was a global war that lasted
  from 1939 to 1945", "The American Revolution was a colonial revolt that took place between 1765 and 1783",
  "The Soviet Union was a socialist state in Eurasia that existed from 30 December 1922 to 26 December 1991"
  (two facts: the year it **began** and the year it **ended**);
- a **founding year** stated where the first set's patterns do not look: in an opening phrase whose main
  clause is about the subject ("Founded in 1946, the invitation-only festival is held ...", "Established in
  1636 and named for its first benefactor, clergyman John Harvard, Harvard is ..."), or in a later sentence
  that opens with the subject's name, or with "It" and a place before the date ("Google was founded in 1998
  by Larry Page and Sergey Brin", "It was founded in San Francisco in 1967 by Jann Wenner");
- a **capital** named in a sentence of its own: "The state capital is Sacramento", "The capital city of the
  Philippines is Manila", "...; the capital is Jefferson City", "Athens is the nation's capital and largest
  city" (in the passage about Greece).

Whose fact it is decides each rule. A span is read only for a subject that is an event or a state (the last
word of its description: "war", "conflict", "state", ...), never for a person, whose "(1913–1921)" is an
office, and only from the first sentence, whose subject is the passage's ("Nazi Germany is ... between 1933
and 1945" is read; "... the Greater German Reich from 1943 to 1945" in a later sentence is not). A span
"BC" is no year of this calendar ("lasting from 221 to 206 BC"). A founding year in an opening phrase counts
only where the main clause's subject is the passage's ("it", "they", its name, or "the <noun of its
description>"): "Founded in 1881, its campus is located ..." names the campus. A capital is read for a
place only (a country, state, territory, ...), and "The capital of France" in the passage about Vichy France
is not its own. Every relation is stated once (two different years are no fact) and only where the earlier
sets read nothing for it: no founding year for a subject that already has a founded, established, formed or
incorporated year, no capital where the second set reads one. Questions about these facts are made in a
pass of their own (``Lead.time_place``, ``questions.time_place_from_seed``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from helpers.multihop.facts import (_DATE_PREFIX, _DESCRIPTION, _NAME_END, _PARENTHESES, _PLACE, LOCATED, RELATIONS,
                                    HOME_NOUNS, YEAR, Lead, _tie_name, clean_title, lead_text, sentences)
from helpers.multihop.kin_place import PERSON_HINTS, PLACE_NOUNS

BEGAN, ENDED, CAPITAL, LIES_IN = "began", "ended", "capital", "lies_in"
VENUE, HEADQUARTERS, FROM = "home_venue", "headquarters", "person_from"
TEMPLATES: dict[str, tuple[str, ...]] = {
    BEGAN: ("In what year did {e} begin?", "When did {e} begin? Give the year."),
    ENDED: ("In what year did {e} end?", "When did {e} end? Give the year."),
    # the reader answers "In which county, state or region is the city ...?" with the city itself (0 of 10 right
    # with both passages); told to name the region, not the place, it names the region (6 of 14)
    LIES_IN: ("In which larger region does {e} lie? Answer with the region, not the {d} itself.",),
    VENUE: ("Where does {e} play its home games?", "At which venue does {e} play its home games?"),
    HEADQUARTERS: ("Where is {e} headquartered?", "In which city is {e} headquartered?"),
    FROM: ("Where is {e} from?", "Which place is {e} from?"),
}
# answers that name a place: "Jersey City" and "Jersey City, New Jersey" are both right
PLACE_RELATIONS = frozenset({LIES_IN, HEADQUARTERS, FROM})
# the first set's dated relations: a question about one of them reads "In what year was {e} founded?"
FOUNDING = ("founded", "established", "formed", "incorporated", "opened", "built", "completed", "inaugurated",
            "released", "published", "premiered", "launched")
# what a subject with a span is: the last word of its description
SPAN_NOUNS = frozenset("war wars conflict battle revolution revolt uprising rebellion insurrection campaign crisis "
                       "siege invasion occupation state empire kingdom republic dynasty caliphate sultanate "
                       "confederation union protectorate expedition".split())
# what a subject with a capital is: a place that governs (a city's "capital" is another thing)
CAPITAL_NOUNS = (PLACE_NOUNS | frozenset("republic monarchy democracy federation emirate kingdom sultanate "
                                         "commonwealth archipelago".split())) - frozenset(
    "city town village locality suburb community borough hamlet commune capital metropolis settlement seat port "
    "township".split())
LEAD_SENTENCES = 3

_NOT_BC = r"(?!\s*(?:BC|BCE|B\.C)\b)"
_DATE_YEAR = rf"{_DATE_PREFIX}{YEAR}(?!\d){_NOT_BC}"
# "(1812–1815)", "(25 June 1950 – 27 July 1953)", "(in South Korean Hangul: ...; 25 June 1950 – 27 July 1953)"
_SPAN_PARENTHESES = re.compile(rf"^[^()]{{0,120}}?\((?:[^()]*?;\s*)?{_DATE_YEAR}\s*[–-]\s*{_DATE_YEAR}\)")
# "lasted from 1939 to 1945", "took place between 1765 and 1783", "existed from 30 December 1922 to 26
# December 1991", "fought between the British Raj and the Emirate of Afghanistan from 1878 to 1880", "from 1
# November 1955 to the fall of Saigon on 30 April 1975"
_SPAN_VERB = re.compile(rf"\b(?:lasted|lasting|existed|took\s+place|occurred|fought|waged|raged|ran)\b"
                        rf"[^.;()]{{0,80}}?\b(?:from|between)\s+{_DATE_YEAR}\s+(?:to|and|until)\s+"
                        rf"(?:the\s+[a-z]+\s+of\s+[A-Z][\w]*\s+on\s+)?{_DATE_YEAR}\b")
_FOUNDING = "|".join(w.capitalize() for w in FOUNDING)
# an opening phrase: "Founded in 1946, the invitation-only festival is ...", "Founded as a Spanish mission and
# colonial outpost in 1718, the city became ..."; the subject of the main clause is filled in per passage
_OPENING_PHRASE = (rf"^({_FOUNDING})\s+(?:(?!in\s)[^,;()]{{0,60}}?\s)?(?:on\s+|in\s+){_DATE_YEAR}"
                   rf"(?!\s*[–-]\s*\d)[^;]{{0,120}}?,\s+(?:{{subjects}})\s+(?:is|was|are|were|has|had|became|remains|"
                   rf"[a-z]+s|[a-z]+ed)\b")
# a later sentence that names its subject: "Google was founded in 1998 by ...", "It was founded in San
# Francisco in 1967 by Jann Wenner", "Equivalent to the foreign ministry of other countries, it was established
# in 1789 as ...", "Las Vegas, officially incorporated in 1911 and named in 1915, is ..."
_NAMED_FOUNDING = (rf"^(?:[A-Z][^,;]{{0,80}},\s+)?(?:{{subjects}})\s+(?:was|were)\s+(?:first\s+|originally\s+|"
                   rf"officially\s+)?({'|'.join(FOUNDING)})\s+(?:in\s+(?:[A-Z][\w'-]*(?:,?\s+[A-Z][\w'-]*){{0,3}})\s+)?"
                   rf"(?:on\s+|in\s+){_DATE_YEAR}(?!\s*[–-]\s*\d)")
_APPOSITIVE_FOUNDING = (rf"^(?:{{subjects}}),\s+(?:first\s+|originally\s+|officially\s+)?({'|'.join(FOUNDING)})\s+"
                        rf"(?:on\s+|in\s+){_DATE_YEAR}(?!\s*[–-]\s*\d)[^;]{{0,60}}?,\s+(?:is|was)\b")
# a place's name: capitalised words, cut neither before "and Wear" nor before "of Belgium"
_PLACE_WORDS = r"[A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*){0,3}"
_PLACE_NAME_END = r"(?![\w'’.-])(?!\s+(?:and|of|de|upon)\s)(?!,\s+(?:and|or)\s)"
_UNIT_NOUNS = r"(?:state|province|county|region|department|district|prefecture|canton|governorate|borough|parish)"
# "The state capital is Sacramento", "The capital is Brasília", "The capital city of the Philippines is Manila",
# "...; the capital is Jefferson City"
_CAPITAL_IS = (rf"(?:^|;\s+)(?:The|the|Its|its)\s+(?:(?:state|national|federal|territorial|provincial|"
               rf"country's|nation's|state's)\s+)?capital(?:\s+city)?(?:\s+of\s+(?:the\s+)?(?:{{names}}))?\s+"
               rf"(?:is|was)\s+{_PLACE}{_NAME_END}(?!\s+and\s+[A-Z])")
# the place a place lies in, right after its description: "is a city in Worcestershire, England, southwest of
# Birmingham", "is a city in the federal state of Thuringia, Germany", "is an urban French commune and city in the
# Seine-Maritime department", "is a country in Southeast Asia"; never "in Tyne and Wear" cut at "Tyne", nor
# "in the Flemish Region of Belgium" cut before "of"
_LIES_IN = re.compile(rf"^\s+(?:located\s+|situated\s+)?in\s+(?:the\s+)?"
                      rf"(?:(?:U\.S\.\s+|federal\s+)?{_UNIT_NOUNS}\s+of\s+)?({_PLACE_WORDS}){_PLACE_NAME_END}"
                      rf"(?:\s+{_UNIT_NOUNS}\b)?(?:,\s+({_PLACE_WORDS}){_PLACE_NAME_END})?"
                      rf"(?=\s*[,.;:()]|\s+(?:(?:in|on|at|which|that|with|near|along|about|between|to)\b|and\s+[a-z]|"
                      rf"of\s+(?:the\s+)?[a-z])|\s*$)")
# a team's arena: "The Lakers play their home games at Staples Center", "The team ... plays its home games at AT&T
# Stadium in Arlington, Texas"; the sentence opens with the team ("The Lakers", "The team", "They", "It")
_VENUE = re.compile(r"^(?:The\s+[A-Z][\w.'-]*(?:\s+[A-Z][\w.'-]*)?|The\s+(?:team|club|franchise)|They|It|{name})\b"
                    r"[^.;]{0,80}?\b(?:play|plays|played)\s+(?:their|its)\s+home\s+(?:games|matches)\s+at\s+(?:the\s+)?"
                    r"([A-Z][\w&'’.-]*(?:\s+[A-Z][\w&'’.-]*){0,4})(?![\w'’.-])(?!\s+(?:and|of)\s)")
# "Its headquarters is located in Jersey City", "The team is headquartered in Frisco, Texas"
_HEADQUARTERS = (r"^(?:(?:It|The\s+(?:{nouns})|{name})\s+(?:is|was|are|were)\s+headquartered|"
                 r"(?:Its|The\s+(?:{nouns})(?:'s|’s))\s+headquarters\s+(?:is|are|was|were))"
                 r"\s+(?:located\s+)?in\s+(?:the\s+)?"
                 rf"({_PLACE_WORDS}){_PLACE_NAME_END}(?:,\s+({_PLACE_WORDS}){_PLACE_NAME_END})?"
                 r"(?=\s*[,.;:()]|\s+(?:and|in|on|at|which|where|with|near)\b|\s*$)")
# a person's place after their description: "is a former tennis player from Australia who ...", "is an American
# musician, singer and songwriter from Wilmington, Delaware"
_FROM_PLACE = re.compile(rf"^(?:,\s+[a-z][^,;()]{{0,60}}?)?\s+from\s+(?:the\s+)?({_PLACE_WORDS}){_PLACE_NAME_END}"
                         rf"(?:,\s+({_PLACE_WORDS}){_PLACE_NAME_END})?(?=\s*[.;:()]|,\s+(?:who|which|where)\b|"
                         rf"\s+(?:who|which|where|and\s+[a-z]|with|known|best)\b|\s*$)")
NOT_A_PERSON = frozenset("character protagonist antagonist villain superhero heroine hero god goddess".split())
# what running text calls the whole country: a question whose answer it is has a guessable answer
NOT_A_REGION = frozenset({"United States", "U.S.", "US", "USA", "America"})
# "Athens is the nation's capital and largest city", "Whitehorse is the territorial capital"
_CAPITAL_FIRST = re.compile(rf"^{_PLACE}\s+is\s+the\s+(?:nation's|nation’s|country's|country’s|state's|state’s|"
                            rf"territorial|national|federal|provincial)\s+capital\b")


def _subjects(title: str, phrase: str) -> list[str]:
    """How a sentence names the passage's subject: its name (whole, or before a comma: "Richmond" for
    "Richmond, Virginia"), "it", "they", or "the <noun of its description>" with up to two words before it
    ("the invitation-only festival")."""
    name = clean_title(title)
    names = sorted({name, name.split(",")[0], re.sub(r"^The\s+", "", name)}, key=len, reverse=True)
    out = [re.escape(n) for n in names if n] + ["it", "It", "they", "They"]
    nouns = [re.escape(w) for w in phrase.split() if w.isalpha() and w.islower()]
    if nouns:
        out.append(rf"(?:the|The)\s+(?:[\w-]+\s+){{0,2}}(?:{'|'.join(nouns)})")
    return out


def span(text: str, phrase: str) -> dict[str, str]:
    """{"began": year, "ended": year} from the first parentheses or the first sentence, for an event or a
    state; {} when there is none, two different ones, or the years run backwards."""
    if phrase.split()[-1].lower() not in SPAN_NOUNS:
        return {}
    first = sentences(text, 1)[0] if text else ""
    found = {(m.group(1), m.group(2)) for m in [_SPAN_PARENTHESES.match(first)] if m}
    found |= {(m.group(1), m.group(2)) for m in _SPAN_VERB.finditer(first)}
    if len(found) != 1:
        return {}
    began, ended = next(iter(found))
    return {BEGAN: began, ENDED: ended} if int(began) < int(ended) else {}


def founding(text: str, title: str, phrase: str, known_groups: set[str] = frozenset()) -> dict[str, str]:
    """The dated relation ("founded", "opened", "released", ...) -> year of the forms above, one year for
    each group of relations (``facts.RELATIONS``: founded, established and formed are one), none of a group in
    `known_groups`."""
    subjects = "|".join(_subjects(title, phrase))
    patterns = [re.compile(p.replace("{subjects}", subjects))
                for p in (_OPENING_PHRASE, _NAMED_FOUNDING, _APPOSITIVE_FOUNDING)]
    found: dict[str, set[str]] = {}
    for i, sentence in enumerate(sentences(text, LEAD_SENTENCES)):
        for pattern in patterns:
            if i == 0 and pattern is not patterns[0]:
                continue  # the first sentence's own verbs are the first set's to read
            if match := pattern.match(sentence):
                found.setdefault(match.group(1).lower(), set()).add(match.group(2))
    out = {}
    for group in {RELATIONS[relation][1] for relation in found} - set(known_groups):
        members = {relation: values for relation, values in found.items() if RELATIONS[relation][1] == group}
        if len({year for values in members.values() for year in values}) == 1:
            out.update((relation, next(iter(values))) for relation, values in members.items())
        # two years of one group (a founding and a re-founding, a release and a reissue): no single fact
    return out


def capital(text: str, title: str, phrase: str) -> str | None:
    """The capital the opening sentences name in a sentence of their own, for a place that governs."""
    if phrase.split()[-1].lower() not in CAPITAL_NOUNS:
        return None
    name = clean_title(title)
    names = "|".join(re.escape(n) for n in {name, name.split(",")[0], re.sub(r"^The\s+", "", name)} if n)
    capital_is = re.compile(_CAPITAL_IS.replace("{names}", names))
    found = set()
    for sentence in sentences(text, LEAD_SENTENCES):
        for match in capital_is.finditer(sentence):
            found.add(_tie_name(match.group(1)))
        if match := _CAPITAL_FIRST.match(sentence):
            found.add(_tie_name(match.group(1)))
    found.discard(None)
    found = {value for value in found if value != name and value not in name}
    return next(iter(found)) if len(found) == 1 else None


def lies_in(text: str, title: str, phrase: str) -> str | None:
    """The place the first sentence puts a place in, right after its description ("a city in Worcestershire,
    England" -> "Worcestershire, England"), or None; for a place only, never its own name or the whole
    country."""
    if phrase.split()[-1].lower() not in PLACE_NOUNS:
        return None
    rest = _after_description(text, phrase)
    match = _LIES_IN.match(rest) if rest is not None else None
    return _place(match.groups(), title) if match else None


def _after_description(text: str, phrase: str) -> str | None:
    """What follows the description in the first sentence (parentheses removed, two levels deep), or None
    when the first sentence's description is not `phrase`: the fact must be about the passage's subject."""
    first = sentences(text, 1)[0] if text else ""
    for _ in range(2):
        first = _PARENTHESES.sub("", first)
    described = _DESCRIPTION.match(first)
    if not described or " ".join(described.group(2).replace('"', "").split()) != phrase:
        return None
    return first[described.end(2):]


def _place(parts: Sequence[str | None], title: str) -> str | None:
    """A place's name from its matched parts ("Jersey City", "New Jersey" -> "Jersey City, New Jersey"), or
    None when a part is no name, the first is the whole country, or it names the subject."""
    names = [_tie_name(part) for part in parts if part]
    if not names or not all(names) or names[0] in NOT_A_REGION:
        return None
    own = clean_title(title).split(",")[0]
    if re.search(rf"\b{re.escape(own)}\b", names[0]) or re.search(rf"\b{re.escape(names[0])}\b", clean_title(title)):
        return None
    return ", ".join(names)


def home_venue(text: str, title: str, phrase: str) -> str | None:
    """The venue where a team plays its home games, stated once in the opening sentences."""
    if phrase.split()[-1].lower() not in HOME_NOUNS:
        return None
    pattern = re.compile(_VENUE.pattern.replace("{name}", re.escape(clean_title(title))))
    found = {_tie_name(m.group(1)) for s in sentences(text, 4) if (m := pattern.match(s))} - {None}
    return next(iter(found)) if len(found) == 1 else None


def headquarters(text: str, title: str, phrase: str) -> str | None:
    """The city a later opening sentence puts the subject's headquarters in."""
    nouns = "|".join(re.escape(w) for w in phrase.split() if w.isalpha() and w.islower()) or "company"
    pattern = re.compile(_HEADQUARTERS.replace("{nouns}", nouns).replace("{name}", re.escape(clean_title(title))))
    found = {_place(m.groups(), title) for s in sentences(text, 4)[1:] if (m := pattern.match(s))} - {None}
    return next(iter(found)) if len(found) == 1 else None


def person_from(text: str, phrase: str, title: str) -> str | None:
    """The place a person's first sentence says they are from, right after their description."""
    words = set(phrase.lower().split())
    if not (PERSON_HINTS & words) or NOT_A_PERSON & words or phrase.split()[-1].lower() in PLACE_NOUNS:
        return None
    rest = _after_description(text, phrase)
    match = _FROM_PLACE.match(rest) if rest is not None else None
    return _place(match.groups(), title) if match else None


def time_place_facts(text: str, title: str, phrase: str | None, known: set[str] = frozenset(),
               known_values: set[str] = frozenset()) -> dict[str, str]:
    """The facts above for the opening sentences `text` of `title` (relation -> value), none of a relation in
    `known` (nor a founding year where `known` has one of its group) nor a value in `known_values`; `phrase` is
    what the passage says its subject is (the noun phrase after "is a")."""
    if not phrase:
        return {}
    out = span(text, phrase)
    out.update(founding(text, title, phrase, {RELATIONS[r][1] for r in known if r in RELATIONS}))
    if value := capital(text, title, phrase):
        out[CAPITAL] = value
    if LOCATED not in known and (value := lies_in(text, title, phrase)):
        out[LIES_IN] = value
    if value := home_venue(text, title, phrase):
        out[VENUE] = value
    if value := headquarters(text, title, phrase):
        out[HEADQUARTERS] = value
    if not {"born_in", "home"} & set(known) and (value := person_from(text, phrase, title)):
        out[FROM] = value
    return {relation: value for relation, value in out.items()
            if relation not in known and value not in known_values}


def template(relation: str, choose: Callable[[Sequence[str]], str]) -> str | None:
    """The question template of a span's relation ({e}: the hidden entity), None for another's (a founding
    year and a capital are asked as the earlier sets ask them)."""
    return choose(TEMPLATES[relation]) if relation in TEMPLATES else None


def with_time_place(lead: Lead | None, text: str) -> Lead | None:
    """`lead` (with the earlier sets' facts) with these facts added as ``Lead.time_place``."""
    if lead is None:
        return None
    body = lead_text(lead.title, text)
    earlier = {**lead.facts, **lead.ties, **lead.more, **lead.kin_place}
    return dataclasses.replace(lead, time_place=time_place_facts(body, lead.title, lead.description, set(earlier),
                                                      set(earlier.values())))
