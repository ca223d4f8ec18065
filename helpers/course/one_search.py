"""How many questions does one search on the question itself already settle?

A question whose gold passages all come back when the raw question is the query teaches a search agent
nothing about searching again: the first search has everything, and GRPO pays the trajectory that
answers after it. Measured per data source on the course's splits, this is why the training mix has a
third source, the synthetic multi-hop questions of `helpers.multihop` (Perplexity's post: a chain of
entities turned into a question that names only the first), built so that the share is zero.

The rule is `helpers.multihop.verify.needs_second_search`, the check the synthetic split is built with:
the question's BM25 top 3 holds every gold passage (for a synthetic question, every chain passage).

    from helpers.course.one_search import one_search_shares, one_search_figure
    shares = one_search_shares({"nq": nq_rows, "hotpotqa": hotpot_rows, "synthetic": synthetic_rows}, index)
    one_search_figure(shares)
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from helpers.analyse import COLUMN_INCHES, OTHER_COLOURS
from helpers.evidence import gold_passage_ids
from helpers.multihop.verify import BM25_TOP_K, needs_second_search


def settled_by_one_search(row: Mapping[str, Any], index, k: int = BM25_TOP_K) -> bool:
    """True when the raw question's top k holds every gold passage of the row. A row without gold
    passages cannot be judged and is an error: it says nothing about what one search finds."""
    gold = gold_passage_ids(row)
    if not gold:
        raise ValueError(f"row {row.get('id')!r} has no gold passage ids in its metadata: nothing to compare "
                         "the search with (load rows with helpers.data.load_rows, which keeps the metadata)")
    return not needs_second_search({"question": row["question"], "passage_ids": gold}, index, k=k)


def one_search_shares(rows_by_source: Mapping[str, Sequence[Mapping[str, Any]]], index,
                      k: int = BM25_TOP_K) -> dict[str, dict[str, float]]:
    """Per source: its questions (`n`), those one search settles (`settled`) and their `share`. Rows
    without gold passages are left out and counted (`unjudged`)."""
    shares = {}
    for source, rows in rows_by_source.items():
        judged = [row for row in rows if gold_passage_ids(row)]
        settled = sum(settled_by_one_search(row, index, k) for row in judged)
        shares[source] = {"n": len(judged), "settled": settled, "share": settled / len(judged) if judged else 0.0,
                          "unjudged": len(rows) - len(judged)}
    return shares


def one_search_figure(shares: Mapping[str, Mapping[str, float]], k: int = BM25_TOP_K):
    """One bar per source: the share of its questions whose gold passages all come back from one
    search on the question itself."""
    import matplotlib.pyplot as plt

    sources = list(shares)
    values = [100 * shares[s]["share"] for s in sources]
    fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 3.0), layout="constrained")
    bars = ax.bar(sources, values, color=[OTHER_COLOURS[i % len(OTHER_COLOURS)] for i in range(len(sources))])
    for bar, source in zip(bars, sources):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 1.5,
                f"{bar.get_height():.0f}% of {shares[source]['n']:,}", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, 110)
    ax.set_ylabel("questions (%)")
    ax.set_title(f"One search on the question returns every gold passage (BM25 top {k})", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return fig
