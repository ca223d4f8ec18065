"""Summaries, comparisons, tables and plots of evaluation rows."""

from __future__ import annotations

import pytest

from helpers.analyse import (ALL, compare, comparison_table, format_comparison, format_table, plot_eval, plot_training,
                             summarise, summary_table)


def row(qid, source, em, lenient, fmt, calls, failed=0):
    return {"id": qid, "data_source": source, "exact_match": em, "lenient_match": lenient, "valid_format": fmt,
            "search_calls": calls, "failed_searches": failed, "reward": 1.0 if em else (0.0 if fmt else -0.1),
            "sampled_tokens": 10, "trajectory_tokens": 100, "truncated_observations": 0}


A = [row("1", "nq", True, True, True, 1), row("2", "nq", False, True, True, 0),
     row("3", "hotpotqa", False, False, False, 1, failed=1), row("4", "hotpotqa", True, True, True, 2)]
B = [row("1", "nq", True, True, True, 1), row("2", "nq", True, True, True, 1),
     row("3", "hotpotqa", True, True, True, 2), row("4", "hotpotqa", False, True, True, 2)]


def test_summarise_by_source():
    s = summarise(A)
    assert set(s) == {"nq", "hotpotqa", ALL}
    assert s[ALL]["n"] == 4 and s[ALL]["em_strict"] == 0.5 and s[ALL]["em_lenient"] == 0.75
    assert s["nq"]["no_search_share"] == 0.5 and s["hotpotqa"]["multi_search_share"] == 0.5
    assert s[ALL]["format_rate"] == 0.75 and s[ALL]["search_calls_mean"] == 1.0
    assert s[ALL]["failed_search_rate"] == pytest.approx(1 / 4)


def test_compare_counts_paired_wins():
    c = compare(A, B, ("sft", "grpo"))
    assert c[ALL]["delta_em_strict"] == pytest.approx(0.25)
    assert (c[ALL]["paired"], c[ALL]["a_only"], c[ALL]["b_only"]) == (4, 1, 2)
    assert (c["hotpotqa"]["a_only"], c["hotpotqa"]["b_only"]) == (1, 1)
    text = format_comparison(c, ("sft", "grpo"))
    assert "+0.250" in text and text.count("\n") == 4


def test_tables_render_as_html_with_the_compared_columns_first_and_escaped_labels():
    import re

    html = summary_table({"<b>run</b>": summarise(A), "grpo": summarise(B)})._repr_html_()
    main, details = html.split("<details>")
    assert main.count("<table") == 1 and details.count("<table") == 1
    head = re.findall(r"<th>(.*?)</th>", main)
    assert head == ["run", "source", "n", "EM strict", "EM lenient", "format", "searches"]
    assert "traj. tokens" in details and "traj. tokens" not in main
    assert "<b>run</b>" not in html and "&lt;b&gt;run&lt;/b&gt;" in html
    assert main.count("<tr>") == 1 + 6  # header + (3 sources incl. all) x 2 runs
    comparison = comparison_table(compare(A, B, ("sft", "grpo")), ("sft", "grpo"))
    head = re.findall(r"<th>(.*?)</th>", comparison._repr_html_().split("<details>")[0])
    assert head[:4] == ["source", "EM strict sft", "EM strict grpo", "Δ strict"] and "only grpo right" in head
    assert str(comparison).startswith("| source | EM strict sft |")


def test_table_and_plots(tmp_path):
    table = format_table({"sft": summarise(A), "grpo": summarise(B)})
    assert table.count("\n") == 1 + 6 and "| grpo | all | 4 | 0.750 |" in table
    metrics = [{"step": i, "reward_mean": 0.1 * i, "exact_match": 0.1 * i, "valid_format_rate": 1.0,
                "degenerate_group_share": 0.2, "search_calls_mean": 1.0, "multi_search_share": 0.1,
                "kl_sampler_trainer_k3": 0.001} for i in range(4)]
    assert plot_training(metrics, tmp_path / "t.png").stat().st_size > 1000
    assert plot_eval({"sft": summarise(A), "grpo": summarise(B)}, tmp_path / "e.png").stat().st_size > 1000


