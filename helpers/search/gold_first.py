"""A search that hands a question's gold passages to the search that asks the question itself.

Two uses, one behaviour. Measuring: run a policy once with the index and once with this client, and the
difference is what better passages alone would buy (`benchmarks/reader_ceiling.py`). Training: a reading
curriculum, where on a share of the questions the first search (whose query is the question, as a trained
policy's nearly always is) comes back with every gold passage, so the group's rollouts differ only in how
they read them and the exact-match reward teaches reading. Any other query (a rewritten first query, a
second search) goes to the index as before, so the policy still meets the real search on every question.

A query "is the question" when the two are equal once case, punctuation and articles are ignored (how
the evaluation's "first query rewritten" reads a query). Which questions are handed over is fixed by a
hash of the question, not drawn per rollout, so every rollout of a question sees the same search.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

from helpers.evidence import gold_passage_ids
from helpers.reward import normalize_answer
from helpers.search.local import passage_to_item
from helpers.search.types import SearchResult


def handed_over(question: str, share: float) -> bool:
    """Whether `question` is among the `share` of questions whose gold passages are handed over
    (the same answer in every process and run: a hash of the normalised question, not a random draw)."""
    if share >= 1:
        return True
    digest = hashlib.sha256(normalize_answer(question).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


@dataclass
class GoldFirstSearch:
    """A search client: a query that is one of `gold`'s questions returns its gold passages; any other,
    `index`'s results.

    `fill`: the gold passages take the places of the index's lowest-ranked others among its top k, so a
    search returns k passages as the index's would (what training uses: the count of passages does not
    give the handed-over searches away); without it, the gold passages alone, at most k (what the reader
    ceiling measures). Handed-over searches count in the index's own `stats`, as its searches do."""

    index: object  # a LocalSearchClient: its topk, max_chars, stats and corpus
    gold: dict  # the question, normalised -> its gold passages (helpers.search.local.Passage)
    fill: bool = False
    name: str = "gold-first"
    handed: int = 0  # searches answered with gold passages
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)  # rollouts search in a pool

    @property
    def topk(self) -> int:
        return self.index.topk

    @property
    def stats(self):
        return self.index.stats

    def search(self, query: str) -> SearchResult:
        passages = self.gold.get(normalize_answer(str(query)))
        if passages is None:
            return self.index.search(query)
        gold = passages[: self.topk]
        if self.fill:
            try:
                ranked = self.index.index.search(str(query), k=self.topk)
            except Exception:  # never raise into a rollout: the gold passages alone, then
                ranked = []
            wanted = {p.id for p in gold}
            missing = [p for p in gold if p.id not in {r.id for r in ranked}]
            others = [r for r in ranked if r.id not in wanted]
            # the lowest-ranked others give way; the passages keep the index's order otherwise
            dropped = {r.id for r in others[-len(missing):]} if missing else set()
            gold = [r for r in ranked if r.id not in dropped] + missing
            gold = gold[: self.topk]
        with self._lock:
            self.handed += 1
        items = [passage_to_item(p, self.index.max_chars) for p in gold]
        result = SearchResult(ok=True, items=items, latency=0.0, status=200)
        self.index.stats.record(result)
        return result


def gold_first_search(examples, index, *, share: float = 1.0, fill: bool = False) -> GoldFirstSearch:
    """The client for these examples: the gold passages (looked up in `index`'s corpus) of the `share`
    of them `handed_over` picks. Questions without gold passages in the corpus are left to the index."""
    if not 0 <= share <= 1:
        raise ValueError(f"the share of questions handed their gold passages must be within [0, 1], got {share}")
    if not hasattr(index, "index") or not hasattr(index, "max_chars"):
        raise ValueError(f"handing gold passages over needs the local search backend (its corpus), not {index!r}: "
                         "set search_backend='local'")
    by_id = {p.id: p for p in index.index.passages}
    gold = {}
    for example in examples:
        if not handed_over(example.question, share):
            continue
        passages = [by_id[i] for i in gold_passage_ids(example) if i in by_id]
        if passages:
            gold[normalize_answer(example.question)] = passages
    return GoldFirstSearch(index, gold, fill=fill)
