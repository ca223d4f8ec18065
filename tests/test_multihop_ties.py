"""The second set of rules: facts that tie an entity to another name, their questions, and how they
join the synthetic split without moving a question the first set made."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from helpers.multihop import __main__ as cli
from helpers.multihop import build, questions
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.multihop.facts import read_lead

from fixtures.multihop_corpus import (BAND, FESTIVAL, POET, SCULPTOR, held_out_data_dir, with_distractors,
                                     without_later_passes)

REGATTA = ("The Ferrow Regatta is an annual boat race that finishes in Calderbridge. The Tinmoor Players play at "
           "its prize-giving, where Dorrie Vane once appeared.")
CITY = "Calderbridge is the capital and largest city of Westmere. It lies on the river Ferrow."
CHARACTER = "Dorrie Vane is a fictional character, played by Ada Quill, in the radio serial Harbour Days."
PLAYERS = "The Tinmoor Players are a Welsh folk band from Aberfenn. They formed at a harvest fair."


def _rows() -> list[dict]:
    return with_distractors([("Ferrow Regatta", REGATTA), ("Calderbridge", CITY), ("Dorrie Vane", CHARACTER),
                             ("Tinmoor Players", PLAYERS), ("Harbour Lights Festival", FESTIVAL),
                             ("Maria Delacroix-Hunt", SCULPTOR), ("Quayside Brass Band", BAND), ("Gwen Arliss", POET)])


@pytest.fixture(scope="module")
def corpus():
    return Corpus(passages_from_rows(_rows()))


# ------------------------------------------------------------------ reading the ties


@pytest.mark.parametrize("title, text, ties", [
    ("Riga", "Riga is the capital and largest city of Latvia. It has 637,971 inhabitants.", {"part_of": "Latvia"}),
    ("Ohio", "Ohio is a Midwestern state in the Great Lakes region of the United States. It is the 34th largest "
             "by area. The state's capital and largest city is Columbus.", {"capital": "Columbus"}),
    ("Douglas County, Nevada", "Douglas County is a county in the northwestern part of the U.S. state of Nevada. "
                               "As of the 2010 census, the population was 46,997. Its county seat is Minden.",
     {"county_seat": "Minden"}),
    ("The Click Five", "The Click Five was an American rock band from Boston, Massachusetts. They played locally.",
     {"home": "Boston, Massachusetts"}),
    ("The Pelican Brief (film)", "The Pelican Brief is a 1993 American legal political thriller based on the novel "
                                 "of the same name by John Grisham. Directed by Alan J. Pakula, the film stars "
                                 "Julia Roberts.", {"based_on": "John Grisham", "directed_by": "Alan J. Pakula"}),
    ("John Landis", "John David Landis (born August 3, 1950) is an American film director. Landis was born in "
                    "Chicago, Illinois, and raised in Los Angeles.", {"born_in": "Chicago, Illinois"}),
    ("Leonid Brezhnev", "Leonid Ilyich Brezhnev (; ; , 19 December 1906 – 10 November 1982) was a Soviet "
                        "politician, who led the Soviet Union.", {"born": "1906", "died": "1982"}),
])
def test_the_second_rules_read_a_tie_stated_once(title, text, ties):
    lead = read_lead("p", title, text)
    assert lead.ties == ties
    assert not set(lead.ties) & set(lead.facts)  # a relation the first set reads is never read again


@pytest.mark.parametrize("title, text", [
    ("Pieter Bruegel the Elder", "Pieter Bruegel the Elder was the most significant artist of Dutch and Flemish "
                                 "Renaissance painting."),  # "of Dutch": an adjective, not a name
    ("Yukon", "Yukon is the smallest and westernmost territory of Canada's three territories."),  # a possessive
    ("Prince Albert", "Prince Albert was the husband of Queen Victoria."),  # a person is no "what"
    ("Christmas", "Christmas is an annual festival commemorating the birth of Jesus Christ."),  # a cut clause
    ("United States Congress", "The United States Congress is the bicameral legislature of the Federal government "
                               "of the United States."),  # "Federal" is no name here
    ("Bad News (band)", "Bad News is a fictional band, played by Ade Edmondson in a sketch."),  # no character
    ("Tron", "Tron is a 1982 American science fiction film, based on a story by Lisberger and Bonnie MacBird."),
])
def test_the_second_rules_leave_what_is_no_single_name(title, text):
    assert read_lead("p", title, text).ties == {}


def test_a_tie_stated_twice_differently_is_no_tie():
    lead = read_lead("p", "Vale Town", "Vale Town is a town. Its county seat is Amberley. Its county seat is Brill.")
    assert "county_seat" not in lead.ties


# ------------------------------------------------------------------ questions about ties


def test_ties_make_bridge_questions_through_the_chain(corpus):
    seed = corpus.by_title["Ferrow Regatta"][0]
    made = {c.relation: c for c in questions.ties_from_seed(corpus, seed, 0)}
    assert set(made) == {"part_of", "played_by", "home"}
    part_of = made["part_of"]
    assert part_of.answers == ["Westmere"] and part_of.chain == ["Ferrow Regatta", "Calderbridge"]
    assert "capital and largest city" in part_of.question and "Calderbridge" not in part_of.question
    assert made["played_by"].answers == ["Ada Quill"] and made["home"].answers == ["Aberfenn"]
    assert all(c.kind == "bridge" and c.question.endswith("?") for c in made.values())


def test_ties_do_not_change_the_first_sets_questions(corpus):
    """The first set's generation reads no tie: clearing every lead's ties gives the same questions."""
    first = [c.to_dict() for p in corpus.passages for c in questions.from_seed(corpus, p, 0)]
    assert first  # the fixture's festival makes first-set questions
    cleared = Corpus(corpus.passages)
    cleared.leads = {t: dataclasses.replace(lead, ties={}) for t, lead in corpus.leads.items()}
    assert [c.to_dict() for p in cleared.passages for c in questions.from_seed(cleared, p, 0)] == first
    assert not [c for p in cleared.passages for c in questions.ties_from_seed(cleared, p, 0)]


# ------------------------------------------------------------------ the split


def test_ties_join_the_split_after_the_first_set_and_the_written(tmp_path, corpus, monkeypatch):
    without_later_passes(build, monkeypatch, "ties")
    out = held_out_data_dir(tmp_path)
    first = build.generate_candidates(corpus, tmp_path / "first.jsonl", show_progress=False)
    written = dict(first[0], id="mh-written", writer="qwen2.5-0.5b")
    (tmp_path / "written.jsonl").write_text(json.dumps(written) + "\n")
    candidates = build.all_candidates(corpus, out, written_path=tmp_path / "written.jsonl", show_progress=False)
    marks = [("ties" if c.get("ties") else "written" if c.get("writer") else "first") for c in candidates]
    assert marks == sorted(marks, key=["first", "written", "ties"].index) and "ties" in marks
    assert len({c["id"] for c in candidates}) == len(candidates)
    nothing_found = SimpleNamespace(search=lambda question, k: [])  # this test is about order, not BM25
    report = build.prepare_synthetic(out_dir=out, corpus=corpus, index=nothing_found,
                                     show_progress=False, verdicts_path=tmp_path / "none.jsonl",
                                     written_path=tmp_path / "written.jsonl")
    rows = [json.loads(line) for line in (out / "synthetic.jsonl").read_text().splitlines()]
    tied = [r for r in rows if r["metadata"].get("ties")]
    assert tied and report["ties_kept"] == len(tied) and report["ties_candidates"] >= len(tied)


def test_a_changed_rule_regenerates_the_candidates_and_the_split(tmp_path, corpus, monkeypatch):
    path = tmp_path / "ties.jsonl"
    build.generate_candidates(corpus, path, show_progress=False, make=questions.ties_from_seed)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["rules"] == "ties_from_seed" and header["code"] == build.rules_digest()
    before = build._fingerprint(1, tmp_path / "v", tmp_path / "w")
    monkeypatch.setattr(build, "rules_digest", lambda: "changed")
    build.generate_candidates(corpus, path, show_progress=False, make=questions.ties_from_seed)
    assert json.loads(path.read_text().splitlines()[0])["code"] == "changed"
    assert build._fingerprint(1, tmp_path / "v", tmp_path / "w") != before


# ------------------------------------------------------------------ judging the new questions


def _fake_solvers(monkeypatch, judged: list[str]):
    import helpers.engine
    import helpers.multihop.solvers as solvers

    client = SimpleNamespace(get_tokenizer=lambda: None)
    monkeypatch.setattr(helpers.engine, "connect",
                        lambda backend: SimpleNamespace(create_sampling_client=lambda base_model: client))

    def verdicts(candidates, passages_of, sampling_client, tokenizer, show_progress=True):
        judged.extend(c["id"] for c in candidates)
        return [{"id": c["id"], "question": c["question"], "with_all": True, "with_first": c["id"] == "b",
                 "pass": c["id"] != "b", "reply_all": "x", "reply_first": "y"} for c in candidates]

    monkeypatch.setattr(solvers, "verdicts", verdicts)


def test_solve_merges_each_batch_into_the_recorded_verdicts(tmp_path, monkeypatch, corpus):
    judged: list[str] = []
    _fake_solvers(monkeypatch, judged)
    todo = [{"id": i, "question": f"q {i}?", "passage_ids": []} for i in ("a", "b", "c")]
    monkeypatch.setattr(cli, "to_judge", lambda out, verdicts_path, again=False: (todo, corpus))
    path = tmp_path / "verdicts.jsonl"
    path.write_text(json.dumps({"id": "old", "with_all": True, "with_first": False, "pass": True, "model": "m"}) + "\n")
    assert cli.solve("smollm2-135m", None, path, 0, batch=2) == 0
    recorded = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    assert set(recorded) == {"old", "a", "b", "c"} and judged == ["a", "b", "c"]
    assert recorded["b"]["pass"] is False and recorded["a"]["model"] == "smollm2-135m"
    assert "reply_all" not in recorded["a"]  # the file keeps the verdict, not the replies


def test_solve_stops_between_batches_after_until(tmp_path, monkeypatch, corpus):
    judged: list[str] = []
    _fake_solvers(monkeypatch, judged)
    todo = [{"id": "a", "question": "q?", "passage_ids": []}]
    monkeypatch.setattr(cli, "to_judge", lambda out, verdicts_path, again=False: (todo, corpus))
    monkeypatch.setattr(cli, "_deadline", lambda until: cli.datetime(2000, 1, 1, tzinfo=cli.timezone.utc))
    assert cli.solve("smollm2-135m", None, tmp_path / "v.jsonl", 0, until="00:00") == 0
    assert judged == [] and not (tmp_path / "v.jsonl").exists()


def test_to_judge_puts_the_questions_the_split_would_keep_first_and_skips_judged_ones(tmp_path, monkeypatch, corpus):
    import helpers.search.local as local

    ok = {"answer_in_last_not_first": True, "names_hidden": True, "needs_second_search": True,
          "held_out_passages": True, "held_out_text": True, "solvers": True, "repeats": True}
    rows = [({"id": "capped"}, dict(ok, repeats=False)), ({"id": "kept"}, ok),
            ({"id": "judged"}, ok), ({"id": "leaks"}, dict(ok, answer_in_last_not_first=False))]
    monkeypatch.setattr(build, "load_corpus", lambda: corpus)
    monkeypatch.setattr(build, "all_candidates", lambda corpus, out: [c for c, _ in rows])
    monkeypatch.setattr(build, "held_out", lambda out: (set(), []))
    monkeypatch.setattr(local.LocalIndex, "load", staticmethod(lambda path: None))
    seen = {}

    def check_all(candidates, corpus, index, held_ids, held_questions, verdicts, judged_only=True):
        seen["verdicts"] = set(verdicts)
        seen["judged_only"] = judged_only  # what to judge: a question that would pass once judged counts as kept
        return [r for _, r in rows]

    monkeypatch.setattr(build, "check_all", check_all)
    path = tmp_path / "verdicts.jsonl"
    path.write_text(json.dumps({"id": "judged", "pass": True}) + "\n")
    todo, _ = cli.to_judge(tmp_path, path)
    assert [c["id"] for c in todo] == ["kept", "capped"]
    assert seen["verdicts"] == {"judged"}  # the cap counts what the recorded verdicts keep
    assert seen["judged_only"] is False
    again, _ = cli.to_judge(tmp_path, path, again=True)
    assert [c["id"] for c in again] == ["kept", "judged", "capped"]
