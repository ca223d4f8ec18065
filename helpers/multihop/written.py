"""Bridge questions written by a model from a chain, then held to the same checks as the rule-made ones.

Perplexity's post has a model write the question from a chain: passage A mentions entity B, a fact
about B is the answer, and B appears only through its description (the post's "The Mom Test"
example names a book by what its author is known for). Here the writer is the course's engine,
greedy: it sees A's title, B's name and description, and the fact, and is told to name B only as
"the <description> mentioned in the Wikipedia passage about A". Its question is parsed
(``parse_question``) and must then pass every check of ``helpers.multihop.verify``, the solvers'
verdict included, exactly like a rule-made question.

Chains come from the passages the rule-made stage did not ask about (``fresh_chains``): a chain
already behind a rule-made candidate would only be the same question in other words.
``write_batch`` runs one batch of chains end to end; ``python -m helpers.multihop write`` drives
it, resumably, and commits the survivors to ``helpers/multihop/written.jsonl`` (CC BY-SA, derived
from Wikipedia text), which set-up merges into the synthetic split.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from helpers.multihop import verify
from helpers.multihop.chains import Corpus
from helpers.multihop.facts import LOCATED, MAKERS, RELATIONS, clean_title, distinct, read_lead
from helpers.multihop.questions import (SEED_PLACE, answer_forms, article, bridge_template, candidate_id,
                                       described_links, entity_phrase, unique_descriptions)
from helpers.multihop.solvers import greedy_lines, verdicts
from helpers.runs import read_jsonl

WRITTEN_FILE = Path(__file__).resolve().parent / "written.jsonl"
KIND = "bridge"
ID_KIND = "bridge-written"  # in the id's hash only: never the id of a rule-made question
MAX_QUESTION_TOKENS = 48
MIN_WORDS, MAX_WORDS = 6, 40
SYSTEM = ("You write one quiz question from the facts you are given. The question must be answerable, "
          "must not contain its answer, and must not name the hidden entity: describe it instead.")
# one worked example per kind of fact, with invented entities, shown as an earlier turn: a 0.5B
# writer copies the example's verb, so the example asks for the same kind of fact as the chain
PERSON = ("Harbour Lights Festival", "Maria Delacroix-Hunt", "Welsh sculptor")
WORK = ("Maria Delacroix-Hunt", "Tide Stone Circle", "granite sculpture")
EXAMPLE_VALUES = {"born": "1931", "died": "2010", "event": "1978", "maker": "Owen Pryce", LOCATED: "Porthmadoc"}
# a 3-hop example has a seed and a middle entity too: a writer shown a 2-hop example drops the middle hop
SEED_3 = "Cardigan Bay Review"
MIDDLE = {"person": ("Tide Stone Circle", "granite sculpture"), "work": ("Maria Delacroix-Hunt", "Welsh sculptor")}


def plain_question(relation: str, description: str | list[str], seed: str, where: str = SEED_PLACE[0]) -> str:
    """The plainest wording of a bridge question: what the worked example shows the writer.

    `description`: the hidden entity's description, or every hidden entity's in chain order (B, C)."""
    descriptions = [description] if isinstance(description, str) else list(description)
    return bridge_template(relation).format(e=entity_phrase(seed, descriptions, where))


def hidden_path(chain: dict) -> list[tuple[str, str]]:
    """(title, description) of each entity the question names by description, in chain order: B,
    or B then C for a 3-hop chain."""
    titles = chain.get("chain", [chain["seed"], chain["entity"]])[1:]
    return list(zip(titles, chain.get("descriptions", [chain["description"]])))


def example_for(relation: str, hops: int = 2) -> tuple[dict, str]:
    """An invented chain of `hops` passages asking for the same kind of fact, and the question it should give."""
    group = relation if relation in ("born", "died", LOCATED) else "maker" if relation in MAKERS else "event"
    seed, entity, desc = PERSON if group in ("born", "died") else WORK
    chain = {"seed": seed, "entity": entity, "description": desc, "relation": relation,
             "value": EXAMPLE_VALUES[group]}
    if hops == 3:
        middle = MIDDLE["person" if group in ("born", "died") else "work"]
        chain.update(seed=SEED_3, chain=[SEED_3, middle[0], entity], descriptions=[middle[1], desc])
    return chain, plain_question(relation, [d for _, d in hidden_path(chain)], chain["seed"])


def fact_sentence(description: str, relation: str, value: str) -> str:
    """'the American actor was born in 1931', 'Gus Van Sant directed the American drama film'."""
    subject = f"the {description}"
    if relation == "born":
        return f"{subject} was born in {value}"
    if relation == "died":
        return f"{subject} died in {value}"
    if relation in MAKERS:
        return f"{value} {MAKERS[relation]} {subject}"
    if relation == LOCATED:
        return f"{subject} is located in {value}"
    return f"{subject} was {RELATIONS[relation][0]} in {value}"


def asks_for(relation: str) -> str:
    if relation in MAKERS:
        return "who"
    return "where" if relation == LOCATED else "the year"


def _user_turn(chain: dict) -> str:
    seed = clean_title(chain["seed"])
    path = hidden_path(chain)
    hidden = entity_phrase(seed, [d for _, d in path], chain.get("where", SEED_PLACE[0]))
    # each hop as the writer must read it: A's passage mentions B, B's passage mentions C
    links = "".join(f"{'It' if i == 0 else 'The passage about ' + path[i - 1][0]} mentions {title}, "
                    f"{article(desc)}.\n" for i, (title, desc) in enumerate(path))
    names = " or ".join(title for title, _ in path)
    return (f"Passage: {seed}\n{links}"
            f"Fact: {fact_sentence(chain['description'], chain['relation'], chain['value'])}.\n"
            f"Write one question that asks {asks_for(chain['relation'])} and whose answer is {chain['value']}. "
            f"Call {chain['entity']} only \"{hidden}\"; never write the name {names} "
            f"or the answer.")


def writer_messages(chain: dict) -> list[dict]:
    """Chat messages asking for one nameless bridge question about `chain` (a ``fresh_chains`` row)."""
    example, answer = example_for(chain["relation"], len(hidden_path(chain)) + 1)
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": _user_turn(example)},
            {"role": "assistant", "content": f"Question: {answer}"},
            {"role": "user", "content": _user_turn(chain)}]


def parse_question(reply: str, chain: dict) -> str | None:
    """The question in a reply, or None: one line up to its first '?', naming the seed passage's title."""
    line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
    if line.lower().startswith("question:"):
        line = line[len("question:"):].strip()
    line = line.strip("\"'“”` ")
    if "?" not in line:
        return None
    question = line[:line.index("?") + 1].strip("\"'“” ")
    words = question.split()
    if not MIN_WORDS <= len(words) <= MAX_WORDS or not verify.contains(question, clean_title(chain["seed"])):
        return None
    return question[0].upper() + question[1:]


