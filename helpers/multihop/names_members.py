"""An entity's other names, what it is named after, what a person or a character belongs to, who is in a film's
cast, and the years a thing ran or a person held an office: facts that leads state in forms no earlier set of
rules reads.

- **another name** of the subject, stated beside its name before the first sentence's main verb: its
  **official name** ("Greece, officially the Hellenic Republic, is a country ..."), an **alias** ("The Vietnam
  War (also known as the Second Indochina War) was a conflict ...", "Gasherbrum I, surveyed as K5 and also known
  as Hidden Peak, is ..."), a **former name** ("Tuvalu (formerly known as the Ellice Islands) is ...") and a
  **nickname** ("One57, ... nicknamed "The Billionaire Building", is ...");
- the person or thing the subject is **named after**: "It is named after the engineer Gustave Eiffel";
- the **team** a player plays for, right after their description: "LeBron James is an American professional
  basketball player for the Los Angeles Lakers of the National Basketball Association";
- the **band** a musician plays or sings in, named after the word band (group, duo, act): "Freddie Mercury was
  ... the singer of the rock band Queen";
- the **work** a fictional character appears in: "Phoebe Halliwell is a fictional character from the American
  television series "Charmed"";
- a film's or a series' **cast**, every name of it: "starring Nicolas Cage and Téa Leoni", "It stars Jon Heder,
  Jon Gries, Efren Ramirez and Tina Majorino" (a question with several right answers);
- the years a thing **ran**, by what the sentence says it did: "The series aired from 1994 to 1996", "a Scottish
  rock band active from 1979 to 1997", "a chain of British department stores that operated from 1856 to 2010";
- the years a person held a named **office**: "who served as President of South Africa from 1994 to 1999".

Whose fact it is decides each rule. The names of a subject stand before the first sentence's main verb
("<name>, officially X, is ..."); after it they belong to something else: "Meriwether Lewis ... was an American
explorer ... best known as the leader of the Lewis and Clark Expedition, also known as the Corps of Discovery"
names the expedition, not Lewis. A name is one name, ending where a name ends (a comma, a parenthesis, the
main verb): a list ("also known as the Sassanian, Sasanid, Sassanid or Neo-Persian Empire", "the Ozark
Mountains and Ozark Plateau") has no single answer, and "officially the Republic of Côte d'Ivoire" cut at
"Côte" is no name. Another name must differ from the title ("The Union of Soviet Socialist Republics, commonly
known as the Soviet Union") or the question would ask for the entity itself. A team is read only in the present
("... who last played for the Winnipeg Blue Bombers" is another time's), a band only where the sentence says it
is a band and names one ("a member of the rock band X and the folk group Y" names two), a work only for a
character, a cast only where its list ends the sentence ("It stars Billy Crystal as Harry and Meg Ryan as Sally"
may name more after a role), a run only for a subject that is neither a person (whose "served from 1913 to 1921"
is an office, read with the office's name) nor a war or a state (the fifth set's spans), and only where no other
noun comes between the subject and the verb. Each relation is stated once (two different values are no fact) and
read only where the earlier sets read nothing for it. Questions about these facts are made in a pass of their
own, after every earlier pass (``Lead.names_members``, ``questions.names_members_from_seed``), so no earlier
question moves.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from helpers.multihop.facts import (_DESCRIPTION, _PARENTHESES, Lead, _tie_name, _trim_name, clean_title, distinct,
                                    lead_text, sentences)
from helpers.multihop.kin_place import PERSON_HINTS
from helpers.multihop.time_place import _DATE_YEAR, SPAN_NOUNS

OFFICIAL, ALIAS, FORMER, NICKNAME = "official_name", "alias", "former_name", "nickname"
NAMED_AFTER, TEAM, BAND, APPEARS_IN, STARRING = "named_after", "team", "band", "appears_in", "starring"
# a cast has several right answers: its value holds every name, joined by CAST_JOIN (``questions.answer_forms``
# splits it, and ``verify.answer_in_last_not_first`` wants none of them in an earlier passage)
CAST_JOIN = "; "
SEVERAL_ANSWERS = frozenset({STARRING})
# the years a thing ran, by what the sentence says it did: "aired" (a series), "active" (a band, an observatory),
# "operated" (a store, a park), "existed" (a colony, a council): relation -> (the year it began, the year it ended)
RUNS = {verb: (f"{verb}_from", f"{verb}_until") for verb in ("aired", "active", "operated", "existed")}
# the verbs a lead writes for each ("ran on NBC from 1958 to 1961" is a series that aired; "played from 1990 to 1994"
# is a team that was active)
RUN_VERBS = {"aired": "aired", "ran": "aired", "broadcast": "aired", "active": "active", "played": "active",
             "operated": "operated", "existed": "existed"}
# a relation of an earlier set that already dates the run's start: no second question about the same year
RUN_STARTS = {"aired": ("premiered",), "active": ("formed", "founded", "established"),
              "operated": ("opened", "founded", "established"), "existed": ("founded", "established", "began")}
# the years a person held an office: "served as the 28th President of the United States from 1913 to 1921",
# "served as the first Prime Minister of Australia, in office from 1901 to 1903"; the office is part of the relation
# ("served_from:Taoiseach"), since the question must name it
SERVED_FROM, SERVED_UNTIL = "served_from:", "served_until:"
SERVED_TEMPLATES: dict[str, tuple[str, ...]] = {
    SERVED_FROM: ("In what year did {e} begin serving as {o}?", "When did {e} become {o}? Give the year."),
    SERVED_UNTIL: ("In what year did {e} stop serving as {o}?", "Until what year did {e} serve as {o}?"),
}
TEMPLATES: dict[str, tuple[str, ...]] = {
    OFFICIAL: ("What is the official name of {e}?", "Officially, what is {e} called?"),
    ALIAS: ("By what other name is {e} also known?", "What other name is {e} also known by?"),
    FORMER: ("What was {e} formerly called?", "What was the former name of {e}?"),
    NICKNAME: ("What is {e} nicknamed?", "What is the nickname of {e}?"),
    NAMED_AFTER: ("{e} is named after whom or what?", "Whom or what is {e} named after?"),
    TEAM: ("For which team does {e} play?", "Which team does {e} play for?"),
    BAND: ("Which band has {e} been a member of?", "In which band has {e} performed?"),
    APPEARS_IN: ("In which work does {e} appear as a character?", "{e} is a character in which work?"),
    STARRING: ("Who is one of the actors starring in {e}?", "Which actor is one of the stars of {e}?"),
    "aired_from": ("In what year did {e} begin airing?", "When did {e} first air? Give the year."),
    "aired_until": ("In what year did {e} stop airing?", "When did {e} last air? Give the year."),
    "active_from": ("In what year did {e} become active?", "From what year was {e} active?"),
    "active_until": ("Until what year was {e} active?", "In what year did {e} stop being active?"),
    "operated_from": ("In what year did {e} begin operating?", "From what year did {e} operate?"),
    "operated_until": ("In what year did {e} stop operating?", "Until what year did {e} operate?"),
    "existed_from": ("In what year did {e} come into existence?", "From what year did {e} exist?"),
    "existed_until": ("In what year did {e} cease to exist?", "Until what year did {e} exist?"),
}
# a name: capitalised words, with the small words names keep inside ("Republic of the Philippines", "House of
# France"); never "and" or "or", which join two names
_NAME = (r"[A-Z0-9][\w'’.&!-]*(?:\s+(?:[A-Z0-9][\w'’.&!-]*|of|the|de|du|del|des|la|le|on|upon|in|am|an|der|von|van|"
         r"y|da|di)){0,7}")
# a name in quotes ("Charmed", ""The Billionaire Building"") or bare
_QUOTED_OR_BARE = rf"(?:[\"“]+(?:the\s+|The\s+)?({_NAME})[\"”]+|(?:the\s+|The\s+)?({_NAME}))"
# where another name ends: a comma, a semicolon, parentheses or the main verb; and no list follows ("X, Y or Z",
# "X or Y", "X and Y")
_NAME_ENDS = r"(?=\s*[,;()]|\s+(?:is|was|are|were)\b|\s*$)"
_NO_LIST = (r"(?!,?\s+(?:or|and)\s+(?:the\s+)?[\"“]*[A-Z])"
            r"(?!,\s+(?:the\s+)?[\"“]*[A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*)*[\"”]*,?\s+(?:or|and)\b)")
_OFFICIAL = re.compile(rf"\bofficially(?:\s+known\s+as|\s+called|\s+named)?\s+{_QUOTED_OR_BARE}{_NAME_ENDS}{_NO_LIST}")
_ALIAS = re.compile(rf"\b(?:also|commonly|better|popularly|otherwise|widely|simply|often|locally)\s+"
                    rf"(?:known\s+as|called|referred\s+to\s+as)\s+{_QUOTED_OR_BARE}{_NAME_ENDS}{_NO_LIST}")
_FORMER = re.compile(rf"\b(?:formerly|previously)\s+(?:known\s+as\s+|called\s+|named\s+)?{_QUOTED_OR_BARE}"
                     rf"{_NAME_ENDS}{_NO_LIST}")
_NICKNAME = re.compile(rf"\bnicknamed\s+{_QUOTED_OR_BARE}{_NAME_ENDS}{_NO_LIST}")
# "named after the engineer Gustave Eiffel", "named for Kit Carson", "named in honor of Manuel L. Quezon": the
# eponym's role in lower case may stand before the name; one eponym ("the Battle of Maiwand and ..." names two)
_NAMED_AFTER = re.compile(rf"\bnamed\s+(?:after|for|in\s+honou?r\s+of)\s+(?:the\s+)?(?:[a-z][\w-]*\s+){{0,3}}"
                          rf"({_NAME})(?=\s*[,.;:()]|\s+(?:who|which|that|in|on|at|from|by|as)\b|\s*$)"
                          rf"(?!\s+(?:and|or)\s)")
# a later sentence names the subject's eponym only where it opens with the subject ("It is named after ...",
# "The tower is named after ...")
_LATER_NAMED = r"^(?:{subjects})\s+(?:is|was|were|are)\s+(?:also\s+)?named\s"
# what a player is: the last word of their description
PLAYER_NOUNS = frozenset("player footballer quarterback receiver back guard forward centre center pitcher outfielder "
                         "infielder catcher linebacker lineman defenceman defenseman goaltender goalkeeper midfielder "
                         "striker defender winger tackle end safety cornerback kicker punter shortstop baseman "
                         "batsman bowler cricketer".split())
# right after the description: "... player for the Los Angeles Lakers of the National Basketball Association",
# "... who plays for French club Valenciennes in Ligue 1", "... currently playing for the Richmond Football Club";
# never "who last played for" or "who played for": a team of the past has no present-tense question
_TEAM = re.compile(rf"^\s+(?:who\s+(?:currently\s+)?plays\s+|currently\s+playing\s+|playing\s+)?for\s+(?:the\s+)?"
                   rf"(?:[A-Z][a-z]+\s+club\s+)?({_NAME}?)(?=\s+(?:of|in)\s+the\s+[A-Z]|\s+in\s+[A-Z]|\s*[,;.()]|\s*$)"
                   rf"(?!\s+and\s)")
# "the singer of the rock band Queen", "a founding member of the heavy metal band White Zombie",
# "lead guitarist for rock act Screaming Trees": the word band (group, duo, act) says what the name is
_BAND = re.compile(rf"\b(?:lead\s+|rhythm\s+|bass\s+|founding\s+|former\s+|original\s+)?(?:vocalist|singer|"
                   rf"guitarist|bassist|drummer|keyboardist|frontman|member|co-founder|founder|percussionist|pianist|"
                   rf"rapper)\s+(?:of|for|in|with)\s+(?:the\s+)?(?:[A-Z][\w-]*\s+)?(?:[a-z][\w-]*\s+){{0,4}}"
                   rf"(?:band|group|duo|trio|act|quartet)\s+{_QUOTED_OR_BARE}"
                   rf"(?=\s*[,;.()]|\s+(?:from|with|since|until|in|which|who)\b|\s*$)(?!\s+and\s)")
# "a fictional character from the American television series "Charmed"", "a character in Shakespeare's
# "Macbeth"", "a fictional character from the horror drama television series The Walking Dead"
_WORK_NOUNS = r"(?:series|sitcom|opera|film|novel|franchise|show|comic|play|drama|saga|book|musical|strip)"
_APPEARS_IN = re.compile(rf"\bcharacter\s+(?:in|from|of|on)\s+(?:the\s+)?(?:[\w'’-]+\s+){{0,7}}?"
                         rf"(?:[\"“]+(?:the\s+)?((?:The\s+)?{_NAME})[\"”]+|{_WORK_NOUNS}\s+((?:The\s+)?{_NAME})"
                         rf"(?=\s*[,;.()]|\s*$))(?!\s*(?:,\s+[\"“]|and\s+[\"“]|and\s+(?:the\s+)?[A-Z]))")
# what a work with a cast is: the last word of its description
SCREEN_NOUNS = frozenset("film movie series sitcom miniseries show drama comedy thriller western musical serial "
                         "telefilm anime".split())
# a person's name in a cast: two to four capitalised words, initials and particles allowed ("Samuel L. Jackson",
# "Robert De Niro", "Jon Heder")
_PERSON = r"[A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|de|De|van|von|del|da|di|le|la)){1,3}"
# "directed by Dominic Sena and starring Nicolas Cage, Angelina Jolie and Giovanni Ribisi", "It stars Jon Heder,
# Jon Gries, Efren Ramirez and Tina Majorino": the list must end the sentence (or a clause in parentheses or after
# a semicolon), or it may go on after a role: "It stars Billy Crystal as Harry and Meg Ryan as Sally" names two,
# and a cast cut at the first "as" would miss right answers
_CAST = rf"({_PERSON}(?:(?:,\s+(?:and\s+)?|\s+and\s+){_PERSON})*)(?=\s*[.;:()]|\s*$)"
_STARRING = re.compile(rf"\bstarring\s+{_CAST}")
# a later sentence about the work: "It stars ...", "The film stars ...", "<title> stars ..."
_STARS = r"^(?:{subjects})\s+(?:stars|starred|starring)\s+" + _CAST
MAX_CAST = 8
# "... a Scottish rock band active from 1979 to 1997", "... a chain of British department stores that operated from
# 1856 to 2010", "The series aired from 1994 to 1996", "It was active from 2009 to 2013": the verb, then the span
_RUN = (rf"\b({'|'.join(RUN_VERBS)})\b(?:\s+(?!from\b)[^.;()]{{0,60}}?)?\s+from\s+{_DATE_YEAR}\s+(?:to|until)\s+"
        rf"{_DATE_YEAR}\b")
# in the first sentence the run must be the subject's: after its description, with no other noun brought in between
# ("... created by George C. Tilyou which operated from ..." may be Tilyou's; "a song by the band X, which was active
# from ..." is the band's)
_ANOTHER_NOUN = re.compile(r"\b(?:by|of\s+the|for|with|whose|featuring)\b|[A-Z][\w'’-]*\s+(?:which|who|that)\b")
_ORDINAL = (r"(?:\d+(?:st|nd|rd|th)|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
            r"eleventh|twelfth)")
_OFFICE = r"([A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|the|for|and))*?\s*[A-Z][\w'’.-]*|[A-Z][\w'’.-]*)"
_SERVED = re.compile(rf"\b(?:served|serving)\s+as\s+(?:the\s+)?(?:{_ORDINAL}\s+)?{_OFFICE}(?:,\s+in\s+office)?\s+"
                     rf"from\s+{_DATE_YEAR}\s+(?:to|until)\s+{_DATE_YEAR}\b")
_LATER_RUN = r"^(?:{subjects})\s+(?:(?:was|were|is|are)\s+)?(?:[^.;()]{0,50}?\s+and\s+)?" + _RUN
CHARACTER_NOUNS = frozenset("character protagonist antagonist villain superhero heroine".split())
MUSICIAN_HINTS = frozenset("singer vocalist guitarist bassist drummer keyboardist musician rapper songwriter "
                           "frontman singer-songwriter percussionist pianist".split())
LEAD_SENTENCES = 3


def _before_main_verb(sentence: str) -> str | None:
    """The first sentence up to its main verb ("Greece, officially the Hellenic Republic,"), where a subject's
    own names stand; None when it has no such verb."""
    match = re.search(r"\s(?:is|was|are|were)\s", sentence)
    return sentence[:match.start()] if match else None


def _value(match: re.Match, title: str) -> str | None:
    """The name a pattern matched (its first group that did), cleaned; None when it is no name or names the
    subject itself ("commonly known as the Soviet Union" in the passage about the Soviet Union)."""
    raw = next((group for group in match.groups() if group), None)
    name = _tie_name(raw) if raw else None
    if not name or not distinct(name, title):
        return None
    return name


def _subjects(title: str, phrase: str) -> str:
    """How a later sentence opens with the passage's subject: its name, "It", or "The <noun of its
    description>"."""
    name = clean_title(title)
    names = [re.escape(n) for n in sorted({name, name.split(",")[0]}, key=len, reverse=True) if n]
    nouns = [re.escape(w) for w in phrase.split() if w.isalpha() and w.islower()]
    return "|".join(names + ["It"] + ([rf"The\s+(?:{'|'.join(nouns)})"] if nouns else []))


