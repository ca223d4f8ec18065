"""Multi-hop synthetic questions: facts, chains, each verification check, the split, resume, the mix."""

from __future__ import annotations

import json

import pytest

from helpers import data
from helpers.multihop import build, mix, questions, solvers, verify
from helpers.multihop.chains import Corpus, Passage, linkable, passages_from_rows
from helpers.multihop.facts import read_lead
from helpers.search.local import LocalIndex

from fixtures.char_tokenizer import CharTokenizer
from fixtures.multihop_corpus import BAND, FESTIVAL, POET, with_distractors

SCULPTOR = ("Maria Delacroix-Hunt (born 1931) is a Welsh sculptor. Her best-known work is Tide Stone Circle, "
            "on the cliffs above the town.")
SCULPTURE = "Tide Stone Circle is a granite sculpture designed by Owen Pryce. It stands near the old quarry."


def _rows() -> list[dict]:
    return with_distractors([("Harbour Lights Festival", FESTIVAL), ("Maria Delacroix-Hunt", SCULPTOR),
                             ("Tide Stone Circle", SCULPTURE), ("Quayside Brass Band", BAND), ("Gwen Arliss", POET)])


@pytest.fixture(scope="module")
def rows():
    return _rows()


@pytest.fixture(scope="module")
def corpus(rows):
    return Corpus(passages_from_rows(rows))


@pytest.fixture(scope="module")
def index(rows):
    return LocalIndex.from_rows(rows)


def _passage(corpus: Corpus, title: str) -> Passage:
    return corpus.by_title[title][0]


def _candidates(corpus: Corpus, seed: int = 0) -> list[dict]:
    return [c.to_dict() for p in corpus.passages for c in questions.from_seed(corpus, p, seed)]


# ------------------------------------------------------------------ facts


def test_lead_gives_description_and_year_facts():
    lead = read_lead("p1", "Alfred Jodl", "Alfred Josef Ferdinand Jodl ( ; 10 May 1890 – 16 October 1946) "
                     "was a German general and war criminal during World War II.")
    assert lead.description == "German general"
    assert lead.facts == {"born": "1890", "died": "1946"}


def test_a_relation_stated_twice_differently_is_no_fact():
    lead = read_lead("p", "Old Mill", "The Old Mill is a watermill built in 1820. It was built in 1840 again.")
    once = read_lead("p", "Old Mill", "The Old Mill is a watermill built in 1820.")
    assert once.facts.get("built") == "1820"
    assert "built" not in lead.facts


def test_a_works_year_leaves_its_description_and_becomes_its_release():
    lead = read_lead("p", "Seven (1995 film)", "Seven is a 1995 American crime thriller film directed by David Fincher.")
    assert lead.description == "American crime thriller film"
    assert lead.facts["released"] == "1995"
    assert lead.facts["directed_by"] == "David Fincher"


def test_lifespan_without_its_dash_still_gives_the_birth_year():
    lead = read_lead("p", "Tony Curtis", "Tony Curtis (born Bernard Schwartz; June 3, 1925September 29, 2010) "
                     "was an American film actor.")
    assert lead.facts["born"] == "1925"


def test_the_span_of_a_war_is_no_birth_and_death():
    war = read_lead("p", "Russian Civil War", "The Russian Civil War (1917–1922) was a multi-party war in the "
                    "former Russian Empire.")
    assert war.description == "multi-party war"
    assert "born" not in war.facts and "died" not in war.facts


def test_a_mid_article_chunk_is_not_a_lead():
    assert read_lead("p", "Skylab", "Later plans to reuse it were stymied by delays in development.") is None


# ------------------------------------------------------------------ chains


def test_title_match_links_named_entities_in_text_order(corpus):
    mentions = [m.title for m in corpus.mentions(_passage(corpus, "Harbour Lights Festival"))]
    assert mentions == ["Maria Delacroix-Hunt", "Gwen Arliss", "Quayside Brass Band"]


def test_a_one_word_name_with_punctuation_is_a_common_word_too():
    small = Corpus(passages_from_rows([
        data.corpus_row("Mother!", "Mother! is an American psychological horror film directed by Darren Aronofsky."),
        data.corpus_row("A letter", "She wrote to her Mother on Sunday. Her mother replied, her mother was glad, "
                                    "and a mother of three came."),
    ]))
    assert small.mentions(small.by_title["A letter"][0]) == []


def test_entities_that_share_a_name_are_not_distinct():
    from helpers.multihop.facts import distinct

    assert not distinct("Break Up (1998 film)", "Break-Up") and not distinct("Cambridge", "Cambridge University")
    assert distinct("Ann Vale", "Annapolis")


