"""Model-written bridge questions: the writer's prompt, parsing its reply, the checks, the merge into the split.

The writer and the solvers are one scripted sampling client: a writer prompt (it ends with
"Question:") gets the reply scripted for its chain's entity, a solver prompt (it ends with
"Answer:") the last year of the passages it shows, so only a chain's passages can answer it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from helpers import data
from helpers.multihop import build, questions, verify, written
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.search.local import LocalIndex

from fixtures.char_tokenizer import CharTokenizer
from fixtures.multihop_corpus import BAND, FESTIVAL, POET, with_distractors

# a long passage, so that the short ones of other Welsh sculptors outrank it on the question's words
SCULPTOR = ("Maria Delacroix-Hunt (born 1931) is a Welsh sculptor. Her studio is on the cliffs above the town. "
            + " ".join(["It looks over the quarry, the chapel and the old lifeboat station."] * 6))
# other Welsh sculptors, so that one search on the question does not also find Maria Delacroix-Hunt
OTHERS = [(name, f"{name} (born {year}) is a Welsh sculptor, a Welsh sculptor born in the year {year}.")
          for name, year in (("Eira Rhys", 1950), ("Owain Pugh", 1948), ("Siân Morgan", 1960))]
GOOD = ("In what year was the Welsh sculptor mentioned in the Wikipedia passage about Harbour Lights "
        "Festival born?")


@pytest.fixture(scope="module")
def rows():
    return with_distractors([("Harbour Lights Festival", FESTIVAL), ("Maria Delacroix-Hunt", SCULPTOR),
                             ("Quayside Brass Band", BAND), ("Gwen Arliss", POET), *OTHERS])


@pytest.fixture(scope="module")
def corpus(rows):
    return Corpus(passages_from_rows(rows))


@pytest.fixture(scope="module")
def index(rows):
    return LocalIndex.from_rows(rows)


def _chain(corpus, entity: str) -> dict:
    """The fresh chain from the festival to `entity` (no rule-made question excluded)."""
    options = written.fresh_chains(corpus, 0, set(), Counter(), keep=lambda c: c["entity"] == entity)
    return next(c for c in options if c["entity"] == entity)


class _Scripted:
    """Writer replies by entity; solver replies read the prompt's passages."""

    def __init__(self, replies: dict[str, str]):
        self.replies = replies
        self.prompts: list[str] = []

    _Tokenizer = CharTokenizer

    def sample(self, prompt, num_samples, sampling_params):
        text = "".join(chr(t) for t in prompt.to_ints())
        self.prompts.append(text)
        if text.endswith("Question:"):
            last_turn = text.split("Passage: ")[-1]
            reply = next((r for entity, r in self.replies.items() if f"mentions {entity}," in last_turn), "")
        else:
            years = re.findall(r"\b1\d{3}\b", text.split("Question:")[0])
            reply = years[-1] if years else "unknown"
        future = Future()
        future.set_result(SimpleNamespace(sequences=[SimpleNamespace(tokens=[ord(c) for c in reply])]))
        return future


# ------------------------------------------------------------------ the prompt


def test_writer_prompt_carries_the_chain_and_an_example_of_the_same_fact(corpus):
    chain = _chain(corpus, "Quayside Brass Band")
    messages = written.writer_messages(chain)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    ask = messages[-1]["content"]
    assert "Passage: Harbour Lights Festival" in ask and "Quayside Brass Band, a Welsh brass band" in ask
    assert "formed in 1962" in ask and "whose answer is 1962" in ask
    assert '"the Welsh brass band mentioned in the Wikipedia passage about Harbour Lights Festival"' in ask
    example = messages[2]["content"]
    assert example.startswith("Question: ") and example.endswith("formed?")  # the same verb, other entities
    assert "Quayside" not in example and "1962" not in example


# ------------------------------------------------------------------ parsing


def test_parse_takes_the_first_question_of_the_first_line(corpus):
    chain = _chain(corpus, "Maria Delacroix-Hunt")
    assert written.parse_question(f" Question: \"{GOOD}\" It is 1931.\nMore text?", chain) == GOOD
    assert written.parse_question(GOOD.lower(), chain) == GOOD[0] + GOOD.lower()[1:]


