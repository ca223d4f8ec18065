"""Retrieval measured on trajectories (evidence recall, gold passages, rewritten queries) and its reward terms."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.data import SearchExample
from helpers.eval import trajectory_row
from helpers.evidence import (
    EvidenceRewardConfig,
    build_report,
    evidence_reward,
    evidence_terms,
    gold_passage_ids,
    query_differs,
    row_evidence,
    trajectory_evidence,
)
from helpers.models import load_tokenizer
from helpers.reward import contains_answer
from helpers.rollout import RolloutConfig, rollout_batch
from helpers.search import local
from fixtures.doubles import ScriptedSamplingClient, call

FIXTURES = Path(__file__).parent / "fixtures" / "search"
QUESTION = "In which year was the Nobel Prize in Physics first awarded to the discoverer of X-rays?"
GOLD = ["wfix00000001", "wfix00000007"]  # the prize's passage and the discovery's passage
EXAMPLE = SearchExample(id="x1", question=QUESTION, answers=["1901"], data_source="hotpotqa",
                        metadata={"gold_passage_ids": GOLD})
# Each branch's plan: its queries in order, then its answer (None: keeps searching past the budget).
PLANS = [
    ([], "1901"),  # answers from memory
    ([QUESTION], "1901"),  # question as query: one gold passage, it holds the answer
    (["X-rays discovered by Röntgen", "first Nobel Prize in Physics"], "1901"),  # two hops, both gold
    (["Eiffel Tower", "Eiffel Tower"], "1889"),  # repeats itself, answers wrong
    (["Röntgen discovered X-rays", "Seine river", "Rhine"], None),  # runs out of budget
]


@pytest.fixture(scope="module")
def search():
    rows = [json.loads(line) for line in (FIXTURES / "corpus.jsonl").read_text().splitlines() if line.strip()]
    return local.LocalSearchClient(local.LocalIndex.from_rows(rows), topk=1)


@pytest.fixture(scope="module")
def batch(search):
    tokenizer = load_tokenizer("qwen2.5-0.5b")

    def script(prompt: str, index: int) -> str:
        conversation = prompt.split("<|im_start|>assistant", 1)[-1] if "<|im_start|>assistant" in prompt else ""
        done = re.findall(r'"arguments": \{"query": "([^"]*)"\}', conversation)
        plan = index if not done else next(k for k, (queries, _) in enumerate(PLANS) if queries[:1] == done[:1])
        queries, answer = PLANS[plan]
        return call(queries[len(done)]) if len(done) < len(queries) else f"Answer: {answer}"

    config = RolloutConfig(group_size=len(PLANS), max_search_calls=2, max_assistant_turns=4,
                           max_assistant_tokens=200, max_trajectory_tokens=4096)
    return rollout_batch(ScriptedSamplingClient(tokenizer, script), tokenizer, search, [EXAMPLE], config,
                         progress=False)


def test_answers_match_in_evidence_as_the_reward_normalises_them():
    assert contains_answer("[1] Title: Hamlet\n    Content: written by William Shakespeare.", ["william shakespeare"])
    assert contains_answer("The Beatles' song", ["the beatles"])
    assert not contains_answer("Parisian cafés", ["Paris"])  # word boundaries
    assert not contains_answer("anything", ["", "the"])  # an answer that normalises to nothing
    assert query_differs("Who wrote Hamlet?", "who wrote hamlet") is False
    assert query_differs("Hamlet author", "who wrote hamlet") is True and query_differs(None, "q") is None


def test_gold_ids_come_from_metadata_an_eval_row_or_the_prepared_splits():
    assert gold_passage_ids(SimpleNamespace(id="zz", metadata={"gold_passage_ids": ["a", "b"]})) == ["a", "b"]
    assert gold_passage_ids({"id": "zz", "gold_passage_ids": ["c"]}) == ["c"]
    assert gold_passage_ids({"id": "zz", "metadata": {"gold_passage_ids": ["d"]}}) == ["d"]
    assert gold_passage_ids({"id": "not a question id anywhere"}) == []


def test_reports_say_what_each_trajectory_retrieved(batch):
    reports = [trajectory_evidence(t, GOLD) for t in batch]
    assert [r.evidence_hit for r in reports] == [False, True, True, False, False]
    assert [r.gold_found for r in reports] == [0, 1, 2, 0, 1]
    assert [r.first_query_rewritten for r in reports] == [None, False, True, True, True]
    assert [r.redundant_searches for r in reports] == [0, 0, 0, 1, 0]
    two_hops = reports[2]
    assert [s.new_gold for s in two_hops.searches] == [["wfix00000007"], ["wfix00000001"]]
    assert [s.answer_hit for s in two_hops.searches] == [False, True] and two_hops.gold_recall == 1.0
    assert batch[4].end_reason == "search_budget"


def test_yes_no_questions_have_no_evidence_recall():
    report = build_report("Are both cats?", ["yes"], [], [("cats", ["p1"], True)])
    assert report.yes_no and report.evidence_hit is None and report.gold_recall is None


def test_searches_without_passage_ids_are_never_called_redundant():
    report = build_report("q", ["a"], ["g"], [("q", None, False), ("q", None, False), ("q", [], False)])
    assert [s.redundant for s in report.searches] == [False, False, True]  # the last one came back empty


def test_reward_terms_pay_new_gold_charge_repeats_and_need_a_valid_answer(batch):
    config = EvidenceRewardConfig(gain=0.1, redundancy=0.05)
    terms = [evidence_terms(t, config, GOLD) for t in batch]
    assert [t.base for t in terms] == [1.0, 1.0, 1.0, 0.0, -0.1]
    assert [t.reward for t in terms] == pytest.approx([1.0, 1.05, 1.1, -0.05, -0.1])
    assert terms[4].gold_found == 1 and terms[4].gain == 0.0  # gold retrieved, but it never answered
    assert config.gain < 1.0  # a wrong answer that found every gold passage still scores below any right answer
    with pytest.raises(ValueError):
        EvidenceRewardConfig(gain=-1)


def test_beyond_rag_pays_only_the_gold_the_question_alone_does_not_retrieve(batch, search):
    from helpers.evidence import rag_recall
    from helpers.rollout import groups_of

    baseline = rag_recall(QUESTION, GOLD, search)  # the question's own top 1: one of the two gold passages
    assert baseline == 0.5
    terms = [evidence_terms(t, EvidenceRewardConfig(gain=0.0, redundancy=0.0, beyond_rag=0.4), GOLD, baseline)
             for t in batch]
    # memory: nothing read; the question as query: the baseline itself; two hops: both gold, 0.5 above it;
    # the repeats find no gold; the last never answered (no term without a valid answer)
    assert [t.beyond_rag for t in terms] == pytest.approx([0.0, 0.0, 0.2, 0.0, 0.0])
    assert [t.reward for t in terms] == pytest.approx([1.0, 1.0, 1.2, 0.0, -0.1])
    (group,) = groups_of(list(batch))
    result = evidence_reward(gain=0.0, redundancy=0.0, beyond_rag=0.4, search=search)(group)
    assert result.rewards == pytest.approx([1.0, 1.0, 1.2, 0.0, -0.1])
    assert result.components["beyond_rag"] == pytest.approx([0.0, 0.0, 0.2, 0.0, 0.0])
    off = evidence_reward(gain=0.0, redundancy=0.0, search=search)(group)  # the default adds nothing
    assert off.rewards == pytest.approx([1.0, 1.0, 1.0, 0.0, -0.1])
    with pytest.raises(ValueError):
        EvidenceRewardConfig(beyond_rag=-0.1)


def test_the_training_step_finds_the_evidence_reward_by_name(batch):
    from helpers.reward_functions import make_reward, reward_names
    from helpers.rollout import groups_of
    from helpers.train import TrainConfig

    assert "evidence" in reward_names()
    (group,) = groups_of(list(batch))
    before = [t.reward for t in group.trajectories]
    result = make_reward("evidence", gain=0.2, redundancy=0.1)(group)  # gold ids from the example's metadata
    assert result.rewards == pytest.approx([1.0, 1.1, 1.2, -0.1, -0.1])
    assert result.components["outcome"] == [1.0, 1.0, 1.0, 0.0, -0.1]
    assert result.components["gold_found"] == [0, 1, 2, 0, 1] and result.components["redundant_searches"][3] == 1
    assert [t.reward for t in group.trajectories] == before  # a reward function never writes the trajectories
    assert TrainConfig(reward="evidence").reward_fn()(group).rewards == pytest.approx([1.0, 1.05, 1.1, -0.05, -0.1])
    with pytest.raises(ValueError):
        make_reward("evidence", weight=1.0)


def test_eval_rows_store_the_evidence_and_reproduce_the_report(batch, search):
    for trajectory in batch:
        row = trajectory_row(trajectory, "agent", "test")
        row["gold_passage_ids"] = GOLD  # the fixture's question is in no prepared split
        stored = row_evidence(row)
        expected = trajectory_evidence(trajectory, GOLD)
        assert (stored.evidence_hit, stored.gold_found, stored.redundant_searches) == \
            (expected.evidence_hit, expected.gold_found, expected.redundant_searches)
        assert len(row["evidence_ids"]) == len(row["queries"]) == len(row["evidence_hits"])
        legacy = {k: v for k, v in row.items() if k not in ("evidence_ids", "evidence_hits")}
        rerun = row_evidence(legacy, search)  # rows written before the fields existed: re-run the queries
        assert (rerun.evidence_hit, rerun.gold_found) == (expected.evidence_hit, expected.gold_found)
        if row["queries"]:
            with pytest.raises(ValueError, match="pass `search`"):
                row_evidence(legacy)


def _row(source, gold, read, right, question="q"):
    return {"id": f"{source}-{question}", "question": question, "data_source": source, "gold_passage_ids": gold,
            "evidence_ids": read, "exact_match": right}


def test_finding_and_reading_splits_wrong_answers_by_whether_the_gold_passages_were_read():
    from helpers.evidence import finding_and_reading

    rows = [
        _row("hotpotqa", ["a", "b"], [["a", "x"], ["b"]], True),    # both gold, over two searches
        _row("hotpotqa", ["a", "b"], [["a", "x", "y"]], True),      # one of two: not found
        _row("hotpotqa", ["a", "b"], [["a", "b"]], False),          # found, read wrong
        _row("nq", ["c"], [["c"]], True),
        _row("nq", ["c"], [["d"]], False),
        _row("nq", ["c"], [[]], False),                             # an empty observation
        _row("nq", [], [["c"]], True),                              # no gold on record: left out
        _row("nq", ["c"], [None], True),                            # a backend without ids: left out
    ]
    table = finding_and_reading(rows)
    assert table["hotpotqa"] == {"n": 3, "found": 2 / 3, "em_found": 0.5, "em_missed": 1.0, "em": 2 / 3}
    assert table["nq"] == {"n": 3, "found": 1 / 3, "em_found": 1.0, "em_missed": 0.0, "em": 1 / 3}
    assert table["all"]["n"] == 6 and table["all"]["found"] == 0.5


def test_question_recall_at_k_counts_questions_whose_gold_passages_are_all_in_the_top_k():
    from types import SimpleNamespace

    from helpers.evidence import question_recall_at_k

    ranking = {"q1": ["a", "x", "b", "y"], "q2": ["z", "c", "w", "v"]}

    class Index:
        def search(self, question, k=3):
            return [SimpleNamespace(id=i) for i in ranking[question][:k]]

    rows = [_row("hotpotqa", ["a", "b"], None, False, "q1"), _row("nq", ["c"], None, False, "q2")]
    recall = question_recall_at_k(rows, Index(), ks=(3, 1, 2))
    assert recall == {"hotpotqa": {1: 0.0, 2: 0.0, 3: 1.0}, "nq": {1: 0.0, 2: 1.0, 3: 1.0}}


def test_the_reading_figure_and_table_show_every_policy(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from helpers.course.reading import reading_figure, reading_table
    from helpers.evidence import finding_and_reading

    rows = [_row("hotpotqa", ["a"], [["a"]], True), _row("nq", ["c"], [["d"]], False)]
    tables = {"run/sft": finding_and_reading(rows), "run/<b>": finding_and_reading(rows[:1])}
    fig = reading_figure(tables, {"nq": {1: 0.5, 3: 0.7}})
    assert len(fig.axes) == 3
    text = str(reading_table(tables))
    assert "| run/sft | nq | 1 | 0% | – | 0.000 |" in text and "run/<b>" in text
    assert "&lt;b&gt;" in reading_table(tables)._repr_html_()


def _recorded_eval(folder, label, rows, topk):
    import json

    (folder / "eval").mkdir(parents=True, exist_ok=True)
    (folder / "eval" / f"{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"eval": {} if topk is None else {"search_topk": topk}}
    (folder / "eval" / f"{label}.config.json").write_text(json.dumps(config))


def test_recorded_topk_reading_splits_each_evaluation_and_checks_its_k(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from helpers import config
    from helpers.course.reading import recorded_topk_reading, topk_figure
    from helpers.evidence import finding_and_reading

    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    k3 = [_row("hotpotqa", ["a"], [["x"]], False), _row("nq", ["c"], [["d"]], False)]
    k5 = [_row("hotpotqa", ["a"], [["a"]], True), _row("nq", ["c"], [["c"]], False)]
    _recorded_eval(tmp_path / "old", "seed", k3, None)  # written before the field: the default k
    _recorded_eval(tmp_path / "new", "top5", k5, 5)
    evals = {3: ("old", "seed"), 5: ("new", "top5")}
    by_k = recorded_topk_reading(evals)
    assert by_k == {3: finding_and_reading(k3), 5: finding_and_reading(k5)}
    assert len(topk_figure(by_k).axes) == 2

    with pytest.raises(ValueError, match="searched with 5 passages, not 8"):
        recorded_topk_reading({8: ("new", "top5")})


def test_the_recorded_topk_evaluations_are_the_ones_they_are_named_for():
    from helpers.course.reading import TOPK_EVALS, recorded_topk_reading

    by_k = recorded_topk_reading()  # raises if a file's own config disagrees with its k
    assert sorted(by_k) == sorted(TOPK_EVALS) and all(t["all"]["n"] == by_k[3]["all"]["n"] for t in by_k.values())
    from helpers.course.reading import TOPK_VALIDATION_EVALS
    from helpers.course.recorded import run_folder

    on_validation = recorded_topk_reading(TOPK_VALIDATION_EVALS)
    assert sorted(on_validation) == sorted(TOPK_VALIDATION_EVALS)
    for k, (run, label) in TOPK_VALIDATION_EVALS.items():  # the split a policy is chosen on, not test
        config = json.loads((run_folder(run) / "eval" / f"{label}.config.json").read_text())
        assert config["eval"]["split"] == "validation"
        assert on_validation[k]["all"]["n"] != by_k[3]["all"]["n"]


def test_topk_learned_tables_label_each_k_and_check_it(tmp_path, monkeypatch):
    from helpers import config
    from helpers.analyse import search_learned_table
    from helpers.course.reading import topk_learned_tables

    from helpers.search import local

    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    corpus = Path(__file__).parent / "fixtures" / "search" / "corpus.jsonl"
    index = local.LocalIndex.from_rows([json.loads(line) for line in corpus.read_text().splitlines() if line.strip()])
    search = local.LocalSearchClient(index, topk=2)
    k2 = [dict(_row("hotpotqa", ["wfix00000001"], [["wfix00000001"], ["wfix00000007"]], True), search_calls=2,
               answers=["1901"]),
          dict(_row("nq", ["wfix00000003"], [["wfix00000002"]], False), search_calls=1, answers=["Seine"])]
    _recorded_eval(tmp_path / "run", "top2", k2, 2)
    tables = topk_learned_tables(search, {2: ("run", "top2")})
    assert list(tables) == ["k = 2"] and tables["k = 2"] == search_learned_table(k2, search)
    assert tables["k = 2"]["hotpotqa"]["second_search_share"] == 1.0 and tables["k = 2"]["nq"]["em_if_stopped"] == 0.0
    with pytest.raises(ValueError, match="searched with 2 passages, not 3"):
        topk_learned_tables(search, {3: ("run", "top2")})


def _read(source, gold, read, right, answers, answer, calls, question):
    return dict(_row(source, gold, read, right, question), answers=answers, answer=answer, search_calls=calls,
                lenient_match=right)


def test_reader_summary_splits_em_by_evidence_in_hand_and_reads_yes_no_answers_as_the_reward_does():
    from helpers.evidence import reader_summary

    rows = [_read("hotpotqa", ["a", "b"], [["a"], ["b"]], True, ["Lit"], "Lit", 2, "q1"),
            _read("hotpotqa", ["a", "b"], [["a"]], False, ["no"], "Yes.", 1, "q2"),  # "Yes." is a yes
            _read("hotpotqa", ["a", "b"], None, True, ["yes"], "yes", 1, "q3")]  # evidence unknown: the rest
    s = reader_summary(rows)
    assert (s["questions"], s["em"], s["two_searches"]) == (3, 0.667, 0.333)
    assert (s["every_gold_read"], s["em_every_gold_read"], s["em_rest"]) == (1, 1.0, 0.5)
    assert (s["yes_no"], s["em_yes_no"], s["said_yes"]) == (2, 0.5, 2)
    assert reader_summary([])["em"] is None


def test_recorded_gold_in_hand_sets_the_same_questions_side_by_side_and_refuses_others(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from helpers import config
    from helpers.course.reading import gold_in_hand_figure, recorded_gold_in_hand
    from helpers.evidence import reader_summary

    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    index = [_read("hotpotqa", ["a", "b"], [["x"]], q == "q1", ["Lit"], "Lit", 2, q) for q in ("q1", "q2")]
    index.append(_read("nq", ["c"], [["c"]], True, ["Seine"], "Seine", 1, "q9"))  # not in the handed-over run
    gold = [_read("hotpotqa", ["a", "b"], [["a", "b"]], False, ["Lit"], "Adorable", 1, q) for q in ("q1", "q2")]
    _recorded_eval(tmp_path / "run", "test", index, 2)
    _recorded_eval(tmp_path / "run", "gold", gold, 2)
    both = recorded_gold_in_hand(("run", "test", "gold"))
    assert both == {"BM25's passages": reader_summary(index[:2]), "gold handed over": reader_summary(gold)}
    assert both["BM25's passages"]["em"] == 0.5 and both["gold handed over"]["every_gold_read"] == 2
    assert len(gold_in_hand_figure(both).axes[0].patches) == 2 * 5  # five measures, one bar per run
    _recorded_eval(tmp_path / "run", "other", [dict(gold[0], id="hotpotqa-elsewhere")], 2)
    with pytest.raises(ValueError, match="lacks 1 of the questions"):
        recorded_gold_in_hand(("run", "test", "other"))


def test_the_recorded_gold_in_hand_run_is_the_policy_on_the_same_hundred_hotpotqa_questions():
    from helpers.course.reading import GOLD_IN_HAND, recorded_gold_in_hand

    both = recorded_gold_in_hand()
    assert {s["questions"] for s in both.values()} == {100}
    assert both["gold handed over"]["every_gold_read"] == 100  # every question ended with its gold in hand
    assert both["BM25's passages"]["every_gold_read"] < 100
    from helpers.course.recorded import run_folder
    config = json.loads((run_folder(GOLD_IN_HAND[0]) / "eval" / f"{GOLD_IN_HAND[2]}.config.json").read_text())
    assert config["eval"]["search_topk"] == 2 and config["data_source"] == "hotpotqa"