def test_second_searches_are_split_by_whether_the_first_search_found_the_answer():
    from helpers.analyse import first_search_hits, second_search_table
    from helpers.search.types import SearchItem, SearchResult

    class Index:
        def __init__(self):
            self.queries = []

        def search(self, query):
            self.queries.append(query)
            text = {"capital of france": "Paris is the capital.", "tallest dog": "Dogs vary."}.get(query, "")
            return SearchResult(ok=True, items=[SearchItem(title="T", content=text)], latency=0.0)

    rows = [
        {"queries": ["capital of france"], "answers": ["Paris"], "search_calls": 1, "exact_match": True},
        {"queries": ["capital of france", "x"], "answers": ["Paris"], "search_calls": 2, "exact_match": False},
        {"queries": ["tallest dog", "Zeus (dog)"], "answers": ["Zeus"], "search_calls": 2, "exact_match": True},
        {"queries": ["tallest dog"], "answers": ["Zeus"], "search_calls": 1, "exact_match": False},
        {"queries": [], "answers": ["Zeus"], "search_calls": 0, "exact_match": False},
        # "no" is never written in the evidence: a group of its own, not a miss
        {"queries": ["tallest dog", "Zeus (dog)"], "answers": ["no"], "search_calls": 2, "exact_match": True},
    ]
    index = Index()
    marked = first_search_hits(rows, index)
    assert [r["first_search_hit"] for r in marked] == [True, True, False, False, None, None]
    assert [r["yes_no"] for r in marked] == [False] * 5 + [True]
    assert index.queries == ["capital of france"] * 2 + ["tallest dog"] * 2  # only first queries re-run
    table = second_search_table(marked)
    found, missed = table["first search found it"], table["first search missed"]
    assert (found["n"], found["searched_again"], found["em_strict"], found["em_strict_if_again"]) == (2, 0.5, 0.5, 0.0)
    assert (missed["n"], missed["searched_again"], missed["em_strict"], missed["em_strict_if_again"]) == (2, 0.5, 0.5, 1.0)
    assert table["yes/no question"] == {"n": 1, "searched_again": 1.0, "em_strict": 1.0, "em_strict_if_again": 1.0,
                                        "em_strict_if_once": None}
    assert (found["em_strict_if_once"], missed["em_strict_if_once"]) == (1.0, 0.0)
    # a word inside another word is not a hit
    assert first_search_hits([{"queries": ["capital of france"], "answers": ["Pari"]}], index)[0]["first_search_hit"] is False
    assert second_search_table([])["first search missed"]["em_strict_if_again"] is None


def test_multi_search_curves_draw_one_line_per_run_and_mark_a_non_finite_gradient():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.analyse import multi_search_curves

    clean = [{"step": s, "multi_search_share": 0.3 - 0.1 * s, "grad_norm": 1.0} for s in range(3)]
    broken = [{"step": 0, "multi_search_share": 0.2, "grad_norm": 2.0},
              {"step": 1, "multi_search_share": 0.1, "grad_norm": float("nan")}]
    ax = multi_search_curves({"clean": clean, "broken": broken}).axes[0]
    lines = [line for line in ax.get_lines() if line.get_marker() != "x"]
    marks = [line for line in ax.get_lines() if line.get_marker() == "x"]
    assert [list(line.get_ydata()) for line in lines] == [pytest.approx([0.3, 0.2, 0.1]), [0.2, 0.1]]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [1]


def test_multi_search_curves_draw_one_source_of_runs_that_logged_it():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.analyse import multi_search_curves

    mixed = [{"step": s, "multi_search_share": 0.5, "multi_search_share/hotpotqa": 0.8 - 0.2 * s} for s in range(3)]
    old = [{"step": 0, "multi_search_share": 0.4}]  # logged before per-source metrics: no line
    ax = multi_search_curves({"mixed": mixed, "old": old}, key="multi_search_share/hotpotqa").axes[0]
    assert [list(line.get_ydata()) for line in ax.get_lines() if len(line.get_xdata())] == [pytest.approx([0.8, 0.6, 0.4])]
    assert "hotpotqa" in ax.get_ylabel()


def test_second_search_payoff_bars_compare_stopping_with_searching_again():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.analyse import second_search_payoff_figure, second_search_table

    rows = ([{"first_search_hit": True, "search_calls": 1, "exact_match": True}] * 3
            + [{"first_search_hit": True, "search_calls": 2, "exact_match": False}]
            + [{"first_search_hit": False, "search_calls": 2, "exact_match": True},
               {"first_search_hit": False, "search_calls": 1, "exact_match": False}])
    ax = second_search_payoff_figure(second_search_table(rows)).axes[0]
    heights = [patch.get_height() for patch in ax.patches]
    # once: found 1.0, missed 0.0; again: found 0.0, missed 1.0 (the empty yes/no group is left out)
    assert heights == [1.0, 0.0, 0.0, 1.0]
    assert [t.get_text() for t in ax.texts] == ["n=3", "n=1", "n=1", "n=1"]