@pytest.mark.parametrize("reply", [
    "The Welsh sculptor was born in 1931.",  # no question
    "In what year was the Welsh sculptor born?",  # does not name the seed passage
    "Harbour Lights Festival year?",  # too short to be a question
    "",
])
def test_parse_refuses_replies_that_are_not_a_usable_question(corpus, reply):
    assert written.parse_question(reply, _chain(corpus, "Maria Delacroix-Hunt")) is None


def test_asks_the_fact_wants_the_facts_verb_and_kind_of_answer(corpus):
    chain = _chain(corpus, "Maria Delacroix-Hunt")
    assert written.asks_the_fact(written.to_candidate(chain, GOOD, "w"))
    wrong_verb = GOOD.replace("born", "founded")
    assert not written.asks_the_fact(written.to_candidate(chain, wrong_verb, "w"))
    maker = dict(chain, relation="designed_by")
    assert written.asks_the_fact(written.to_candidate(maker, "Who designed the sculpture ... Festival?", "w"))
    assert not written.asks_the_fact(written.to_candidate(maker, "What designed the sculpture ... Festival?", "w"))


# ------------------------------------------------------------------ which chains


def test_fresh_chains_skip_rule_made_ones_and_full_entities(corpus):
    rule_ids = {c.id for p in corpus.passages for c in questions.from_seed(corpus, p, 0)}
    everything = list(written.fresh_chains(corpus, 0, set(), Counter()))
    assert everything and len({c["id"] for c in everything}) == len(everything)
    assert not list(written.fresh_chains(corpus, 0, rule_ids, Counter()))  # this corpus's rules use every chain
    for chain in everything:
        full = Counter({chain["entity"]: verify.MAX_PER_ENTITY})
        assert all(c["entity"] != chain["entity"] for c in written.fresh_chains(corpus, 0, set(), full))
        assert chain["id"] not in rule_ids  # a written question never shares a rule-made id


def test_fresh_chains_offer_every_chain_of_a_seed_passage_one_round_at_a_time(corpus):
    """The festival's passage links three entities with a fact each: all three are offered, not one."""
    chains = list(written.fresh_chains(corpus, 0, set(), Counter()))
    from_festival = [c for c in chains if c["seed"] == "Harbour Lights Festival"]
    assert {c["entity"] for c in from_festival} == {"Maria Delacroix-Hunt", "Quayside Brass Band", "Gwen Arliss"}
    # the first round takes one chain from each seed passage before any seed gives a second
    seeds = [c["passage_ids"][0] for c in chains]
    first_repeat = next(i for i, s in enumerate(seeds) if s in seeds[:i])
    assert len(set(seeds)) == first_repeat
    # a written chain is not offered again
    assert not [c for c in written.fresh_chains(corpus, 0, {c["id"] for c in chains}, Counter())]


# a later chunk of the band's article that opens with its subject again and states another fact
BAND_LATER = ("The Quayside Brass Band toured the coast of Wales for many summers. It was "
              "incorporated in 1977 as a charity.")
# other brass bands incorporated in some year, so that one search on the question does not also find it
BANDS = [(name, f"{name} is a Welsh brass band. It was incorporated in {year}. The Welsh brass band was "
          f"incorporated in {year} as a charity.") for name, year in (("Slate Valley Band", 1981),
                                                                     ("Cwm Silver Band", 1969))]


@pytest.fixture(scope="module")
def later(rows):
    later_rows = [*rows[:4], data.corpus_row("Quayside Brass Band", BAND_LATER), *rows[4:],
                  *(data.corpus_row(t, x) for t, x in BANDS)]
    return Corpus(passages_from_rows(later_rows)), LocalIndex.from_rows(later_rows)


