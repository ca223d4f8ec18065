"""The years every set of rules reads, gathered for comparison questions (the sixth pass).

Each earlier set reads dated facts that its own bridge questions ask for one at a time: the first set's
birth, death, founding, opening and release years, the second's lifespans it finds after a name, the
third's first broadcasts and the years a treaty was signed or a song written, the fifth's years a war or a
state began and ended and its founding years stated before or after the subject's name. A comparison asks
which of two entities comes first on one of these years ("Which began first: the war ... or the conflict
...?"); its answer is one of the two entities the question describes, so a policy cannot learn it per
answer the way it can learn a year, and only both entities' passages decide it.

``year_facts`` gathers them into ``Lead.years`` (relation -> year; the first set's value where two sets read
one relation), and ``group`` says which relations compare with which: a birth year with a birth year, a
founding with a founding or a formation, a first broadcast with a release, a war's start with a war's start.
A relation of the third set's dated events (signed, written, ...) compares only with itself. No earlier pass
reads ``Lead.years``; ``questions.comparisons_from_seed`` makes the comparisons.
"""

from __future__ import annotations

import dataclasses
import re
from helpers.multihop.facts import RELATIONS, Lead
from helpers.multihop.more_facts import EVENTS
from helpers.multihop.time_place import BEGAN, ENDED

_A_YEAR = re.compile(r"^(1[0-9]{3}|20[0-2][0-9])$")
# the sets whose facts hold years, in pass order: where two read one relation, the earlier set's value counts
SETS = ("facts", "ties", "more", "time_place")
# group -> the verb of "Which was {v} first?" (a person's years: "Who was born first?", "Who died first?")
VERBS: dict[str, str] = {
    **{g: RELATIONS[g][0] for g in {group for _, group in RELATIONS.values()}},
    **EVENTS,
    BEGAN: "began", ENDED: "ended",
}
PERSON_GROUPS = frozenset({"born", "died"})
ACTIVE_GROUPS = frozenset({BEGAN, ENDED})  # "Which began first?", not "Which was began first?"
TEMPLATES: dict[str, tuple[str, ...]] = {
    # {a} and {b}: the two compared entities as the question names them ({a} may be the seed's own name)
    "born": ("Who was born first: {a} or {b}?", "Of {a} and {b}, who was born earlier?"),
    "died": ("Who died first: {a} or {b}?", "Of {a} and {b}, who died earlier?"),
    "active": ("Which {v} first: {a} or {b}?", "Of {a} and {b}, which {v} earlier?"),
    "event": ("Which was {v} first: {a} or {b}?", "Of {a} and {b}, which was {v} earlier?"),
}


def group(relation: str) -> str | None:
    """The group of relations whose years compare with `relation`'s (None: no year to compare)."""
    if relation in RELATIONS:
        return RELATIONS[relation][1]
    if relation in EVENTS or relation in (BEGAN, ENDED):
        return relation
    return None


def year_facts(lead: Lead) -> dict[str, str]:
    """relation -> year of every dated fact the five sets read for `lead` (population counts and names are
    no year; a value that is not one plain year is not compared)."""
    out: dict[str, str] = {}
    for field in SETS:
        for relation, value in getattr(lead, field).items():
            if group(relation) is not None and _A_YEAR.match(value):
                out.setdefault(relation, value)
    return out


def with_years(lead: Lead | None) -> Lead | None:
    """`lead` with its years gathered as ``Lead.years``."""
    return None if lead is None else dataclasses.replace(lead, years=year_facts(lead))


def template(group_name: str, choose) -> str:
    """The comparison template of a group ({a}, {b}: the entities; the verb filled in)."""
    if group_name in PERSON_GROUPS:
        return choose(TEMPLATES[group_name])
    return choose(TEMPLATES["active" if group_name in ACTIVE_GROUPS else "event"]).replace("{v}", VERBS[group_name])