def asks_the_fact(candidate: dict) -> bool:
    """The question asks for the chain's fact: its verb ("born", "directed", "located"), and "who"
    for a maker, "where" for a place, "year" or "when" for a date."""
    relation, question = candidate["relation"], candidate["question"].lower()
    if relation in MAKERS:
        return verify.contains(question, MAKERS[relation]) and verify.contains(question, "who")
    if relation == LOCATED:
        return verify.contains(question, "where") or verify.contains(question, "located in")
    verb = RELATIONS[relation][0].split()[-1]
    return verify.contains(question, verb) and (verify.contains(question, "year") or verify.contains(question, "when"))


def describes_the_chain(candidate: dict) -> bool:
    """The question names every hidden entity by its description, so it walks the whole chain: a
    writer that drops the middle hop of a 3-hop chain ("the film mentioned in the passage about A",
    when A's passage mentions only the film's writer) asks about a link the corpus does not state."""
    return all(verify.contains(candidate["question"], desc) for desc in candidate["descriptions"])


def promising_failure(chain: dict, corpus: Corpus, index, held_ids: set[str]) -> str | None:
    """The first check the chain fails before any wording is written, or None: the answer only in
    B's passage, no held-out passage, and the rule phrasing needs a second search (the written
    question is checked again on its own words)."""
    plain = plain_question(chain["relation"], [d for _, d in hidden_path(chain)], chain["seed"], chain["where"])
    candidate = to_candidate(chain, plain, "")
    if not verify.answer_in_last_not_first(candidate, corpus.texts(chain["passage_ids"])):
        return "answer_in_last_not_first"
    if not verify.held_out_passages(candidate, held_ids):
        return "held_out_passages"
    if not verify.needs_second_search(candidate, index):
        return "needs_second_search"
    return None


def promising(chain: dict, corpus: Corpus, index, held_ids: set[str]) -> bool:
    """The checks that depend on the chain and not on the wording (``promising_failure``) all pass."""
    return promising_failure(chain, corpus, index, held_ids) is None


