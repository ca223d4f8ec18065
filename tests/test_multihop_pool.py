"""The writer's pool of fresh chains reaches a third passage: A mentions B, B's opening passage
mentions C, and a fact of C is the answer. The wording-free checks hold it to the same rules as a
2-hop chain: the answer only in C's passage, no held-out passage, and a second search needed."""

from __future__ import annotations

from collections import Counter

import pytest

from helpers.multihop import verify, written
from helpers.multihop.chains import Corpus, passages_from_rows
from helpers.search.local import LocalIndex

from fixtures.multihop_corpus import BAND, with_distractors

FESTIVAL = "The Harbour Lights Festival is an annual arts festival. Its founding patron was Maria Delacroix-Hunt."
SCULPTOR = ("Maria Delacroix-Hunt (born 1931) is a Welsh sculptor. As a girl she played the cornet in the "
            "Quayside Brass Band. " + " ".join(["Her studio looks over the quarry and the chapel."] * 6))
# other Welsh sculptors and bands, so that one search on the plain question does not find the whole chain
OTHERS = ([(n, f"{n} (born {y}) is a Welsh sculptor, a Welsh sculptor born in {y}.")
           for n, y in (("Eira Rhys", 1950), ("Owain Pugh", 1948), ("Siân Morgan", 1960))]
          + [(n, f"The {n} is a Welsh brass band formed in {y}, a Welsh brass band.")
             for n, y in (("Llan Silver Band", 1901), ("Bryn Colliery Band", 1922), ("Tywyn Town Band", 1930))])
CHAIN = ["Harbour Lights Festival", "Maria Delacroix-Hunt", "Quayside Brass Band"]


def _setup(festival: str = FESTIVAL):
    rows = with_distractors([("Harbour Lights Festival", festival), ("Maria Delacroix-Hunt", SCULPTOR),
                             ("Quayside Brass Band", BAND), *OTHERS])
    return Corpus(passages_from_rows(rows)), LocalIndex.from_rows(rows)


def _three_hop(corpus: Corpus) -> dict:
    return next(c for c in written.fresh_chains(corpus, 0, set(), Counter()) if c["chain"] == CHAIN)


@pytest.fixture(scope="module")
def setup():
    return _setup()


def test_pool_offers_a_three_hop_chain_through_bs_passage(setup):
    corpus, index = setup
    chain = _three_hop(corpus)
    ids = [corpus.by_title[t][0].id for t in CHAIN]
    assert chain["passage_ids"] == ids and chain["descriptions"] == ["Welsh sculptor", "Welsh brass band"]
    assert (chain["entity"], chain["relation"], chain["answers"]) == ("Quayside Brass Band", "formed", ["1962"])
    assert written.promising_failure(chain, corpus, index, set()) is None
    # the 2-hop chain to B stays in the pool beside it
    assert any(c["chain"] == CHAIN[:2] for c in written.fresh_chains(corpus, 0, set(), Counter()))


def test_three_hop_chain_is_checked_and_named_as_three_hops(setup):
    corpus, index = setup
    chain = _three_hop(corpus)
    plain = ("In what year was the Welsh brass band mentioned in the passage about the Welsh sculptor "
             "mentioned in the Wikipedia passage about Harbour Lights Festival formed?")
    candidate = written.to_candidate(chain, plain, "w")
    assert candidate["chain"] == CHAIN and len(candidate["passage_ids"]) == 3
    assert verify.names_hidden(candidate) and written.asks_the_fact(candidate)
    # naming the middle entity gives it away: the same check as for a rule-made 3-hop question
    assert not verify.names_hidden(dict(candidate, question=plain.replace("the Welsh sculptor", "Maria Delacroix-Hunt")))
    ask, example = written.writer_messages(chain)[-1]["content"], written.writer_messages(chain)[2]["content"]
    assert "The passage about Maria Delacroix-Hunt mentions Quayside Brass Band, a Welsh brass band." in ask
    assert "never write the name Maria Delacroix-Hunt or Quayside Brass Band" in ask
    assert example.count("mentioned in") == 2 and "Quayside" not in example  # a worked example of 3 hops


def test_answer_in_an_earlier_passage_removes_the_three_hop_chain():
    corpus, index = _setup(FESTIVAL + " The band played there in 1962.")
    chain = _three_hop(corpus)
    assert written.promising_failure(chain, corpus, index, set()) == "answer_in_last_not_first"


def test_held_out_middle_passage_removes_the_three_hop_chain(setup):
    corpus, index = setup
    chain = _three_hop(corpus)
    assert written.promising_failure(chain, corpus, index, {chain["passage_ids"][1]}) == "held_out_passages"


def test_rule_made_three_hop_chain_and_full_entity_are_not_offered(setup):
    corpus, _ = setup
    chain = _three_hop(corpus)
    rule_id = written.candidate_id("bridge", chain["passage_ids"], "formed", "1962")
    assert all(c["chain"] != CHAIN for c in written.fresh_chains(corpus, 0, {rule_id}, Counter()))
    full = Counter({"Quayside Brass Band": verify.MAX_PER_ENTITY})
    assert all(c["entity"] != "Quayside Brass Band" for c in written.fresh_chains(corpus, 0, set(), full))


def test_onward_links_never_double_back_or_repeat_a_description(setup):
    corpus, _ = setup
    onward = written.onward_links(corpus, "Harbour Lights Festival", "Maria Delacroix-Hunt", "Welsh sculptor")
    assert [c for _, c, _ in onward] == ["Quayside Brass Band"]
    assert not written.onward_links(corpus, "Quayside Brass Band", "Maria Delacroix-Hunt", "Welsh sculptor")
    assert not written.onward_links(corpus, "Harbour Lights Festival", "Maria Delacroix-Hunt", "welsh brass band")


def test_written_question_that_skips_the_middle_hop_is_refused(setup):
    corpus, _ = setup
    chain = _three_hop(corpus)
    whole = ("In what year was the Welsh brass band mentioned in the passage about the Welsh sculptor "
             "mentioned in the Wikipedia passage about Harbour Lights Festival formed?")
    skipped = "In what year was the Welsh brass band mentioned in the passage about Harbour Lights Festival formed?"
    assert written.describes_the_chain(written.to_candidate(chain, whole, "w"))
    # passes the other checks on its words, but the festival's passage never mentions the band
    candidate = written.to_candidate(chain, skipped, "w")
    assert verify.names_hidden(candidate) and written.asks_the_fact(candidate)
    assert not written.describes_the_chain(candidate)
