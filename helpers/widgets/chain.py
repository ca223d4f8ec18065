"""A synthetic multi-hop question next to its chain, and what one search on the question finds.

The view shows how the question was made (the seed passage is named; every later entity only by its
description) and, for the raw question as a query, the top passages with the chain's marked: the chain
passages missing from that list are what a second search has to find.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import ipywidgets as widgets

from helpers.multihop.verify import BM25_TOP_K
from helpers.widgets._html import esc

FOUND, MISSING = "#2e7d32", "#b35900"


def chain_html(row: Mapping[str, Any], top: Sequence[Any]) -> str:
    """HTML for one synthetic row (`helpers.data.load_rows("synthetic")`) and the passages (with `id`
    and `title`) that one search on its question returns, best first."""
    meta = row.get("metadata") or {}
    chain, ids = list(meta.get("chain") or []), list(meta.get("gold_passage_ids") or [])
    descriptions = list(meta.get("descriptions") or [])
    if not chain or len(chain) != len(ids):
        raise ValueError(f"row {row.get('id')!r} is not a synthetic chain row: its metadata needs `chain` and "
                         "`gold_passage_ids` of one length (load it with helpers.data.load_rows('synthetic'))")
    found = {passage.id for passage in top}
    hops = [f'<li><b>{esc(chain[0])}</b> <small>(named in the question: the search can start here)</small></li>']
    for step, title in enumerate(chain[1:]):
        named_as = descriptions[step] if step < len(descriptions) else "?"
        hops.append(f'<li>“{esc(named_as)}” <small>stands for</small> <b>{esc(title)}</b> '
                    f'<small>(hidden: the question never names it)</small></li>')
    results = "".join(
        f'<li style="color:{FOUND if p.id in ids else "inherit"}">{esc(p.title)}'
        f'{" ✓ chain passage " + str(ids.index(p.id) + 1) if p.id in ids else ""}</li>' for p in top)
    missing = [title for title, pid in zip(chain, ids) if pid not in found]
    verdict = (f'<div style="color:{MISSING}"><b>Not found by one search:</b> '
               f'{esc(", ".join(missing))}: a further search, for the entity the passage before it mentions, '
               f'has to find {"it" if len(missing) == 1 else "them"}.</div>' if missing else
               f'<div style="color:{FOUND}"><b>One search found every chain passage</b>: this question '
               'would teach nothing about searching again.</div>')
    answers = " | ".join(row.get("answers") or [])
    return (f'<div class="srt-chain"><div><b>{esc(row.get("question"))}</b></div>'
            f'<div>answer: {esc(answers)} · {esc(meta.get("hops", len(chain)))} hops · relation '
            f'{esc(meta.get("relation", "?"))}</div>'
            f'<div style="margin-top:6px">The chain:</div><ol>{"".join(hops)}</ol>'
            f'<div>One search on the question, top {len(top)}:</div><ol>{results or "<li>(nothing)</li>"}</ol>'
            f'{verdict}</div>')


class ChainExplorer(widgets.VBox):
    """A slider over synthetic rows; each shown with its chain and the raw question's top k."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], index, k: int = BM25_TOP_K, **kwargs: Any) -> None:
        if not rows:
            raise ValueError("no synthetic rows to show: build them with `python -m helpers setup`")
        self.rows, self.index, self.k = list(rows), index, k
        self.position = widgets.IntSlider(min=0, max=len(self.rows) - 1, description="question",
                                          continuous_update=False)
        self.view = widgets.HTML()
        self.position.observe(lambda _: self.show(), names="value")
        super().__init__([self.position, self.view], **kwargs)
        self.show()

    def show(self) -> None:
        row = self.rows[self.position.value]
        self.view.value = chain_html(row, self.index.search(row["question"], k=self.k))
