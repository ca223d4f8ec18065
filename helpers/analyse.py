"""Summaries, side-by-side comparisons, tables and plots of evaluation and training runs.

Two exact-match numbers are always reported:
- strict EM: the reward's rule (exactly one `Answer:` line whose normalised text equals a gold answer);
- lenient EM: a normalised gold answer appears anywhere in the final text, so baselines that
  ignore the output format are not scored as zero for formatting alone.
"""

from __future__ import annotations

import argparse
import functools
import math
from html import escape
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import matplotlib.pyplot as plt

from helpers.evidence import gold_passage_ids, is_yes_no, row_evidence, search_evidence
from helpers.metrics import batch_summary
from helpers.reward import contains_answer
from helpers.runs import read_jsonl
from helpers.search import format_results

ALL = "all"

# One colour per policy in every plot, whichever policies a figure shows.
POLICY_COLOURS = {"base": "#7f7f7f", "sft": "#1f77b4", "sft_grpo": "#d62728"}
# Any other name (a checkpoint, a reward's run) draws from these, by a hash of its name.
OTHER_COLOURS = ("#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def policy_colour(name: str) -> str:
    """The colour of policy `name`: fixed for the recorded policies, stable for any other name."""
    import zlib

    if name in POLICY_COLOURS:
        return POLICY_COLOURS[name]
    return OTHER_COLOURS[zlib.crc32(str(name).encode("utf-8")) % len(OTHER_COLOURS)]

COLUMN_INCHES = 9.0  # a JupyterLab notebook column shows about 970 px: wider figures shrink (100 dpi)

COLUMNS = [
    ("n", "n", "{:d}"),
    ("em_strict", "EM strict", "{:.3f}"),
    ("em_lenient", "EM lenient", "{:.3f}"),
    ("format_rate", "format", "{:.3f}"),
    ("search_calls_mean", "searches", "{:.2f}"),
    ("no_search_share", "no search", "{:.3f}"),
    ("multi_search_share", "≥2 searches", "{:.3f}"),
    ("failed_search_rate", "failed searches", "{:.3f}"),
    ("truncated_observations", "cut obs.", "{:d}"),
    ("sampled_tokens_mean", "gen. tokens", "{:.0f}"),
    ("trajectory_tokens_mean", "traj. tokens", "{:.0f}"),
]


def _mean(values: Iterable[float], empty: float | None = 0.0) -> float | None:
    """The mean, or `empty` when there are no values."""
    values = list(values)
    return sum(values) / len(values) if values else empty


def first_last_quarter(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[float, float]:
    """Mean of `key` over the first and over the last quarter of a run's steps (nan where absent)."""
    n = max(1, len(rows) // 4)
    first, last = ([r[key] for r in part if key in r] for part in (rows[:n], rows[-n:]))
    return _mean(first, float("nan")), _mean(last, float("nan"))


def summary_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One evaluation's numbers: `helpers.metrics.batch_summary` of its rows, lenient EM and failure rate added."""
    batch = batch_summary(rows)
    total_calls = sum(int(r.get("search_calls", 0)) for r in rows)
    return {
        "n": len(rows),
        "em_strict": batch["exact_match"],
        "em_lenient": _mean([float(bool(r.get("lenient_match"))) for r in rows]),
        "format_rate": batch["valid_format_rate"],
        "reward_mean": batch["reward_mean"],
        "search_calls_mean": batch["search_calls_mean"],
        "no_search_share": batch["no_search_share"],
        "multi_search_share": batch["multi_search_share"],
        "failed_searches": batch["failed_searches"],
        "failed_search_rate": batch["failed_searches"] / total_calls if total_calls else 0.0,
        "truncated_observations": batch["truncated_observations"],
        "sampled_tokens_mean": batch["sampled_tokens_mean"],
        "trajectory_tokens_mean": batch["trajectory_tokens_mean"],
    }


def summarise(rows: Iterable[Mapping[str, Any]], by: str = "data_source") -> dict[str, dict[str, Any]]:
    """{group: summary} for every value of `by`, plus 'all'."""
    rows = list(rows)
    groups: dict[str, list] = {}
    for row in rows:
        groups.setdefault(str(row.get(by)), []).append(row)
    out = {key: summary_of(value) for key, value in sorted(groups.items())}
    out[ALL] = summary_of(rows)
    return out


def compare(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping], labels: tuple[str, str] = ("A", "B"),
            by: str = "data_source") -> dict[str, dict[str, Any]]:
    """Side by side per group, with paired counts on the questions both runs answered.

    `b_only` counts questions B gets right (strict) and A gets wrong; `a_only` the reverse.
    """
    a, b = summarise(rows_a, by), summarise(rows_b, by)
    index_a = {row["id"]: row for row in rows_a}
    paired: dict[str, dict[str, int]] = {}
    for row in rows_b:
        other = index_a.get(row["id"])
        if other is None:
            continue
        for group in (str(row.get(by)), ALL):
            counts = paired.setdefault(group, {"paired": 0, "a_only": 0, "b_only": 0})
            counts["paired"] += 1
            counts["a_only"] += int(bool(other.get("exact_match")) and not row.get("exact_match"))
            counts["b_only"] += int(bool(row.get("exact_match")) and not other.get("exact_match"))
    out = {}
    for group in sorted(set(a) | set(b), key=lambda g: (g == ALL, g)):
        sa, sb = a.get(group, summary_of([])), b.get(group, summary_of([]))
        out[group] = {
            labels[0]: sa,
            labels[1]: sb,
            "delta_em_strict": sb["em_strict"] - sa["em_strict"],
            "delta_em_lenient": sb["em_lenient"] - sa["em_lenient"],
            **paired.get(group, {"paired": 0, "a_only": 0, "b_only": 0}),
        }
    return out


def first_search_hits(rows: Sequence[Mapping[str, Any]], search) -> list[dict[str, Any]]:
    """Each row with `first_search_hit`: did its first query's results contain a gold answer?

    Re-runs the first query on `search` (a backend with `.search(query) -> SearchResult`), so
    use the one the run used; the local BM25 index is deterministic. Rows without a search get
    None, and so do yes/no questions (`yes_no` True): "yes" or "no" is never written in the
    evidence, so the string test cannot say whether one search was enough. This is the test of
    "a second search where one is not enough".
    """

    out = []
    for row in rows:
        row = dict(row)
        queries = row.get("queries") or []
        row["yes_no"] = is_yes_no(row.get("answers") or [])
        if queries and not row["yes_no"]:
            evidence = format_results(search.search(queries[0]))  # what the agent read
            row["first_search_hit"] = contains_answer(evidence, row.get("answers") or [])
        else:
            row["first_search_hit"] = None
        out.append(row)
    return out


def second_search_table(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Share of second searches and EM, split by whether the first search already found the answer.

    Yes/no questions that searched form a third group: whether one search was enough is unknown.
    """
    groups = {"first search found it": [r for r in rows if r.get("first_search_hit") is True],
              "first search missed": [r for r in rows if r.get("first_search_hit") is False],
              "yes/no question": [r for r in rows if r.get("yes_no") and r.get("queries")]}
    table = {}
    for name, group in groups.items():
        again = [r for r in group if int(r.get("search_calls", 0)) >= 2]
        once = [r for r in group if int(r.get("search_calls", 0)) < 2]
        table[name] = {
            "n": len(group),
            "searched_again": len(again) / len(group) if group else 0.0,
            "em_strict": _mean([float(bool(r.get("exact_match"))) for r in group]),
            "em_strict_if_again": _mean([float(bool(r.get("exact_match"))) for r in again], None),
            # the other side of the bet: what a second search cost where the agent stopped at one
            "em_strict_if_once": _mean([float(bool(r.get("exact_match"))) for r in once], None),
        }
    return table


def second_search_figure(tables: Mapping[str, Mapping[str, Mapping[str, Any]]],
                         title: str = "A second search where one is not enough?"):
    """Horizontal bars, one block per run: share of questions searched again when the first
    search found the answer, when it missed, and (grey, where there are any) on yes/no questions.
    Sized for a notebook column whatever the number of runs: runs are rows, not columns."""
    labels = list(tables)
    groups = ["first search found it", "first search missed"]
    if any(tables[label].get("yes/no question", {}).get("n") for label in labels):
        groups.append("yes/no question")
    height = 0.8 / len(groups)
    fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 1.3 + 0.22 * len(groups) * len(labels)), layout="constrained")
    for k, (group, colour) in enumerate(zip(groups, ("#8fbc8f", "#cd5c5c", "#a9a9a9"))):
        ys = [i + (k - (len(groups) - 1) / 2) * height for i in range(len(labels))]
        values = [tables[label][group]["searched_again"] for label in labels]
        ax.barh(ys, values, height, color=colour, label=group)
        for y, label, value in zip(ys, labels, values):
            ax.text(value + 0.01, y, f"n={tables[label][group]['n']}", va="center", fontsize=7, color="#444")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()  # the first run on top, as in the legend and the tables
    ax.set_xlabel("share of questions searched again")
    ax.set_xlim(0, 1.12)  # room for the n= labels of full bars
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=len(groups), fontsize=8, frameon=False)
    return fig


def second_search_payoff_figure(table: Mapping[str, Mapping[str, Any]], title: str = "", ax=None):
    """Bars: strict EM of the questions where the agent stopped at one search vs searched again,
    split as in `second_search_table`. A second search pays where the right bar is higher."""
    groups = [g for g in table if table[g]["n"]]
    if ax is None:
        _, ax = plt.subplots(figsize=(1.5 + 1.6 * len(groups), 3.2))
    fig = ax.figure
    for k, (key, name, colour) in enumerate((("em_strict_if_once", "stopped at one search", "#6495ed"),
                                             ("em_strict_if_again", "searched again", "#ff8c00"))):
        xs = [i + (k - 0.5) * 0.38 for i in range(len(groups))]
        values = [table[g][key] or 0.0 for g in groups]
        ax.bar(xs, values, 0.38, color=colour, label=name)
        for x, g, value in zip(xs, groups, values):
            n = round(table[g]["n"] * (table[g]["searched_again"] if k else 1 - table[g]["searched_again"]))
            ax.text(x, value + 0.01, f"n={n}", ha="center", fontsize=7)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_ylabel("EM strict")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(title or "What a second search paid", fontsize=9)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- was search learned?


def search_learned_table(rows: Sequence[Mapping[str, Any]], search=None) -> dict[str, dict[str, Any]]:
    """Per data source (and 'all'): did the agent search better than searching the question?

    For every row, the evidence it read (stored in the row, or its queries re-run on `search`) is
    set against the raw question's top results on `search` (question-as-query BM25, what one
    retrieval of RAG reads). Keys: `evidence_recall` vs `question_recall` (a gold answer in the
    evidence; yes/no questions left out, `n_recall`), `gold_mean` vs `question_gold_mean` (gold
    passages retrieved per question) and `gold_all` vs `question_gold_all` (all of them);
    `rewritten_share` (first query is not the question, among rows that searched) and on those rows
    `rewritten_recall` vs `rewritten_question_recall` (the first search alone against the question);
    `second_search_share`, `em_strict`, `em_if_again` (>= 2 searches) and `em_if_stopped`.
    """
    if search is None:
        raise ValueError("search_learned_table needs the search backend the run used (the question is searched again)")
    asked: dict[tuple[str, tuple[str, ...]], tuple[list[str] | None, bool]] = {}
    measured = []
    for row in rows:
        report = row_evidence(row, search)
        key = (str(row.get("question", "")).strip(), tuple(row.get("answers") or []))
        if key not in asked:
            asked[key] = search_evidence(key[0], key[1], search)
        ids, hit = asked[key]
        gold = set(gold_passage_ids(row))
        measured.append((row, report, set(ids or ()) & gold, hit))
    groups: dict[str, list] = {}
    for item in measured:
        groups.setdefault(str(item[0].get("data_source")), []).append(item)
    out = {name: _search_learned(items) for name, items in sorted(groups.items())}
    out[ALL] = _search_learned(measured)
    return out


def _search_learned(items: Sequence[tuple]) -> dict[str, Any]:
    mean = functools.partial(_mean, empty=None)
    recall = [(r, q) for _, r, _, q in items if not r.yes_no]
    gold = [(r, q) for _, r, q, _ in items if r.gold_ids]
    searched = [(row, r, q) for row, r, _, q in items if r.searches]
    rewritten = [(r, q) for _, r, q in searched if r.first_query_rewritten and not r.yes_no]
    calls = [(int(row.get("search_calls", 0)), bool(row.get("exact_match"))) for row, *_ in items]
    return {
        "n": len(items),
        "n_recall": len(recall),
        "evidence_recall": mean(float(r.evidence_hit) for r, _ in recall),
        "question_recall": mean(float(q) for _, q in recall),
        "gold_mean": mean(r.gold_found for r, _ in gold),
        "question_gold_mean": mean(len(q) for _, q in gold),
        "gold_all": mean(float(r.gold_found == len(r.gold_ids)) for r, _ in gold),
        "question_gold_all": mean(float(len(q) == len(r.gold_ids)) for r, q in gold),
        "rewritten_share": mean(float(bool(r.first_query_rewritten)) for _, r, _ in searched),
        "rewritten_n": len(rewritten),
        "rewritten_recall": mean(float(r.searches[0].answer_hit) for r, _ in rewritten),
        "rewritten_question_recall": mean(float(q) for _, q in rewritten),
        "second_search_share": mean(float(c >= 2) for c, _ in calls),
        "em_strict": mean(float(em) for _, em in calls),
        "n_again": sum(c >= 2 for c, _ in calls),
        "em_if_again": mean(float(em) for c, em in calls if c >= 2),
        "em_if_stopped": mean(float(em) for c, em in calls if c < 2),
    }


SEARCH_LEARNED_COLUMNS = [
    ("n", "n"), ("evidence_recall", "evidence recall"), ("question_recall", "question as query"),
    ("gold_mean", "gold / question"), ("question_gold_mean", "gold (question as query)"),
    ("rewritten_share", "1st query rewritten"), ("rewritten_n", "n rewritten"),
    ("rewritten_recall", "recall rewritten"), ("rewritten_question_recall", "recall question (same)"),
    ("second_search_share", "≥2 searches"), ("em_if_again", "EM if searched again"),
    ("em_if_stopped", "EM if stopped"),
]


# The second search alone: how often, and the strict EM of the questions where the agent searched
# again against those where it stopped.
SECOND_SEARCH_COLUMNS = [
    ("n", "n"), ("em_strict", "EM strict"), ("second_search_share", "≥2 searches"), ("n_again", "n searched again"),
    ("em_if_again", "EM if searched again"), ("em_if_stopped", "EM if stopped"),
]


def format_search_learned(tables: Mapping[str, Mapping[str, Mapping[str, Any]]],
                          columns: Sequence[tuple[str, str]] = SEARCH_LEARNED_COLUMNS) -> str:
    """Markdown: one row per (run, data source) of `search_learned_table`, `columns` as (key, title);
    – where a group is empty."""
    def cell(value) -> str:
        return "–" if value is None else str(value) if isinstance(value, int) else f"{value:.3f}"

    header = ["run", "source"] + [title for _, title in columns]
    rows = [[label, source] + [cell(values.get(key)) for key, _ in columns]
            for label, groups in tables.items() for source, values in groups.items()]
    return str(Table(header, rows))


def search_learned_figure(tables: Mapping[str, Mapping[str, Mapping[str, Any]]], sources: Sequence[str] | None = None):
    """Six panels, one bar per run and data source; a black tick on a bar is what searching the
    question itself gives on the same questions. Search was learned where bars clear their ticks."""
    labels = list(tables)
    sources = list(sources or sorted({s for t in tables.values() for s in t if s != ALL}))
    panels = [  # value, its tick, the sample size to print on small groups, title
        ("evidence_recall", "question_recall", None, "gold answer in the evidence read"),
        ("gold_mean", "question_gold_mean", None, "gold passages retrieved / question"),
        ("rewritten_share", None, None, "first query ≠ question"),
        ("rewritten_recall", "rewritten_question_recall", "rewritten_n", "recall of rewritten first queries"),
        ("second_search_share", None, None, "share with ≥ 2 searches"),
        ("em_if_again", "em_if_stopped", "n_again", "EM strict if it searched again (tick: if it stopped)"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.4))
    width = 0.8 / max(len(labels), 1)
    for ax, (key, tick, size, title) in zip(axes.flat, panels):
        for i, label in enumerate(labels):
            for j, source in enumerate(sources):
                values = tables[label].get(source, {})
                x = j + (i - (len(labels) - 1) / 2) * width
                value = values.get(key)
                ax.bar(x, value or 0.0, width * 0.92, color=f"C{i}", label=label if j == 0 else None,
                       alpha=1.0 if value is not None else 0.2)
                if tick and values.get(tick) is not None:
                    ax.plot([x - width * 0.46, x + width * 0.46], [values[tick]] * 2, color="black", lw=2)
                if size and values.get(size) is not None:
                    ax.text(x, (value or 0.0) + 0.02, f"n={values[size]}", ha="center", fontsize=7)
        ax.set_xticks(range(len(sources)), sources, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, 2.1 if key == "gold_mean" else 1.1)
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].plot([], [], color="black", lw=2, label="question as query (BM25 top 3)")
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="upper right", fontsize=7, ncol=len(labels) + 1)
    fig.suptitle("Was search learned? (per data source)", fontsize=10, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


# the columns a reader compares first; the others open on demand
FIRST_COLUMNS = ("n", "em_strict", "em_lenient", "format_rate", "search_calls_mean")


class Table:
    """Rows of cells that show as an HTML table in a notebook and as Markdown when printed.

    The first `first` columns are the ones a reader compares; the HTML shows them and puts the
    full table under a "all columns" disclosure. Cells are escaped: labels come from file names.
    """

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[str]], first: int | None = None):
        self.header = [str(h) for h in header]
        self.rows = [[str(c) for c in row] for row in rows]
        self.first = len(self.header) if first is None else first

    def __str__(self) -> str:
        lines = ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _html(self, width: int) -> str:
        head = "".join(f"<th>{escape(h)}</th>" for h in self.header[:width])
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row[:width]) + "</tr>" for row in self.rows)
        return f'<table class="srt-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    def _repr_html_(self) -> str:
        if self.first >= len(self.header):
            return self._html(len(self.header))
        return (self._html(self.first) + f"<details><summary>all {len(self.header)} columns</summary>"
                + self._html(len(self.header)) + "</details>")


def _cell(value: Any, fmt: str) -> str:
    return fmt.format(int(value)) if fmt.endswith("d}") else fmt.format(float(value))


def summary_table(summaries: Mapping[str, Mapping[str, Mapping[str, Any]]], columns=COLUMNS,
                  first: Sequence[str] = FIRST_COLUMNS) -> Table:
    """One row per (run, data source); `summaries` is {label: summarise(rows)}. The columns in
    `first` come first (the HTML view shows them and keeps the rest on demand)."""
    columns = [c for c in columns if c[0] in first] + [c for c in columns if c[0] not in first]
    header = ["run", "source"] + [title for _, title, _ in columns]
    rows = [[str(label), str(source)] + [_cell(values.get(key, 0), fmt) for key, _, fmt in columns]
            for label, groups in summaries.items() for source, values in groups.items()]
    return Table(header, rows, first=2 + sum(1 for c in columns if c[0] in first))


def format_table(summaries: Mapping[str, Mapping[str, Mapping[str, Any]]], columns=COLUMNS) -> str:
    """Markdown: one row per (run, data source). `summaries` is {label: summarise(rows)}."""
    return str(summary_table(summaries, columns, first=[key for key, _, _ in columns]))


def comparison_table(comparison: Mapping[str, Mapping[str, Any]], labels: tuple[str, str]) -> Table:
    """Per source: strict EM of both runs and its change first; lenient EM, searches and the paired
    counts (questions only one run gets right) on demand."""
    a, b = labels
    header = ["source", f"EM strict {a}", f"EM strict {b}", "Δ strict", f"only {a} right", f"only {b} right",
              f"EM lenient {a}", f"EM lenient {b}", f"searches {a}", f"searches {b}"]
    rows = []
    for group, row in comparison.items():
        sa, sb = row[a], row[b]
        rows.append([group, f"{sa['em_strict']:.3f}", f"{sb['em_strict']:.3f}", f"{row['delta_em_strict']:+.3f}",
                     str(row["a_only"]), str(row["b_only"]), f"{sa['em_lenient']:.3f}", f"{sb['em_lenient']:.3f}",
                     f"{sa['search_calls_mean']:.2f}", f"{sb['search_calls_mean']:.2f}"])
    return Table(header, rows, first=6)


def format_comparison(comparison: Mapping[str, Mapping[str, Any]], labels: tuple[str, str]) -> str:
    return str(comparison_table(comparison, labels))


# --------------------------------------------------------------------------- plots


def multi_search_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]], key: str = "multi_search_share"):
    """Share of sampled trajectories with >= 2 searches per GRPO step, one line per run.

    `key="multi_search_share/hotpotqa"` draws one source of runs that logged it (mixed batches).
    An x marks a step whose gradient norm was not finite (before the engine dropped such steps,
    that step turned every weight into NaN).
    """
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for k, (label, rows) in enumerate(runs.items()):
        rows = [m for m in rows if m.get(key) is not None]
        steps = [m["step"] for m in rows]
        ax.plot(steps, [m[key] for m in rows], marker=".", ms=4, color=f"C{k}", label=label)
        for m in rows:
            norm = m.get("grad_norm")
            if isinstance(norm, float) and not math.isfinite(norm):
                ax.plot([m["step"]], [m[key]], "x", ms=9, mew=2, color=f"C{k}")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("share with ≥ 2 searches" + (f" ({key.split('/', 1)[1]})" if "/" in key else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def training_figure(metrics: Sequence[Mapping[str, Any]], title: str = "GRPO training"):
    """Reward/EM, format, search calls and sampler-trainer KL per step (a matplotlib Figure)."""
    steps = [m["step"] for m in metrics]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = [
        (axes[0, 0], [("reward_mean", "mean reward"), ("exact_match", "exact match")], "reward"),
        (axes[0, 1], [("valid_format_rate", "valid format"), ("degenerate_group_share", "degenerate groups")], "share"),
        (axes[1, 0], [("search_calls_mean", "searches / trajectory"), ("multi_search_share", "share ≥2 searches")], "searches"),
        (axes[1, 1], [("kl_sampler_trainer_k3", "sampler–trainer KL (k3)")], "KL"),
    ]
    for axis, series, ylabel in panels:
        for key, name in series:
            values = [m.get(key) for m in metrics]
            if any(v is not None for v in values):
                axis.plot(steps, [float("nan") if v is None else v for v in values], marker="o", ms=3, label=name)
        axis.set_xlabel("step")
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
        if axis.get_lines():
            axis.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_training(metrics: Sequence[Mapping[str, Any]], path: str | Path, title: str = "GRPO training") -> Path:
    """training_figure saved as a PNG."""
    return save_figure(training_figure(metrics, title), path)


def save_figure(fig, path: str | Path) -> Path:
    """Save a figure as a PNG (its folder made) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def search_share_figure(stages: Mapping[str, Sequence[Mapping[str, Any]]], key: str = "multi_search_share"):
    """The sampled share of trajectories with >= 2 searches per data source over the updates of a staged
    run, the stages one after another (a dotted line where the next stage starts from the last one)."""
    fig, axis = plt.subplots(figsize=(8, 3.6))
    sources = sorted({k.split("/", 1)[1] for rows in stages.values() for r in rows for k in r if k.startswith(key + "/")})
    offset = 0
    for name, rows in stages.items():
        steps = [offset + i + 1 for i in range(len(rows))]
        for j, source in enumerate(sources):
            axis.plot(steps, [r.get(f"{key}/{source}", float("nan")) for r in rows], color=f"C{j}",
                      label=source if offset == 0 else None)
        axis.text(offset + 0.5, 1.02, name, fontsize=8)
        offset += len(rows)
        axis.axvline(offset + 0.5, color="grey", linestyle=":")
    axis.set_xlabel("update (stages in order)")
    axis.set_ylabel("share with ≥ 2 searches")
    axis.set_ylim(0, 1.1)
    axis.legend(fontsize=8, loc="lower right")
    axis.set_title("Sampled trajectories that search again, per source")
    fig.tight_layout()
    return fig


def plot_eval(summaries: Mapping[str, Mapping[str, Mapping[str, Any]]], path: str | Path,
              key: str = "em_strict", title: str = "Strict exact match on the test split") -> Path:
    """Grouped bars: one group per data source, one bar per run."""
    labels = list(summaries)
    sources = sorted({s for groups in summaries.values() for s in groups}, key=lambda s: (s == ALL, s))
    width = 0.8 / max(len(labels), 1)
    fig, axis = plt.subplots(figsize=(max(6, 1.6 * len(sources) * len(labels) / 2), 4))
    for i, label in enumerate(labels):
        values = [summaries[label].get(s, {}).get(key, 0.0) for s in sources]
        positions = [j + i * width for j in range(len(sources))]
        bars = axis.bar(positions, values, width, label=label)
        axis.bar_label(bars, fmt="%.2f", fontsize=7)
    axis.set_xticks([j + width * (len(labels) - 1) / 2 for j in range(len(sources))], sources)
    axis.set_ylabel(key)
    axis.set_title(title)
    axis.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.analyse", description="Summarise or compare eval JSONL")
    parser.add_argument("runs", nargs="+", help="eval JSONL files, each PATH or LABEL=PATH (two: also a "
                                                    "side-by-side comparison)")
    parser.add_argument("--search-learned", action="store_true",
                        help="also the table of search against the question as query (needs the local index)")
    args = parser.parse_args(argv)
    paths = dict(run.split("=", 1) if "=" in run else (Path(run).stem, run) for run in args.runs)
    missing = [path for path in paths.values() if not Path(path).is_file()]
    if missing:
        parser.error(f"no such eval JSONL: {', '.join(missing)}")
    loaded = {label: read_jsonl(path) for label, path in paths.items()}
    print(format_table({label: summarise(rows) for label, rows in loaded.items()}))
    if args.search_learned:
        from helpers.search.local import LocalSearchClient  # the index loads only when asked for
        client = LocalSearchClient()
        print()
        print(format_search_learned({label: search_learned_table(rows, client) for label, rows in loaded.items()}))
    if len(loaded) == 2:
        (la, ra), (lb, rb) = loaded.items()
        print()
        print(format_comparison(compare(ra, rb, (la, lb)), (la, lb)))


if __name__ == "__main__":
    main()
