"""Nameless questions from chains, by rules: each hidden entity is named by its description.

Two kinds, both answerable only by following the chain:

- **bridge**: a fact about the last entity, which is named only through the chain
  ("In what year was the American sitcom mentioned in the Wikipedia passage about Robert
  Belushi first shown?"): search A, read which sitcom it names, search that, read the year;
- **comparison**: the same relation for A and for B, compared by rule ("Who was born first:
  Robert Belushi or the American actor mentioned in his passage?"); the answer is a name.

A description names an entity only if it is unique among the entities the passage links, so
the chain has one reading. Phrasings rotate through a few templates chosen by a seeded draw.
"""

from __future__ import annotations

import hashlib
import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from helpers.multihop.chains import Corpus, Passage
from helpers.multihop import kin_place, names_members, time_place, years
from helpers.multihop.facts import LOCATED, MAKERS, RELATIONS, clean_title, distinct
from helpers.multihop.more_facts import CREDITS, EVENTS, POPULATION, TEMPLATES
from helpers.multihop.verify import contains

KINDS = ("bridge", "comparison")
MAX_HOPS = 3
PER_SEED = 4  # linked entities a seed passage leads to at most
RELATIONS_PER_LINK = 2  # bridge questions through one link, each about a different fact

BRIDGE_TEMPLATES = {
    "born": ("In what year was {e} born?", "What is the birth year of {e}?"),
    "died": ("In what year did {e} die?", "What is the year of death of {e}?"),
    "event": ("In what year was {e} {v}?", "When was {e} {v}? Give the year."),
}
PLACE_TEMPLATES = ("Where is {e} located?", "In which place is {e}?")
# the second set's relations ({d}: the hidden entity's description, which "part_of" repeats)
TIE_TEMPLATES = {
    "part_of": ("{e} is the {d} of what?", "Of what is {e} the {d}?"),
    "capital": ("What is the capital of {e}?", "Which city is the capital of {e}?"),
    "county_seat": ("What is the county seat of {e}?", "Which place is the county seat of {e}?"),
    "played_by": ("Who played {e}?", "Which actor portrayed {e}?"),
    "born_in": ("Where was {e} born?", "In which place was {e} born?"),
    "based_on": ("Who wrote the work that {e} is based on?", "Who is the author of the work {e} is based on?"),
    "home": ("Where is {e} from?", "In which place is {e} based?"),
}
PLACE_RELATIONS = frozenset({LOCATED, "capital", "county_seat", "born_in", "home"}) | time_place.PLACE_RELATIONS
MAKER_TEMPLATES = ("Who {v} {e}?", "Which person or group {v} {e}?")
PAIRS_PER_SEED = 2
# the sixth pass's comparisons from one seed passage, at most: a passage that links forty people would
# otherwise give hundreds of pairs, and one seed's pairs share its first search
YEARS_PER_SEED = 3
# and comparisons of an entity it names with an entity another passage names: the seed passages that name
# two dated entities of one kind are few (428 of 21,926), every passage that names one dated entity has a
# partner somewhere
ACROSS_PER_SEED = 1
# A and a hidden entity, or two hidden entities of one passage ("the American actor or the English
# director mentioned in ...")
COMPARISON_TEMPLATES = {
    "born": ("Who was born first: {a} or {e}?", "Of {a} and {e}, who was born earlier?"),
    "died": ("Who died first: {a} or {e}?", "Of {a} and {e}, who died earlier?"),
    "event": ("Which was {v} first: {a} or {e}?", "Of {a} and {e}, which was {v} earlier?"),
}


@dataclass
class Candidate:
    """A question before verification, with everything the checks need."""

    id: str
    kind: str
    question: str
    answers: list[str]
    chain: list[str]  # entity titles, seed first
    passage_ids: list[str]  # one passage per entity, in chain order
    descriptions: list[str]  # how each hidden entity (chain[1:]) is named
    relation: str
    years: list[str] = field(default_factory=list)  # comparison: the year of each compared entity
    compared: list[int] = field(default_factory=list)  # comparison: their positions in the chain

    def to_dict(self) -> dict:
        return asdict(self)


def article(phrase: str) -> str:
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