def test_a_fact_from_a_later_passage_of_the_entity_is_a_fresh_promising_chain(later):
    """Every chain the rules make is taken; the band's later passage states a fact its lead does not,
    which gives a chain no rule-made candidate asks about, ending at the passage that states it."""
    corpus, index = later
    rule_ids = {c.id for p in corpus.passages for c in questions.from_seed(corpus, p, 0)}
    lead = corpus.lead("Quayside Brass Band")
    assert lead.facts == {"formed": "1962"}
    chains = list(written.fresh_chains(corpus, 0, rule_ids, Counter(),
                                       keep=lambda c: written.promising(c, corpus, index, set())))
    band = [c for c in chains if c["entity"] == "Quayside Brass Band" and c["seed"] == "Harbour Lights Festival"]
    assert len(band) == 1
    chain = band[0]
    later_id = next(p.id for p in corpus.by_title["Quayside Brass Band"] if p.id != lead.passage_id)
    assert (chain["relation"], chain["value"], chain["passage_ids"][1]) == ("incorporated", "1977", later_id)
    assert written.promising(chain, corpus, index, set())
    assert chain["id"] not in rule_ids
    assert questions.candidate_id("bridge", chain["passage_ids"], "incorporated", "1977") not in rule_ids
    # the repeat cap counts the entity across its passages
    assert not [c for c in written.fresh_chains(corpus, 0, rule_ids, Counter({"Quayside Brass Band": 8}))
                if c["entity"] == "Quayside Brass Band"]
    assert not [c for c in written.fresh_chains(corpus, 0, rule_ids, Counter({("Quayside Brass Band",
                                                                                "incorporated"): 4}))
                if c["entity"] == "Quayside Brass Band"]


def test_fresh_chains_respect_the_caps_across_rounds(later):
    """Two facts of the band through the festival: with one question allowed per entity, one is offered."""
    corpus, _ = later
    both = [c for c in written.fresh_chains(corpus, 0, set(), Counter()) if c["entity"] == "Quayside Brass Band"]
    assert {c["relation"] for c in both} == {"formed", "incorporated"}
    capped = list(written.fresh_chains(corpus, 0, set(), Counter(), max_per_entity=1))
    assert sum(c["entity"] == "Quayside Brass Band" for c in capped) == 1
    removed = Counter()
    list(written.fresh_chains(corpus, 0, set(), Counter(), max_per_entity=1, removed=removed))
    assert removed["repeat_cap"] >= 1


def test_promising_drops_chains_one_passage_or_a_held_out_passage_spoils(rows, corpus, index):
    chain = _chain(corpus, "Maria Delacroix-Hunt")
    assert written.promising(chain, corpus, index, set())
    assert not written.promising(chain, corpus, index, {chain["passage_ids"][1]})
    leaky_rows = [data.corpus_row("Harbour Lights Festival", FESTIVAL + " Its patron was born in 1931."), *rows[1:]]
    leaky = Corpus(passages_from_rows(leaky_rows))
    assert not written.promising(_chain(leaky, "Maria Delacroix-Hunt"), leaky, LocalIndex.from_rows(leaky_rows),
                                 set())


# ------------------------------------------------------------------ a batch end to end


def test_a_batch_keeps_only_questions_that_pass_every_check(corpus, index):
    chains = [_chain(corpus, "Maria Delacroix-Hunt"), _chain(corpus, "Gwen Arliss"),
              _chain(corpus, "Quayside Brass Band")]
    client = _Scripted({
        "Maria Delacroix-Hunt": f"Question: {GOOD}",
        "Gwen Arliss": "In what year was Gwen Arliss, mentioned in the passage about Harbour Lights Festival, born?",
        "Quayside Brass Band": "I cannot write that.",
    })
    records = written.write_batch(chains, corpus, index, set(), verify.TextIndex([]), client, client._Tokenizer(),
                                  "scripted", show_progress=False)
    by_entity = {c["entity"]: r for c, r in zip(chains, records)}
    kept = by_entity["Maria Delacroix-Hunt"]
    assert kept["kept"] and kept["question"] == GOOD and all(kept["checks"].values())
    assert kept["verdict"]["with_all"] and not kept["verdict"]["with_first"]
    assert kept["candidate"]["writer"] == "scripted" and kept["candidate"]["chain"][-1] == "Maria Delacroix-Hunt"
    named = by_entity["Gwen Arliss"]
    assert named["checks"]["names_hidden"] is False and not named["kept"] and named["verdict"] is None
    refused = by_entity["Quayside Brass Band"]
    assert refused["question"] is None and not refused["kept"]
    # writer prompts for three chains, solver prompts (all passages, first only) for the one that passed the rules
    assert sum(p.endswith("Question:") for p in client.prompts) == 3
    assert sum(p.endswith("Answer:") for p in client.prompts) == 2