def test_common_words_and_one_word_disambiguated_titles_do_not_link():
    assert linkable("Cambridge") and linkable("Saving Face (2004 film)")
    assert not linkable("September (2007 film)") and not linkable("upholstery") and not linkable("1994")
    small = Corpus(passages_from_rows([
        data.corpus_row("Kiss (band)", "Kiss is an American rock band formed in 1973."),
        data.corpus_row("Cambridge", "Cambridge is a university city in England."),
        data.corpus_row("A day", "They said goodbye with a Kiss near Cambridge. Cambridge was far."),
    ]))
    assert [m.title for m in small.mentions(small.by_title["A day"][0])] == ["Cambridge"]


def test_chains_hold_bridges_three_hops_and_comparisons_in_chain_order(corpus):
    found = _candidates(corpus)
    ids = {p.title: p.id for p in corpus.passages}
    two = [c for c in found if c["kind"] == "bridge" and c["chain"] == ["Harbour Lights Festival", "Maria Delacroix-Hunt"]]
    assert two and two[0]["answers"] == ["1931"]
    assert two[0]["passage_ids"] == [ids["Harbour Lights Festival"], ids["Maria Delacroix-Hunt"]]
    three = [c for c in found if c["chain"] == ["Harbour Lights Festival", "Maria Delacroix-Hunt", "Tide Stone Circle"]]
    assert three and three[0]["answers"] == ["Owen Pryce"] and len(three[0]["passage_ids"]) == 3
    compared = [c for c in found if c["kind"] == "comparison"]
    assert compared and compared[0]["answers"] == ["Maria Delacroix-Hunt"]  # born 1931, before 1945
    for candidate in found:
        assert len(set(candidate["chain"])) == len(candidate["chain"])
        assert "Delacroix" not in candidate["question"] or candidate["chain"][0] == "Maria Delacroix-Hunt"


def test_a_description_shared_by_two_links_names_neither(corpus):
    twins = Corpus(passages_from_rows([
        data.corpus_row("Ann Vale", "Ann Vale (born 1950) is a Welsh poet."),
        data.corpus_row("Bea Moss", "Bea Moss (born 1960) is a Welsh poet."),
        data.corpus_row("Poetry Night", "Poetry Night featured Ann Vale and Bea Moss."),
    ]))
    assert questions.unique_descriptions(twins, twins.by_title["Poetry Night"][0]) == {}


def test_generation_is_a_pure_function_of_the_seed(corpus):
    assert _candidates(corpus, 0) == _candidates(corpus, 0)
    ids = [c["id"] for c in _candidates(corpus, 0)]
    assert len(ids) == len(set(ids))  # one id per chain and fact


# ------------------------------------------------------------------ checks (each can fail)


def _bridge(corpus: Corpus) -> dict:
    return next(c for c in _candidates(corpus) if c["kind"] == "bridge" and c["chain"][-1] == "Maria Delacroix-Hunt")


def _texts(corpus: Corpus, candidate: dict) -> list[str]:
    return [corpus.by_id[i].title + "\n" + corpus.by_id[i].text for i in candidate["passage_ids"]]


def test_answer_must_be_in_the_last_passage_and_not_the_first(corpus):
    candidate = _bridge(corpus)
    assert verify.answer_in_last_not_first(candidate, _texts(corpus, candidate))
    leaked = [_texts(corpus, candidate)[0] + " It began in 1931.", _texts(corpus, candidate)[1]]
    assert not verify.answer_in_last_not_first(candidate, leaked)
    assert not verify.answer_in_last_not_first(dict(candidate, answers=["1999"]), _texts(corpus, candidate))


def test_comparison_fails_when_the_seed_passage_states_a_hidden_year(corpus):
    candidate = next(c for c in _candidates(corpus) if c["kind"] == "comparison")
    texts = _texts(corpus, candidate)
    assert verify.answer_in_last_not_first(candidate, texts)
    assert not verify.answer_in_last_not_first(candidate, [texts[0] + " Arliss was born in 1945."] + texts[1:])
    assert not verify.answer_in_last_not_first(dict(candidate, years=["1931", "1931"]), texts)


def test_question_must_name_neither_the_answer_nor_a_hidden_entity(corpus):
    candidate = _bridge(corpus)
    assert verify.names_hidden(candidate)
    assert not verify.names_hidden(dict(candidate, question="When was Maria Delacroix-Hunt born?"))
    assert not verify.names_hidden(dict(candidate, question=candidate["question"] + " (not 1931)"))