def candidate_id(kind: str, passage_ids: list[str], relation: str, answer: str) -> str:
    """Stable id of a question: its chain and fact, not its phrasing."""
    key = "|".join([kind, *passage_ids, relation, answer])
    return "mh-" + hashlib.sha1(key.encode()).hexdigest()[:12]


SEED_PLACE = ("the Wikipedia passage about", "a Wikipedia passage about")  # A has one passage / several


def entity_phrase(seed_title: str, descriptions: list[str], where: str = SEED_PLACE[0]) -> str:
    """'the novel mentioned in the passage about the American writer mentioned in ... about A'."""
    phrase = clean_title(seed_title)
    for i, desc in enumerate(descriptions):
        phrase = f"the {desc} mentioned in {where if i == 0 else 'the passage about'} {phrase}"
    return phrase


def _template_key(relation: str) -> str:
    return relation if relation in ("born", "died") else "event"


def _names(title: str) -> list[str]:
    """The answer forms of an entity: its clean name, and its full title when that differs."""
    return [clean_title(title)] + ([title] if clean_title(title) != title else [])


def bridge_template(relation: str, choose: Callable[[Sequence[str]], str] = operator.itemgetter(0)) -> str:
    """A bridge question's template for `relation` ({e}: the hidden entity), the plainest unless
    `choose` (e.g. a seeded ``rng.choice``) picks another phrasing."""
    if relation == LOCATED:
        return choose(PLACE_TEMPLATES)
    if relation in TIE_TEMPLATES:
        return choose(TIE_TEMPLATES[relation])
    if relation in MAKERS:
        return choose(MAKER_TEMPLATES).replace("{v}", MAKERS[relation])
    # the third set's relations (``more_facts``): none of them is a relation of the first two
    if relation.startswith(POPULATION):
        return choose(TEMPLATES[POPULATION]).replace("{y}", relation[len(POPULATION):])
    if relation in TEMPLATES:
        return choose(TEMPLATES[relation])
    if relation in CREDITS:
        return choose(MAKER_TEMPLATES).replace("{v}", CREDITS[relation])
    if relation in EVENTS:
        return choose(BRIDGE_TEMPLATES["event"]).replace("{v}", EVENTS[relation])
    # the fourth set's (``kin_place``): a population, the place a city is the largest city or seat of, a parent
    if (template := kin_place.template(relation, choose)) is not None:
        return template
    # the fifth set's (``time_place``): the year a war or a state began or ended, where a place lies
    if (template := time_place.template(relation, choose)) is not None:
        return template
    # the seventh set's (``names_members``): another name, an eponym, a player's team, a musician's band, a
    # character's work, a cast, the years a thing ran or a person held an office
    if (template := names_members.template(relation, choose)) is not None:
        return template
    return choose(BRIDGE_TEMPLATES[_template_key(relation)]).replace("{v}", RELATIONS[relation][0])


def described_links(corpus: Corpus, passage: Passage) -> dict[str, str]:
    found: dict[str, str] = {}
    for mention in corpus.mentions(passage):
        lead = corpus.lead(mention.title)
        if lead is not None and lead.description:
            found[mention.title] = lead.description
    return found


def unique_descriptions(corpus: Corpus, passage: Passage) -> dict[str, str]:
    """title -> description for the linked entities whose description no other link shares,
    in this passage or in another passage with the same title (the question cannot tell them apart)."""
    found = described_links(corpus, passage)
    elsewhere: dict[str, set[str]] = {}
    for sibling in corpus.by_title.get(passage.title, []):
        if sibling.id != passage.id:
            for title, desc in described_links(corpus, sibling).items():
                elsewhere.setdefault(desc.lower(), set()).add(title)
    counts: dict[str, int] = {}
    for desc in found.values():
        counts[desc.lower()] = counts.get(desc.lower(), 0) + 1
    return {title: desc for title, desc in found.items()
            if counts[desc.lower()] == 1 and elsewhere.get(desc.lower(), {title}) == {title}}


def _facts(lead, rules: str) -> dict[str, str]:
    """The facts a pass asks about: the ``Lead`` field of its set of rules ("facts", "ties", "more",
    "kin_place", "time_place", "names_members")."""
    return getattr(lead, rules)


def _next_hop(corpus: Corpus, passage: Passage, used: list[str], rng: random.Random,
              need_fact: bool, rules: str = "facts") -> tuple[str, str] | None:
    options = [(t, d) for t, d in unique_descriptions(corpus, passage).items()
               if all(distinct(t, u) for u in used) and (not need_fact or _facts(corpus.lead(t), rules))]
    return rng.choice(sorted(options)) if options else None


