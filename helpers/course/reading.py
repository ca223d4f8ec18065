"""Finding or reading? Where a search agent's wrong answers come from, drawn for notebook 10.

A wrong answer has one of two causes: the searches never showed the gold passages (a finding error),
or they did and the policy still answered wrong (a reading error). `helpers.evidence.finding_and_reading`
splits a policy's evaluation rows that way; `question_recall_at_k` says how much more BM25 returns for
the question as typed when it is allowed more passages.

    from helpers.evidence import finding_and_reading, question_recall_at_k
    from helpers.search.local import get_index
    tables = {label: finding_and_reading(rows) for label, rows in runs.items()}
    reading_figure(tables, question_recall_at_k(rows, get_index()))
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from helpers.analyse import COLUMN_INCHES, Table as Cells, policy_colour, search_learned_table
from helpers.course.policies import AGAIN_RUN
from helpers.course.recorded import eval_rows, run_folder
from helpers.search import SEARCH_TOPK

# the passages one search returns in every recorded run: the declared default
RECORDED_TOPK = SEARCH_TOPK
# One exact-match policy (seed 3 of the multi-search agent's recipe) evaluated on the test split with k
# passages a search, its observation budget 256 tokens a passage: k -> (run, label) of its rows.
TOPK_EVALS = {RECORDED_TOPK: (f"{AGAIN_RUN}/seeds", "seed3_exact"), 1: (f"{AGAIN_RUN}/topk", "top1"),
              2: (f"{AGAIN_RUN}/topk", "top2"), 5: (f"{AGAIN_RUN}/topk", "top5"), 8: (f"{AGAIN_RUN}/topk", "top8")}
# The same policy on the validation split, the split a policy is chosen on, at the two k that looked best
# on test.
TOPK_VALIDATION_EVALS = {2: (f"{AGAIN_RUN}/topk", "val_top2"), 3: (f"{AGAIN_RUN}/topk", "val_top3")}


def reading_table(tables: Mapping[str, Mapping[str, Mapping[str, Any]]], sources=("hotpotqa", "nq")) -> Cells:
    """One row per policy and source: questions, share with every gold passage read, EM there and elsewhere."""
    rows = []
    for label, table in tables.items():
        for source in sources:
            cell = table.get(source)
            if cell is None:
                continue
            rows.append([label, source, str(cell["n"]), f"{cell['found']:.0%}",
                         "–" if cell["em_found"] is None else f"{cell['em_found']:.3f}",
                         "–" if cell["em_missed"] is None else f"{cell['em_missed']:.3f}"])
    return Cells(["policy", "source", "n", "gold read", "EM: gold read", "EM: gold not read"], rows)


def recorded_topk_reading(evals: Mapping[int, tuple[str, str]] = TOPK_EVALS) -> dict[int, dict[str, Any]]:
    """Per k, `finding_and_reading` of the recorded evaluation that returned k passages a search. Each
    evaluation's config must say it searched with that k (an older one without the field searched with
    the default), so a mislabelled file is an error, not a wrong curve."""
    from helpers.evidence import finding_and_reading

    return {k: finding_and_reading(_topk_rows(k, run, label)) for k, (run, label) in sorted(evals.items())}


def topk_learned_tables(search, evals: Mapping[int, tuple[str, str]] = TOPK_EVALS) -> dict[str, dict[str, Any]]:
    """Per k ("k = 2"), the `search_learned_table` of the evaluation that returned k passages a search:
    what `helpers.course.seeds.verdict_table` reads the search-again rule from. Checked like
    `recorded_topk_reading`."""
    return {f"k = {k}": search_learned_table(_topk_rows(k, run, label), search)
            for k, (run, label) in sorted(evals.items())}


def _topk_rows(k: int, run: str, label: str) -> list[dict[str, Any]]:
    """The rows of one recorded evaluation, after checking its config searched with k passages."""
    config = json.loads((run_folder(run) / "eval" / f"{label}.config.json").read_text())
    searched = config.get("eval", {}).get("search_topk") or RECORDED_TOPK
    if searched != k:
        raise ValueError(f"{run}/eval/{label} searched with {searched} passages, not {k}")
    return eval_rows(label, run)


def constant_reading_em(by_k: Mapping[int, Mapping[str, Mapping[str, Any]]], reference: int,
                        source: str) -> dict[int, float | None]:
    """Per k, the EM `source` would have if only finding changed with k: the share found at k read at
    the reference k's EM where found, the rest at its EM where missed (None where the reference has no
    EM for a side that k needs). Set against the measured EM, the gap is what reading lost or gained."""
    ref = by_k[reference][source]
    out: dict[int, float | None] = {}
    for k, table in sorted(by_k.items()):
        found = table[source]["found"]
        parts = [(found, ref["em_found"]), (1.0 - found, ref["em_missed"])]
        out[k] = None if any(share > 0 and em is None for share, em in parts) else \
            sum(share * em for share, em in parts if share > 0)
    return out


def topk_figure(by_k: Mapping[int, Mapping[str, Mapping[str, Any]]], sources=("hotpotqa", "nq")):
    """One panel per source, over k (passages a search returns): the share of questions whose gold
    passages the searches returned, EM where they did, and EM overall."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sources), figsize=(COLUMN_INCHES, 3.2), squeeze=False, layout="constrained")
    ks = sorted(by_k)
    lines = (("found", "gold passages returned", "-", "o"), ("em_found", "EM where returned", "-", "s"),
             ("em", "EM, all questions", "--", "^"))
    for ax, source in zip(axes[0], sources):
        for key, label, style, marker in lines:
            values = [by_k[k][source][key] for k in ks]
            ax.plot(ks, [float("nan") if v is None else v for v in values], ls=style, marker=marker, label=label)
        ax.set_xticks(ks)
        ax.set_ylim(0, 1)
        ax.set_xlabel("passages a search returns (k)")
        ax.set_title(source, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("One policy, more passages a search: it finds more and reads worse", fontsize=10)
    return fig


def reading_figure(tables: Mapping[str, Mapping[str, Mapping[str, Any]]],
                   recall_at_k: Mapping[str, Mapping[int, float]] | None = None, sources=("hotpotqa", "nq")):
    """Left, one panel per source: each policy's EM where its searches returned every gold passage
    (filled) and where they did not (hollow), the share found under the bars. Right (with `recall_at_k`):
    the share of questions whose gold passages BM25 returns in its top k for the question as typed,
    with the recorded runs' k marked."""
    import matplotlib.pyplot as plt

    panels = len(sources) + (recall_at_k is not None)
    fig, axes = plt.subplots(1, panels, figsize=(COLUMN_INCHES, 3.8), squeeze=False, layout="constrained")
    labels = list(tables)
    for ax, source in zip(axes[0], sources):
        for x, label in enumerate(labels):
            cell = tables[label].get(source)
            if cell is None:
                continue
            colour = policy_colour(label.rsplit("/", 1)[-1])
            ax.bar(x - 0.2, cell["em_found"] or 0.0, 0.38, color=colour)
            ax.bar(x + 0.2, cell["em_missed"] or 0.0, 0.38, color="white", edgecolor=colour, lw=1.5)
        ax.set_xticks(range(len(labels)), [f"{label.rsplit('/', 1)[-1]}\n{tables[label][source]['found']:.0%} read"
                                           if source in tables[label] else label for label in labels], fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_ylabel("strict EM")
        ax.set_title(f"{source}: gold read (filled) / not read (hollow)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    if recall_at_k is not None:
        ax = axes[0][-1]
        for source in sources:
            curve = recall_at_k.get(source)
            if curve:
                ax.plot(list(curve), list(curve.values()), marker="o", label=source)
        ax.axvline(RECORDED_TOPK, color="#555", ls="--", lw=1)
        ax.text(RECORDED_TOPK, 0.02, f" top {RECORDED_TOPK}: the runs' search", fontsize=8, color="#555")
        ax.set_ylim(0, 1)
        ax.set_xlabel("passages a search returns (k)")
        ax.set_ylabel("every gold passage in BM25's top k")
        ax.set_title("the question as the query", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("Finding or reading: where the wrong answers come from", fontsize=10)
    return fig


# The multi-search policy at two passages a search, evaluated on the test split's 100 HotpotQA questions
# twice: with the index (its recorded test rows) and with both gold passages handed to its first search
# (benchmarks/reader_ceiling.py on a GPU): run -> labels of its rows.
GOLD_IN_HAND = ("h200_replicas/gain5ns-k2_41", "test", "gold_first")


def recorded_gold_in_hand(evals: tuple[str, str, str] = GOLD_IN_HAND) -> dict[str, dict[str, Any]]:
    """`helpers.evidence.reader_summary` of one policy on the same questions with the index's passages
    ("BM25's passages") and with the gold passages handed to its first search ("gold handed over").
    The index's rows are cut to the handed-over run's questions; a question of that run missing from
    them is an error, not a smaller sample."""
    from helpers.evidence import reader_summary

    run, index_label, gold_label = evals
    gold = eval_rows(gold_label, run)
    by_id = {str(row["id"]): row for row in eval_rows(index_label, run)}
    missing = [str(row["id"]) for row in gold if str(row["id"]) not in by_id]
    if missing:
        raise ValueError(f"{run}/eval/{index_label} lacks {len(missing)} of the questions of {gold_label} "
                         f"(first: {missing[0]}): the two runs must be of the same questions")
    return {"BM25's passages": reader_summary([by_id[str(row["id"])] for row in gold]),
            "gold handed over": reader_summary(gold)}


def gold_in_hand_figure(summaries: Mapping[str, Mapping[str, Any]]):
    """Bars per measure, one per run of `recorded_gold_in_hand`: EM, the share with every gold passage
    read, EM on the yes/no questions and how often it said "yes" there, the share that searched twice."""
    import matplotlib.pyplot as plt

    measures = (("em", "EM"), ("read", "every gold passage read"), ("em_yes_no", "EM, yes/no questions"),
                ("yes", '"yes" on yes/no questions'), ("two_searches", "searched twice"))

    def value(s: Mapping[str, Any], key: str) -> float:
        if key == "read":
            return s["every_gold_read"] / max(s["questions"], 1)
        if key == "yes":
            return s["said_yes"] / max(s["yes_no"], 1)
        return s[key] or 0.0

    fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 3.4), layout="constrained")
    width = 0.8 / max(len(summaries), 1)
    for i, (label, s) in enumerate(summaries.items()):
        xs = [m + (i - (len(summaries) - 1) / 2) * width for m in range(len(measures))]
        bars = ax.bar(xs, [value(s, key) for key, _ in measures], width, label=f"{label} ({s['questions']} questions)",
                      color=("#9aa5b1", "#d9822b")[i % 2])
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(range(len(measures)), [name for _, name in measures], fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("The same policy and questions, the gold passages handed to its first search", fontsize=10)
    return fig