def test_one_search_that_returns_every_chain_passage_fails(corpus, index):
    candidate = _bridge(corpus)
    assert verify.needs_second_search(dict(candidate, question="the Harbour Lights Festival in Porthmadoc"), index)
    both = "Harbour Lights Festival Porthmadoc patron Maria Delacroix-Hunt sculptor born Tide Stone Circle"
    assert not verify.needs_second_search(dict(candidate, question=both), index)


def test_held_out_passages_and_texts_fail(corpus):
    candidate = _bridge(corpus)
    assert verify.held_out_passages(candidate, {"w-other"})
    assert not verify.held_out_passages(candidate, {candidate["passage_ids"][1]})
    held = verify.TextIndex(["who wrote the iliad", candidate["question"].replace("In what year", "What year")])
    assert not verify.held_out_text(candidate, held)
    assert verify.held_out_text(candidate, verify.TextIndex(["who wrote the iliad"]))


def test_solver_verdicts_remove_and_unknowns_pass(corpus):
    candidate = _bridge(corpus)
    assert verify.solvers(candidate, {})
    assert not verify.solvers(candidate, {candidate["id"]: {"pass": False}})
    assert verify.solvers(candidate, {candidate["id"]: {"pass": True}})


def test_repeats_cap_one_entity_and_drop_repeated_text():
    made = [{"chain": ["A", "B"], "relation": "born", "question": f"q{i}"} for i in range(5)]
    assert verify.apply_repeats(made, max_per_entity=10, max_per_fact=3) == [True] * 3 + [False] * 2
    twice = [{"chain": ["A", "B"], "relation": "born", "question": "Same?"},
             {"chain": ["C", "D"], "relation": "born", "question": "same"}]
    assert verify.apply_repeats(twice) == [True, False]


# ------------------------------------------------------------------ solvers


def test_solver_answer_matching():
    assert solvers.is_right(" 1931.", ["1931"]) and solvers.is_right("Owen Pryce", ["Owen Pryce"])
    assert not solvers.is_right("1932", ["1931"]) and not solvers.is_right("", ["1931"])
    assert not solvers.is_right(" ".join(["1931"] * 20), ["1931"])  # a long ramble is no answer


class _ReadsPassages:
    """A sampling double: answers with the last four-digit year of the prompt's passages."""

    _Tokenizer = CharTokenizer

    def sample(self, prompt, num_samples, sampling_params):
        import re
        from concurrent.futures import Future
        from types import SimpleNamespace

        text = "".join(chr(t) for t in prompt.to_ints()).split("Question:")[0]
        years = re.findall(r"\b1\d{3}\b", text)
        future = Future()
        reply = years[-1] if years else "unknown"
        future.set_result(SimpleNamespace(sequences=[SimpleNamespace(tokens=[ord(c) for c in reply])]))
        return future


def test_verdicts_pass_when_only_the_full_chain_answers(corpus):
    candidate = _bridge(corpus)
    client = _ReadsPassages()

    def passages_of(c):
        return [(corpus.by_id[i].title, corpus.by_id[i].text) for i in c["passage_ids"]]

    verdict, = solvers.verdicts([candidate], passages_of, client, client._Tokenizer(), show_progress=False)
    assert verdict["with_all"] and not verdict["with_first"] and verdict["pass"]
    leaky = dict(candidate, passage_ids=candidate["passage_ids"][::-1])  # the answer is in the first passage
    verdict, = solvers.verdicts([leaky], passages_of, client, client._Tokenizer(), show_progress=False)
    assert verdict["with_first"] and not verdict["pass"]


# ------------------------------------------------------------------ the split, determinism, resume


def _data_dir(tmp_path, corpus):
    out = tmp_path / "data"
    out.mkdir()
    held = {"id": "v1", "question": "who wrote the iliad", "golden_answers": ["Homer"],
            "metadata": {"gold_passage_ids": [_passage(corpus, "Quayside Brass Band").id]}}
    for split in ("validation", "test"):
        (out / f"{split}.jsonl").write_text(json.dumps(held) + "\n")
    return out


def test_split_rows_are_in_the_course_format(tmp_path, corpus, index):
    out = _data_dir(tmp_path, corpus)
    report = build.prepare_synthetic(out_dir=out, corpus=corpus, index=index, show_progress=False,
                                     verdicts_path=tmp_path / "none.jsonl")
    examples = data.load_examples("synthetic", data_dir=out)
    rows = data.load_rows("synthetic", data_dir=out)
    assert report["kept"] == len(rows) == len(examples) > 0
    band = _passage(corpus, "Quayside Brass Band").id
    for row, example in zip(rows, examples):
        assert example.data_source == "synthetic" and example.answers == row["answers"]
        meta = row["metadata"]
        assert meta["kind"] in questions.KINDS and meta["hops"] == len(meta["gold_passage_ids"]) >= 2
        assert [corpus.by_id[i].title for i in meta["gold_passage_ids"]] == meta["chain"]
        assert band not in meta["gold_passage_ids"]  # a held-out gold passage
        assert meta["solver_checked"] is False
    assert report["checks"]["held_out_passages"]["failed"] > 0
    assert set(report["checks"]) == set(verify.CHECKS)