def entity_facts(corpus: Corpus, title: str) -> list[tuple[str, str, str]]:
    """(passage id, relation, value) of every fact the corpus states about `title`.

    Facts of the article's opening passage first; then facts that another passage of the same
    article states and the opening passage does not, when that passage names the subject first. Such a fact's chain ends
    at that passage, so the answer checks read the passage that states it. A relation two passages
    state with different values is no fact.
    """
    lead = corpus.lead(title)
    if lead is None:
        return []
    out = [(lead.passage_id, relation, value) for relation, value in sorted(lead.facts.items())]
    others: dict[str, set[str]] = {}
    where: dict[str, str] = {}
    for passage in sorted(corpus.by_title.get(title, []), key=lambda p: p.id):
        if passage.id == lead.passage_id:
            continue
        other = read_lead(passage.id, passage.title, passage.text)
        for relation, value in (other.facts.items() if other else ()):
            if relation not in lead.facts:
                others.setdefault(relation, set()).add(value)
                where.setdefault(relation, passage.id)
    out += [(where[r], r, next(iter(v))) for r, v in sorted(others.items()) if len(v) == 1]
    return out


def seed_options(corpus: Corpus, passage, used_ids: set[str], removed: Counter | None = None) -> list[dict]:
    """Every chain from one seed passage that no rule-made bridge asks about, in a stable order.

    2-hop chains (A mentions B; a fact of B) and 3-hop chains (A mentions B, B's opening passage
    mentions C; a fact of C), each fact of the last entity that ``entity_facts`` finds.
    `removed` (optional) counts what is left out and why: links whose description another link of
    the passage shares ("not_unique_description"), links to an entity with no fact ("no_fact"),
    facts a rule-made candidate already asks about ("rule_made"), and chains whose written id is in
    `used_ids` ("written_before": a question already written from them).
    """
    removed = Counter() if removed is None else removed
    if not clean_title(passage.title):
        return []
    where = SEED_PLACE[len(corpus.by_title.get(passage.title, [])) > 1]
    unique = unique_descriptions(corpus, passage)
    removed["not_unique_description"] += len(described_links(corpus, passage)) - len(unique)
    options = []
    for title, desc in sorted(unique.items()):
        path = [(passage.id, passage.title, None), (None, title, desc)]
        options += _chains_to(corpus, path, where, used_ids, removed)
        for onward in onward_links(corpus, passage.title, title, desc):
            options += _chains_to(corpus, path + [onward], where, used_ids, removed)
    return options


def onward_links(corpus: Corpus, seed_title: str, title: str, desc: str) -> list[tuple[str, str, str]]:
    """The third hop from B: (B's opening passage id, C, C's description) for each entity C that
    B's opening passage links with a description no other link there shares (one reading), distinct
    from A and B, and described differently from B, so "the X mentioned in the passage about the
    X ..." never names two entities with one phrase."""
    lead = corpus.lead(title)
    if lead is None:
        return []
    via = corpus.by_id[lead.passage_id]
    return [(via.id, c, c_desc) for c, c_desc in sorted(unique_descriptions(corpus, via).items())
            if distinct(c, seed_title) and distinct(c, title) and c_desc.lower() != desc.lower()]


def _chains_to(corpus: Corpus, path: list[tuple], where: str, used_ids: set[str], removed: Counter) -> list[dict]:
    """One chain per fact of the path's last entity. `path`: (passage id, title, description) per
    hop, where the passage id is that of the passage the hop is read from (A's for B, B's opening
    passage for C); the chain's last passage is the one that states the fact."""
    title, desc = path[-1][1], path[-1][2]
    found = entity_facts(corpus, title)
    removed["no_fact"] += not found
    ids_before = [path[0][0]] + [pid for pid, _, _ in path[2:]]  # A, then B's passage for a 3-hop chain
    out = []
    for last_id, relation, value in found:
        ids = ids_before + [last_id]
        answers = answer_forms(relation, value)
        if candidate_id(KIND, ids, relation, answers[0]) in used_ids:
            removed["rule_made"] += 1
            continue
        if candidate_id(ID_KIND, ids, relation, answers[0]) in used_ids:
            removed["written_before"] += 1
            continue
        out.append({"id": candidate_id(ID_KIND, ids, relation, answers[0]), "seed": path[0][1],
                    "entity": title, "description": desc, "relation": relation, "value": value,
                    "answers": answers, "passage_ids": ids, "where": where,
                    "chain": [t for _, t, _ in path], "descriptions": [d for _, _, d in path[1:]]})
    return out


def capped(chain: dict, taken: Counter, max_per_entity: int = verify.MAX_PER_ENTITY,
           max_per_fact: int = verify.MAX_PER_FACT) -> bool:
    """Whether the split's repeat cap would drop a question on this chain, given `taken`."""
    return taken[chain["entity"]] >= max_per_entity or taken[(chain["entity"], chain["relation"])] >= max_per_fact