def comparable(seed_facts: dict[str, str], facts: dict[str, str]) -> list[tuple[str, str]]:
    """(seed relation, relation) pairs of year facts in one group whose years differ."""
    return [(s, r) for s in sorted(seed_facts) if s in RELATIONS for r in sorted(facts) if r in RELATIONS
            and RELATIONS[r][1] == RELATIONS[s][1] and facts[r] != seed_facts[s]]


def bridge(seed_passage: Passage, chain: list[str], descriptions: list[str], passages: list[Passage],
           facts: dict[str, str], rng: random.Random, where: str = SEED_PLACE[0]) -> Candidate:
    """A fact about the chain's last entity, which the question names only through the chain."""
    relation = rng.choice(sorted(facts))
    question = bridge_template(relation, rng.choice).format(e=entity_phrase(seed_passage.title, descriptions, where),
                                                            d=descriptions[-1])
    answers = answer_forms(relation, facts[relation])
    ids = [p.id for p in passages]
    return Candidate(candidate_id("bridge", ids, relation, answers[0]), "bridge",
                     question[0].upper() + question[1:], answers, list(chain), ids, list(descriptions), relation)


def answer_forms(relation: str, value: str) -> list[str]:
    """'Cumbria, England' -> ['Cumbria', 'Cumbria, England']: a place with or without its region."""
    if relation in PLACE_RELATIONS and ", " in value:
        return [value.split(", ")[0], value]
    if relation in names_members.SEVERAL_ANSWERS:  # a cast: each of its names is right
        return value.split(names_members.CAST_JOIN)
    return [value]


def from_seed(corpus: Corpus, seed_passage: Passage, seed: int) -> list[Candidate]:
    """Candidates whose chain starts at one passage; a pure function of (passage, seed).

    Through each of up to ``PER_SEED`` linked entities B: a bridge question about B, a
    comparison of A and B where both state a year of one kind, and a 3-hop bridge where B's
    passage links on to a C with a fact.
    """
    rng = random.Random(f"{seed}-{seed_passage.id}")
    if not clean_title(seed_passage.title):
        return []
    where = SEED_PLACE[len(corpus.by_title.get(seed_passage.title, [])) > 1]
    options = sorted((t, d) for t, d in unique_descriptions(corpus, seed_passage).items()
                     if corpus.lead(t).facts)
    rng.shuffle(options)
    seed_lead = corpus.lead(seed_passage.title)
    seed_facts = seed_lead.facts if seed_lead and seed_lead.passage_id == seed_passage.id else {}
    out: list[Candidate] = []
    for title, desc in options[:PER_SEED]:
        lead = corpus.lead(title)
        out += _link_bridges(corpus, seed_passage, title, desc, rng, where, "facts")
        pairs = comparable(seed_facts, lead.facts)
        if pairs:
            out.append(_comparison(seed_passage, seed_facts, title, desc, lead, rng.choice(pairs), rng, where))
        out += _onward_bridge(corpus, seed_passage, title, desc, rng, where, "facts")
    out.extend(pair_comparisons(corpus, seed_passage, options, rng, where))
    return out


def ties_from_seed(corpus: Corpus, seed_passage: Passage, seed: int) -> list[Candidate]:
    """Bridge questions about the second set of rules' facts (``Lead.ties``)."""
    return _later_set_from_seed(corpus, seed_passage, seed, "ties")


def more_from_seed(corpus: Corpus, seed_passage: Passage, seed: int) -> list[Candidate]:
    """Bridge questions about the third set of rules' facts (``Lead.more``, ``more_facts``)."""
    return _later_set_from_seed(corpus, seed_passage, seed, "more")


def kin_place_from_seed(corpus: Corpus, seed_passage: Passage, seed: int) -> list[Candidate]:
    """Bridge questions about the fourth set of rules' facts (``Lead.kin_place``, ``kin_place``)."""
    return _later_set_from_seed(corpus, seed_passage, seed, "kin_place")


def time_place_from_seed(corpus: Corpus, seed_passage: Passage, seed: int) -> list[Candidate]:
    """Bridge questions about the fifth set of rules' facts (``Lead.time_place``, ``time_place``)."""
    return _later_set_from_seed(corpus, seed_passage, seed, "time_place")