def test_verdicts_file_is_applied(tmp_path, corpus, index):
    out = _data_dir(tmp_path, corpus)
    first = build.prepare_synthetic(out_dir=out, corpus=corpus, index=index, show_progress=False,
                                    verdicts_path=tmp_path / "none.jsonl")
    dropped = data.load_rows("synthetic", data_dir=out)[0]
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text(json.dumps({"id": dropped["id"], "pass": False}) + "\n")
    second = build.prepare_synthetic(out_dir=out, corpus=corpus, index=index, show_progress=False,
                                     verdicts_path=verdicts)
    assert second["kept"] == first["kept"] - 1 and second["checks"]["solvers"]["removed"] == 1
    assert dropped["id"] not in {r["id"] for r in data.load_rows("synthetic", data_dir=out)}


def test_split_is_deterministic_and_rebuilt_identically(tmp_path, corpus, index):
    out = _data_dir(tmp_path, corpus)
    kwargs = dict(out_dir=out, corpus=corpus, index=index, show_progress=False, verdicts_path=tmp_path / "v.jsonl")
    build.prepare_synthetic(**kwargs)
    before = (out / "synthetic.jsonl").read_text()
    build.prepare_synthetic(force=True, **kwargs)
    assert (out / "synthetic.jsonl").read_text() == before
    (out / build.CANDIDATES_FILE).unlink()
    build.prepare_synthetic(force=True, **kwargs)
    assert (out / "synthetic.jsonl").read_text() == before


def test_interrupted_generation_resumes_to_the_same_candidates(tmp_path, corpus):
    path = tmp_path / "candidates.jsonl"
    whole = build.generate_candidates(corpus, tmp_path / "whole.jsonl", seed=5, shard_size=4, show_progress=False)
    with pytest.raises(build.Interrupted):
        build.generate_candidates(corpus, path, seed=5, shard_size=4, show_progress=False, stop_after=2)
    assert len(path.read_text().splitlines()) == 3  # header + 2 shards
    with path.open("a") as handle:
        handle.write('{"shard": 2, "candidates": [{"torn')  # a write cut short
    assert build.generate_candidates(corpus, path, seed=5, shard_size=4, show_progress=False) == whole
    other = build.generate_candidates(corpus, path, seed=6, shard_size=4, show_progress=False)
    assert json.loads(path.read_text().splitlines()[0])["seed"] == 6 and isinstance(other, list)


def test_unknown_split_names_and_missing_split_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="split must be one of"):
        data.load_examples("synthetc", data_dir=tmp_path)
    with pytest.raises(data.DataNotPrepared, match="make setup"):
        data.load_rows("synthetic", data_dir=tmp_path)


# ------------------------------------------------------------------ the mix


def test_synthetic_share_of_each_batch():
    assert mix.synthetic_count(10, 0.0) == 0 and mix.synthetic_count(10, 0.3) == 3
    assert mix.synthetic_count(4, 0.05) == 1 and mix.synthetic_count(4, 1.0) == 4
    with pytest.raises(ValueError, match="within"):
        mix.synthetic_count(4, 1.5)
    train, synthetic = [f"t{i}" for i in range(20)], [f"s{i}" for i in range(7)]
    batch = mix.batch_with_share(train, synthetic, step=3, size=10, seed=1, share=0.3)
    assert len(batch) == 10 and sum(x.startswith("s") for x in batch) == 3


def test_mixed_batches_replay_on_resume_and_cover_each_pool():
    train, synthetic = [f"t{i}" for i in range(20)], [f"s{i}" for i in range(6)]
    steps = [mix.batch_with_share(train, synthetic, step, 8, seed=2, share=0.25) for step in range(3)]
    assert steps == [mix.batch_with_share(train, synthetic, step, 8, seed=2, share=0.25) for step in range(3)]
    assert sorted(x for batch in steps for x in batch if x.startswith("s")) == sorted(synthetic)
    assert mix.batch_with_share(train, synthetic, 0, 8, seed=3, share=0.25) != steps[0]
    custom = mix.batch_with_share(train, synthetic, 0, 8, seed=2, share=0.25, order=lambda e, s, n, sd: e[:n])
    assert custom[:6] == train[:6]