def _cast(names: str, title: str) -> str | None:
    """The cast a list of names gives ("A, B and C" -> "A; B; C"), or None when it is too long to be the cast an
    opening sentence names, or names the work itself."""
    cast = [_trim_name(n) for n in re.split(r",\s+(?:and\s+)?|\s+and\s+", names) if n]
    # a name cut at an initial ("James V" of "James V. Kern") is no name
    if not 1 <= len(cast) <= MAX_CAST or not all(distinct(n, title) and len(n.split()[-1].rstrip(".")) > 1
                                                 for n in cast):
        return None
    return CAST_JOIN.join(cast)


def _office(lead: list[str], title: str, phrase: str, known: set[str]) -> tuple[str, str, str] | None:
    """(office, first year, last year) of the one office a person's opening sentences say they served in, or
    None: the first sentence, or a later one that opens with "He", "She" or the name."""
    words = set(phrase.lower().split())
    if not (words & PERSON_HINTS or {"born", "died", "born_in"} & known):
        return None
    found = set()
    later = re.compile(rf"^(?:He|She|{_subjects(title, phrase)})\s")
    for i, sentence in enumerate(lead):
        if i and not later.match(sentence):
            continue
        for match in _SERVED.finditer(_PARENTHESES.sub("", sentence)):
            office, began, ended = match.groups()
            office = _tie_name(office)
            if office and int(began) < int(ended) and distinct(office, title):
                found.add((office, began, ended))
    return next(iter(found)) if len(found) == 1 else None