def fresh_chains(corpus: Corpus, seed: int, used_ids: set[str], taken: Counter,
                 max_per_entity: int = verify.MAX_PER_ENTITY, max_per_fact: int = verify.MAX_PER_FACT,
                 keep=None, removed: Counter | None = None, on_seed=None) -> Iterator[dict]:
    """2- and 3-hop chains (``seed_options``) in a seeded order that no rule-made candidate uses.

    `used_ids`: ids of the rule-made candidates; `taken`: how many questions the split already keeps
    at each entity and at each (entity, relation), so a chain the repeat cap would drop is never written.
    Every chain of every seed passage, in rounds: the first round takes one chain from each seed
    passage, so an early stop still spreads over the corpus, and later rounds take the rest (the
    rule-made stage leaves few fresh chains, so one per passage would leave most of them unwritten).
    `keep(chain)` (e.g. ``promising``) filters; `removed` counts what each filter leaves out
    (``seed_options``'s reasons, "repeat_cap", and "not_kept" for `keep`); `on_seed()` is called
    after each seed passage of the first round (a progress bar). Lazy: a run that stops early pays
    only for what it used.
    """
    removed = Counter() if removed is None else removed
    order = sorted(p.id for p in corpus.passages)
    random.Random(seed).shuffle(order)
    taken = Counter(taken)
    pending: list[list[dict]] = []  # each seed's options not yet yielded, in its seeded order

    def take(options: list[dict]) -> Iterator[dict]:
        while options:
            chain = options.pop()
            if capped(chain, taken, max_per_entity, max_per_fact):
                removed["repeat_cap"] += 1
                continue
            if keep is not None and not keep(chain):
                removed["not_kept"] += 1
                continue
            taken[chain["entity"]] += 1
            taken[(chain["entity"], chain["relation"])] += 1
            yield chain
            return

    for pid in order:
        options = seed_options(corpus, corpus.by_id[pid], used_ids, removed)
        random.Random(f"{seed}-written-{pid}").shuffle(options)
        yield from take(options)
        if options:
            pending.append(options)
        if on_seed is not None:
            on_seed()
    while pending:
        for options in pending:
            yield from take(options)
        pending = [options for options in pending if options]


def to_candidate(chain: dict, question: str, writer: str) -> dict:
    """A written question in the candidate format the checks and the split read."""
    return {"id": chain["id"], "kind": KIND, "question": question, "answers": chain["answers"],
            "chain": [chain["seed"]] + [t for t, _ in hidden_path(chain)], "passage_ids": chain["passage_ids"],
            "descriptions": [d for _, d in hidden_path(chain)], "relation": chain["relation"], "years": [],
            "compared": [],
            "writer": writer}


def write_batch(chains: Sequence[dict], corpus: Corpus, index, held_ids: set[str], held_out: verify.TextIndex,
                sampling_client, tokenizer, writer: str, show_progress: bool = True) -> list[dict]:
    """Write, parse and check one batch; one record per chain.

    Each record holds the reply, the parsed question (or None), each check's result, and for a
    question that passes the rule checks the solvers' verdict; ``record["kept"]`` is all of them.
    The solvers run only on questions the rules keep, since they cost two generations each.
    """
    replies = greedy_lines(sampling_client, tokenizer, [writer_messages(chain) for chain in chains], "Question:",
                           MAX_QUESTION_TOKENS, "writer", show_progress)
    records = []
    for chain, reply in zip(chains, replies):
        question = parse_question(reply, chain)
        record = {"id": chain["id"], "reply": reply, "question": question, "checks": {}, "verdict": None}
        if question is not None:
            candidate = to_candidate(chain, question, writer)
            record["candidate"] = candidate
            record["checks"] = {**verify.rule_checks(candidate, corpus.texts(candidate["passage_ids"]), index,
                                                     held_ids, held_out),
                                "asks_the_fact": asks_the_fact(candidate),
                                "describes_the_chain": describes_the_chain(candidate)}
        records.append(record)
    to_solve = [r["candidate"] for r in records if r["checks"] and all(r["checks"].values())]
    if to_solve:
        def passages_of(candidate):
            return [(corpus.by_id[i].title, corpus.by_id[i].text) for i in candidate["passage_ids"]]

        found = {v["id"]: v for v in verdicts(to_solve, passages_of, sampling_client, tokenizer, show_progress)}
        for record in records:
            if record["id"] in found:
                record["verdict"] = found[record["id"]]
                record["checks"]["solvers"] = bool(found[record["id"]]["pass"])
    for record in records:
        record["kept"] = bool(record["checks"]) and record["verdict"] is not None and all(record["checks"].values())
    return records


def load_written(path: str | Path = WRITTEN_FILE) -> list[dict]:
    """The committed model-written questions, in the candidate format (empty when none)."""
    return [r for r in read_jsonl(path) if r.get("question")]