def names_members_from_seed(corpus: Corpus, seed_passage: Passage, seed: int) -> list[Candidate]:
    """Bridge questions about the seventh set of rules' facts (``Lead.names_members``, ``names_members``)."""
    return _later_set_from_seed(corpus, seed_passage, seed, "names_members")


def _later_set_from_seed(corpus: Corpus, seed_passage: Passage, seed: int, rules: str) -> list[Candidate]:
    """Bridges about one later set of rules' facts (`rules`: the ``Lead`` field that holds them),
    through up to ``PER_SEED`` linked entities B (2 hops) and on from B's passage to a C (3 hops); a
    seeded draw of the set's own, so no earlier set's questions depend on it."""
    rng = random.Random(f"{seed}-{rules}-{seed_passage.id}")
    if not clean_title(seed_passage.title):
        return []
    where = SEED_PLACE[len(corpus.by_title.get(seed_passage.title, [])) > 1]
    options = sorted((t, d) for t, d in unique_descriptions(corpus, seed_passage).items()
                     if getattr(corpus.lead(t), rules))
    rng.shuffle(options)
    out: list[Candidate] = []
    for title, desc in options[:PER_SEED]:
        out += _link_bridges(corpus, seed_passage, title, desc, rng, where, rules)
        out += _onward_bridge(corpus, seed_passage, title, desc, rng, where, rules)
    return out


def _link_bridges(corpus: Corpus, seed_passage: Passage, title: str, desc: str, rng: random.Random, where: str,
                  rules: str) -> list[Candidate]:
    """2-hop bridges through the linked entity `title`, one per fact drawn (at most ``RELATIONS_PER_LINK``)."""
    lead = corpus.lead(title)
    facts = _facts(lead, rules)
    passages = [seed_passage, corpus.by_id[lead.passage_id]]
    return [bridge(seed_passage, [seed_passage.title, title], [desc], passages, {relation: facts[relation]}, rng, where)
            for relation in rng.sample(sorted(facts), min(RELATIONS_PER_LINK, len(facts)))]


def _onward_bridge(corpus: Corpus, seed_passage: Passage, title: str, desc: str, rng: random.Random, where: str,
                   rules: str) -> list[Candidate]:
    """The 3-hop bridge from `title`'s passage on to a C with a fact (none when no link qualifies)."""
    lead = corpus.lead(title)
    passage = corpus.by_id[lead.passage_id]
    hop = _next_hop(corpus, passage, [seed_passage.title, title], rng, need_fact=True, rules=rules)
    if hop is None or MAX_HOPS <= 2:
        return []
    last = corpus.lead(hop[0])
    return [bridge(seed_passage, [seed_passage.title, title, hop[0]], [desc, hop[1]],
                   [seed_passage, passage, corpus.by_id[last.passage_id]], _facts(last, rules), rng, where)]


def pair_comparisons(corpus: Corpus, seed_passage: Passage, options: list[tuple[str, str]],
                     rng: random.Random, where: str = SEED_PLACE[0]) -> list[Candidate]:
    """Two entities the seed passage names (by description), compared on a year both passages state:
    three searches, the seed's and one for each of them."""
    pairs = []
    for i, (b, desc_b) in enumerate(options):
        for c, desc_c in options[i + 1:]:
            if distinct(b, c):
                for relations in comparable(corpus.lead(b).facts, corpus.lead(c).facts):
                    pairs.append((b, desc_b, c, desc_c, relations))
    out = []
    for b, desc_b, c, desc_c, (rel_b, rel_c) in rng.sample(pairs, min(PAIRS_PER_SEED, len(pairs))):
        lead_b, lead_c = corpus.lead(b), corpus.lead(c)
        year_b, year_c = lead_b.facts[rel_b], lead_c.facts[rel_c]
        group = RELATIONS[rel_b][1]
        template = rng.choice(COMPARISON_TEMPLATES[_template_key(group)])
        question = template.format(a=f"the {desc_b}", v=RELATIONS[group][0],
                                   e=f"the {desc_c} mentioned in {where} {clean_title(seed_passage.title)}")
        question = question[0].upper() + question[1:]
        names = _names(b if int(year_b) < int(year_c) else c)
        ids = [seed_passage.id, lead_b.passage_id, lead_c.passage_id]
        out.append(Candidate(candidate_id("comparison", ids, rel_b, names[0]), "comparison", question, names,
                             [seed_passage.title, b, c], ids, [desc_b, desc_c], rel_b,
                             years=[year_b, year_c], compared=[1, 2]))
    return out