def _runs(lead: list[str], title: str, phrase: str, known: set[str]) -> dict[str, tuple[str, str]]:
    """verb group ("aired", "active", ...) -> (first year, last year) of the one run the opening sentences give the
    subject; none for a person (whose "served from 1913 to 1921" is an office), for a war or a state (the fifth set
    reads those spans), or where the years run backwards."""
    words = set(phrase.lower().split())
    if words & PERSON_HINTS or {"born", "died"} & known or phrase.split()[-1].lower() in SPAN_NOUNS:
        return {}
    found: dict[str, set[tuple[str, str]]] = {}
    later = re.compile(_LATER_RUN.replace("{subjects}", _subjects(title, phrase)))
    for i, sentence in enumerate(lead):
        sentence = _PARENTHESES.sub("", _PARENTHESES.sub("", sentence))
        if i == 0:
            described = _DESCRIPTION.match(sentence)
            if not described:
                continue
            rest = sentence[described.start(2):]
            match = re.search(_RUN, rest)
            if match is None or _ANOTHER_NOUN.search(rest[:match.start()]):
                continue
        elif (match := later.match(sentence)) is None:
            continue
        verb, began, ended = match.groups()[-3:]
        if int(began) < int(ended):
            found.setdefault(RUN_VERBS[verb], set()).add((began, ended))
    return {verb: next(iter(spans)) for verb, spans in found.items() if len(spans) == 1}