def test_set_up_merges_written_questions_after_the_rule_made_ones(tmp_path, corpus, index):
    out = tmp_path / "data"
    out.mkdir()
    for split in ("validation", "test"):
        (out / f"{split}.jsonl").write_text(json.dumps({"id": "v", "question": "who wrote the iliad",
                                                        "golden_answers": ["Homer"], "metadata": {}}) + "\n")
    # worded unlike any rule template, so the repeated-text check does not merge it with one
    reworded = GOOD.replace("In what year", "Which year")
    candidate = written.to_candidate(_chain(corpus, "Maria Delacroix-Hunt"), reworded, "scripted")
    written_path = tmp_path / "written.jsonl"
    written_path.write_text(json.dumps(candidate) + "\n")
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text(json.dumps({"id": candidate["id"], "with_all": True, "with_first": False, "pass": True,
                                    "model": "scripted"}) + "\n")
    report = build.prepare_synthetic(out_dir=out, corpus=corpus, index=index, show_progress=False,
                                     verdicts_path=verdicts, written_path=written_path)
    rows = data.load_rows("synthetic", data_dir=out)
    mine = [r for r in rows if r["id"] == candidate["id"]]
    assert report["written_candidates"] == 1
    assert report["written_kept"] == len(mine) == 1
    assert mine[0]["metadata"]["writer"] == "scripted" and mine[0]["metadata"]["solver_checked"]
    assert mine[0]["metadata"]["gold_passage_ids"] == candidate["passage_ids"]
    failing = tmp_path / "failing.jsonl"
    failing.write_text(json.dumps({"id": candidate["id"], "with_all": True, "with_first": True, "pass": False,
                                   "model": "scripted"}) + "\n")
    report = build.prepare_synthetic(out_dir=out, corpus=corpus, index=index, show_progress=False,
                                     verdicts_path=failing, written_path=written_path, force=True)
    assert report["written_kept"] == 0


def test_the_writer_keeps_its_verdicts_where_it_is_told(tmp_path, monkeypatch):
    """`write --verdicts PATH` adds the new verdicts to PATH (a copy of the committed ones) and leaves
    the committed file alone: on a rented GPU the repository is replaced by every call."""
    import helpers.engine
    from helpers.multihop import __main__ as cli

    committed = build.VERDICTS_FILE.read_text()
    chain = {"id": "mh-test-chain"}
    verdict = {"id": "mh-test-chain", "with_all": True, "with_first": False, "pass": True}
    record = {"id": "mh-test-chain", "reply": "q", "question": "q", "checks": {}, "verdict": verdict, "kept": True,
              "candidate": {"id": "mh-test-chain", "question": "q"}}
    monkeypatch.setattr(written, "fresh_chains", lambda *a, **k: iter([chain]))
    monkeypatch.setattr(written, "write_batch", lambda chunk, *a, **k: [record])
    client = SimpleNamespace(get_tokenizer=lambda: None)
    monkeypatch.setattr(helpers.engine, "connect", lambda backend: SimpleNamespace(
        create_sampling_client=lambda base_model: client))
    out = tmp_path / "verdicts.jsonl"
    assert cli.main(["write", "--verdicts", str(out), "--progress", str(tmp_path / "progress.jsonl"),
                     "--out", str(tmp_path / "written.jsonl")]) == 0
    kept = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert kept["mh-test-chain"]["pass"] is True and kept["mh-test-chain"]["model"] == "qwen2.5-0.5b"
    assert len(kept) == len(build.load_verdicts()) + 1  # the committed verdicts, and the new one
    assert build.VERDICTS_FILE.read_text() == committed