def _comparison(seed_passage: Passage, seed_facts: dict, title: str, desc: str, lead, pair: tuple[str, str],
                rng: random.Random, where: str = SEED_PLACE[0]) -> Candidate:
    seed_relation, relation = pair
    group = RELATIONS[relation][1]
    template = rng.choice(COMPARISON_TEMPLATES[_template_key(relation)])
    a, b = seed_facts[seed_relation], lead.facts[relation]
    names = _names(seed_passage.title if int(a) < int(b) else title)
    question = template.format(a=clean_title(seed_passage.title), e=entity_phrase(seed_passage.title, [desc], where),
                               v=RELATIONS[group][0])
    ids = [seed_passage.id, lead.passage_id]
    return Candidate(candidate_id("comparison", ids, relation, names[0]), "comparison", question, names,
                     [seed_passage.title, title], ids, [desc], relation, years=[a, b], compared=[0, 1])


def comparisons_from_seed(corpus: Corpus, seed_passage: Passage, seed: int) -> list[Candidate]:
    """Comparisons on the years all five sets read (``Lead.years``, ``years``), up to ``YEARS_PER_SEED``
    per seed passage, drawn among every pair whose years differ: the seed against an entity its passage
    names (two searches), or two entities its passage names (three searches). A seeded draw of the pass's
    own, so no earlier set's questions depend on it."""
    rng = random.Random(f"{seed}-years-{seed_passage.id}")
    if not clean_title(seed_passage.title):
        return []
    where = SEED_PLACE[len(corpus.by_title.get(seed_passage.title, [])) > 1]
    seed_lead = corpus.lead(seed_passage.title)
    # the seed's years count only where this passage is the one that states them: another passage of the same
    # title may be about something else
    seed_years = seed_lead.years if seed_lead and seed_lead.passage_id == seed_passage.id else {}
    links = sorted((t, d) for t, d in unique_descriptions(corpus, seed_passage).items()
                   if corpus.lead(t).years and corpus.lead(t).passage_id != seed_passage.id)
    pairs: dict[tuple, list[tuple[str, str]]] = {}  # (None or (b, desc_b), (c, desc_c)) -> relation pairs
    for title, desc in links:
        if distinct(seed_passage.title, title) and (found := comparable_years(seed_years, corpus.lead(title).years)):
            pairs[(None, (title, desc))] = found
    for i, (b, desc_b) in enumerate(links):
        for c, desc_c in links[i + 1:]:
            if distinct(b, c) and (found := comparable_years(corpus.lead(b).years, corpus.lead(c).years)):
                pairs[((b, desc_b), (c, desc_c))] = found
    out = []
    for key in rng.sample(sorted(pairs, key=str), min(YEARS_PER_SEED, len(pairs))):
        out.append(_year_comparison(corpus, seed_passage, *key, rng.choice(pairs[key]), rng, where))
    rng.shuffle(links)
    for title, desc in links[:ACROSS_PER_SEED]:
        if (made := _across_comparison(corpus, seed_passage, title, desc, rng, where)) is not None:
            out.append(made)
    return out


@dataclass(frozen=True)
class DatedLink:
    """A passage that names (by a unique description) an entity with a year: one side of a comparison."""

    passage_id: str
    title: str  # the entity's
    description: str
    relation: str
    year: str


def dated_links(corpus: Corpus) -> dict[str, list[DatedLink]]:
    """Every (passage, named entity, year) of the corpus by group of relation (``years.group``), in a fixed
    order; computed once per corpus."""
    cached = getattr(corpus, "_dated_links", None)
    if cached is None:
        cached = {}
        for passage in sorted(corpus.passages, key=lambda p: p.id):
            if not clean_title(passage.title):
                continue
            for title, desc in sorted(unique_descriptions(corpus, passage).items()):
                lead = corpus.lead(title)
                if lead.passage_id == passage.id or not distinct(passage.title, title):
                    continue
                for relation, year in sorted(lead.years.items()):
                    cached.setdefault(years.group(relation), []).append(
                        DatedLink(passage.id, title, desc, relation, year))
        corpus._dated_links = cached
    return cached