def names_members_facts(text: str, title: str, phrase: str | None, known: set[str] = frozenset(),
                        known_values: set[str] = frozenset()) -> dict[str, str]:
    """The facts above for the opening sentences `text` of `title` (relation -> value), each stated once, none of
    a relation in `known` nor a value in `known_values` (what the earlier sets read); `phrase` is what the
    passage says its subject is (the noun phrase after "is a")."""
    if not phrase:
        return {}
    found: dict[str, set[str]] = {}

    def add(relation: str, value: str | None) -> None:
        if value:
            found.setdefault(relation, set()).add(value)

    lead = sentences(text, LEAD_SENTENCES)
    first = lead[0] if lead else ""
    if (names := _before_main_verb(first)) is not None:
        for pattern, relation in ((_OFFICIAL, OFFICIAL), (_ALIAS, ALIAS), (_FORMER, FORMER), (_NICKNAME, NICKNAME)):
            for match in pattern.finditer(names):
                add(relation, _value(match, title))
    later_named = re.compile(_LATER_NAMED.replace("{subjects}", _subjects(title, phrase)))
    for i, sentence in enumerate(lead[:2]):
        if i == 0 or later_named.match(sentence):
            for match in _NAMED_AFTER.finditer(sentence):
                add(NAMED_AFTER, _value(match, title))
    bare = first
    for _ in range(2):
        bare = _PARENTHESES.sub("", bare)
    described = _DESCRIPTION.match(bare)
    # the facts of a person or a character follow the description the first sentence gives its subject
    if described and " ".join(described.group(2).replace('"', "").split()) == phrase:
        words = set(phrase.lower().split())
        if phrase.split()[-1].lower() in PLAYER_NOUNS and (team := _TEAM.match(bare[described.end(2):])):
            add(TEAM, _value(team, title))
        if words & MUSICIAN_HINTS or phrase.split()[-1].lower() == "member":
            for match in _BAND.finditer(bare[described.start(2):]):
                add(BAND, _value(match, title))
        if words & CHARACTER_NOUNS:
            for match in _APPEARS_IN.finditer(first[first.find(described.group(2)):]):
                add(APPEARS_IN, _value(match, title))
    if phrase.split()[-1].lower() in SCREEN_NOUNS:
        stars = re.compile(_STARS.replace("{subjects}", _subjects(title, phrase)))
        for i, sentence in enumerate(lead):
            sentence = _PARENTHESES.sub("", sentence)
            for match in ([*_STARRING.finditer(sentence)] if i == 0 else []) + [m for m in [stars.match(sentence)] if m]:
                add(STARRING, _cast(match.group(1), title))
    if office := _office(lead, title, phrase, set(known)):
        add(SERVED_FROM + office[0], office[1])
        add(SERVED_UNTIL + office[0], office[2])
    for verb, (began, ended) in _runs(lead, title, phrase, set(known)).items():
        add(RUNS[verb][0], began)
        add(RUNS[verb][1], ended)
    out = {relation: next(iter(values)) for relation, values in found.items() if len(values) == 1}
    for verb, starts in RUN_STARTS.items():
        if set(starts) & set(known):
            out.pop(RUNS[verb][0], None)  # the run's first year is a year an earlier set asks about
    return {relation: value for relation, value in out.items()
            if relation not in known and value not in known_values}


def template(relation: str, choose: Callable[[Sequence[str]], str]) -> str | None:
    """The question template of one of these relations ({e}: the hidden entity), None for another's."""
    for prefix, templates in SERVED_TEMPLATES.items():
        if relation.startswith(prefix):
            return choose(templates).replace("{o}", relation[len(prefix):])
    return choose(TEMPLATES[relation]) if relation in TEMPLATES else None


def with_names_members(lead: Lead | None, text: str) -> Lead | None:
    """`lead` (with the earlier sets' facts) with these facts added as ``Lead.names_members``."""
    if lead is None:
        return None
    body = lead_text(lead.title, text)
    earlier = {**lead.facts, **lead.ties, **lead.more, **lead.kin_place, **lead.time_place}
    return dataclasses.replace(lead, names_members=names_members_facts(body, lead.title, lead.description,
                                                                       set(earlier), set(earlier.values())))