def test_search_learned_sets_the_evidence_read_against_searching_the_question():
    import json
    from pathlib import Path

    from helpers.analyse import format_search_learned, search_learned_figure, search_learned_table
    from helpers.search import local

    corpus = Path(__file__).parent / "fixtures" / "search" / "corpus.jsonl"
    index = local.LocalIndex.from_rows([json.loads(line) for line in corpus.read_text().splitlines() if line.strip()])
    search = local.LocalSearchClient(index, topk=1)

    def row(qid, source, question, answers, gold, queries, em):
        return {"id": qid, "data_source": source, "question": question, "answers": answers, "gold_passage_ids": gold,
                "queries": queries, "search_calls": len(queries), "exact_match": em}

    nobel = "In which year was the Nobel Prize in Physics first awarded to the discoverer of X-rays?"
    rows = [
        # the question finds an actress; the rewritten query finds the gold passage and the answer
        row("r1", "nq", "who was the actress Shirley Temple and which river flows through Paris", ["Seine"],
            ["wfix00000003"], ["Paris"], True),
        row("r2", "nq", "what tower was built in paris from 1887 to 1889 near the river", ["Champ de Mars"],
            ["wfix00000002"], ["what tower was built in paris from 1887 to 1889 near the river"], False),
        # a second hop reads the other gold passage
        row("r3", "hotpotqa", nobel, ["1901"], ["wfix00000001", "wfix00000007"], [nobel, "Röntgen discovered X-rays"], True),
        row("r4", "hotpotqa", "Is the Rhine a river?", ["yes"], ["wfix00000008"], ["Rhine"], False),  # yes/no
    ]
    table = search_learned_table(rows, search)
    nq, hotpot = table["nq"], table["hotpotqa"]
    assert (nq["evidence_recall"], nq["question_recall"], nq["gold_mean"], nq["question_gold_mean"]) == (1.0, 0.5, 1.0, 0.5)
    assert (nq["rewritten_share"], nq["rewritten_n"], nq["rewritten_recall"], nq["rewritten_question_recall"]) == (0.5, 1, 1.0, 0.0)
    assert (nq["second_search_share"], nq["em_if_again"], nq["em_if_stopped"]) == (0.0, None, 0.5)
    assert (hotpot["n"], hotpot["n_recall"], hotpot["evidence_recall"], hotpot["question_recall"]) == (2, 1, 1.0, 1.0)
    assert (hotpot["gold_mean"], hotpot["question_gold_mean"], hotpot["gold_all"], hotpot["question_gold_all"]) == \
        (1.5, 1.0, 1.0, 0.5)
    assert hotpot["rewritten_share"] == 0.5 and hotpot["rewritten_n"] == 0  # yes/no rewrites have no recall
    assert (hotpot["second_search_share"], hotpot["em_if_again"], hotpot["em_if_stopped"]) == (0.5, 1.0, 0.0)
    assert table[ALL]["n"] == 4 and table[ALL]["evidence_recall"] == 1.0
    text = format_search_learned({"run": table})
    assert text.count("\n") == 1 + 3 and "| run | nq | 2 | 1.000 | 0.500 |" in text and "–" in text
    fig = search_learned_figure({"run": table, "again": table})
    assert len(fig.axes) == 6 and [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["hotpotqa", "nq"]
    with pytest.raises(ValueError, match="search backend"):
        search_learned_table(rows)


def test_command_labels_runs_and_sets_search_against_the_question(tmp_path, monkeypatch, capsys):
    import json
    from pathlib import Path

    from helpers.analyse import main
    from helpers.search import local

    corpus = Path(__file__).parent / "fixtures" / "search" / "corpus.jsonl"
    index = local.LocalIndex.from_rows([json.loads(line) for line in corpus.read_text().splitlines() if line.strip()])
    client = local.LocalSearchClient(index, topk=1)
    monkeypatch.setattr(local, "LocalSearchClient", lambda: client)  # the fixture corpus, not the course's index
    rows = [dict(r, question="what tower was built in paris from 1887 to 1889 near the river", answers=["Champ de Mars"],
                 gold_passage_ids=["wfix00000002"], queries=["Paris"]) for r in A]
    path = tmp_path / "sft_grpo.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    main([f"trim={path}", str(path), "--search-learned"])
    out = capsys.readouterr().out
    assert "| trim | all | 4 |" in out and "| sft_grpo | all | 4 |" in out  # LABEL=PATH, else the file's stem
    assert "evidence recall" in out and out.count("| trim | ") == 3 + 3  # both tables, three groups each
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.jsonl")])
    assert "no such eval JSONL" in capsys.readouterr().err