ACROSS_TRIES = 8  # partners drawn before a seed gives up (one that shares a name or a year is refused)


def _across_comparison(corpus: Corpus, seed_passage: Passage, title: str, desc: str, rng: random.Random,
                       where: str) -> Candidate | None:
    """`title` (named by `desc` in the seed passage A) against an entity Y that another passage B names, on a
    year of one group: "Who was born first: the American actor mentioned in the Wikipedia passage about A or
    the English director mentioned in the Wikipedia passage about B?" Four passages (A, X, B, Y), two of them
    found only through the others; A and B are named, X and Y only described. Refused: a partner whose year
    is X's (no answer), that shares a name with A or X, or whose seed passage B states either year (B alone
    would then decide it; the checks look at A)."""
    lead = corpus.lead(title)
    relation = rng.choice(sorted(lead.years))
    year = lead.years[relation]
    pool = dated_links(corpus).get(years.group(relation), [])
    for _ in range(ACROSS_TRIES if pool else 0):
        other = rng.choice(pool)
        b = corpus.by_id[other.passage_id]
        names = [seed_passage.title, title, b.title, other.title]
        if other.year == year or not all(distinct(x, y) for i, x in enumerate(names) for y in names[i + 1:]):
            continue
        if contains(b.text, year) or contains(b.text, other.year):
            continue
        where_b = SEED_PLACE[len(corpus.by_title.get(b.title, [])) > 1]
        template = years.template(years.group(relation), rng.choice)
        question = template.format(a=entity_phrase(seed_passage.title, [desc], where),
                                   b=entity_phrase(b.title, [other.description], where_b))
        answer = _names(title if int(year) < int(other.year) else other.title)
        chain = [seed_passage.title, title, b.title, other.title]
        ids = [seed_passage.id, lead.passage_id, b.id, corpus.lead(other.title).passage_id]
        return Candidate(candidate_id("comparison", ids, other.relation, answer[0]), "comparison",
                         question[0].upper() + question[1:], answer, chain, ids, [desc, other.description],
                         other.relation, years=[year, other.year], compared=[1, 3])
    return None


def comparable_years(first: dict[str, str], second: dict[str, str]) -> list[tuple[str, str]]:
    """(relation, relation) pairs of one group (``years.group``) whose years differ: equal years have no
    answer."""
    return [(r, s) for r in sorted(first) for s in sorted(second)
            if years.group(r) == years.group(s) and first[r] != second[s]]


def _year_comparison(corpus: Corpus, seed_passage: Passage, first: tuple[str, str] | None, second: tuple[str, str],
                     relations: tuple[str, str], rng: random.Random, where: str) -> Candidate:
    """`first` None: the seed (named) against `second` (described); else two described entities."""
    seed_title = seed_passage.title
    title, desc = second
    lead = corpus.lead(title)
    template = years.template(years.group(relations[1]), rng.choice)
    if first is None:
        year_a, year_b = corpus.lead(seed_title).years[relations[0]], lead.years[relations[1]]
        a, b = clean_title(seed_title), entity_phrase(seed_title, [desc], where)
        chain, descriptions = [seed_title, title], [desc]
        ids, compared = [seed_passage.id, lead.passage_id], [0, 1]
    else:
        lead_a = corpus.lead(first[0])
        year_a, year_b = lead_a.years[relations[0]], lead.years[relations[1]]
        # "the American actor or the English director, both mentioned in ...": each named by its description
        a, b = f"the {first[1]}", f"the {desc}, both mentioned in {where} {clean_title(seed_title)}"
        chain, descriptions = [seed_title, first[0], title], [first[1], desc]
        ids, compared = [seed_passage.id, lead_a.passage_id, lead.passage_id], [1, 2]
    question = template.format(a=a, b=b)
    names = _names(chain[compared[0]] if int(year_a) < int(year_b) else title)
    # the repeat cap counts the last entity and its fact, as for a bridge
    return Candidate(candidate_id("comparison", ids, relations[1], names[0]), "comparison",
                     question[0].upper() + question[1:], names, chain, ids, descriptions, relations[1],
                     years=[year_a, year_b], compared=compared)
