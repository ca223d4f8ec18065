"""Did the agent find the evidence? Retrieval measured on trajectories, and a reward that pays for it.

Exact match says whether the final answer was right; it says nothing about the searches that led
there. Three measures look at the searches themselves:

- **evidence recall**: a gold answer appears (normalised as the reward normalises answers) in the
  union of the observations the agent read. Compare it with the same test on the top 3 passages of
  the raw question (question-as-query retrieval): an agent whose evidence recall is no higher only
  reads better, it does not search better.
- **gold passages retrieved**: how many of the question's gold passages (HotpotQA has two, NQ
  one; ``metadata["gold_passage_ids"]`` of the data rows) were among the items it read.
- **first query rewritten**: the first query is not the question itself (after normalisation).

Reward terms for training, in the spirit of StepSearch's per-search reward: each search earns
``gain`` times the share of the gold passages it retrieved *for the first time*, and loses
``redundancy`` when it brought no passage the trajectory had not already read. Summed over a
trajectory the gains are the gold recall of everything it read, so in GRPO (one advantage per
trajectory) this pays for reaching the gold passages, by whatever queries, and charges for searches
that repeat themselves. A third term, in the spirit of s3's gain over plain RAG, pays
``beyond_rag`` times the gold recall the trajectory reached *above* the raw question's own top-k
(question-as-query retrieval): only searching that finds what the question alone does not find earns
it — a first query better than the question, or a second search for the bridge entity. The terms are small next to exact match (by default finding every gold
passage is worth a tenth of a right answer) and apply only to a trajectory that ended with a valid
answer, so no amount of searching outweighs answering right, nor pays for never answering.

Gold passage ids are training-time information: they enter rewards and analysis, never a prompt or
an observation. Evaluation rows carry them only so that analysis can score retrieval afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

from helpers.data import SPLITS, load_rows
from helpers.reward import GroupRewards, contains_answer, normalize_answer, outcome_reward, register_reward
from helpers.search import format_results

YES_NO = frozenset({"yes", "no"})


# --------------------------------------------------------------------------- questions and queries


def is_yes_no(answers: Sequence[str]) -> bool:
    """A comparison question: "yes"/"no" is never written in the evidence as the answer is."""
    return bool(answers) and all(normalize_answer(a) in YES_NO for a in answers)


def query_differs(query: str | None, question: str) -> bool | None:
    """The query is not the question (case, punctuation and articles ignored); None: no query."""
    if query is None:
        return None
    return normalize_answer(query) != normalize_answer(question)


# --------------------------------------------------------------------------- gold passages


@lru_cache(maxsize=1)
def _gold_index() -> dict[str, tuple[str, ...]]:
    """Question id -> gold passage ids, over every prepared split (empty when none is prepared)."""
    index: dict[str, tuple[str, ...]] = {}
    for split in SPLITS:
        try:
            rows = load_rows(split)
        except FileNotFoundError:
            continue
        for row in rows:
            ids = (row.get("metadata") or {}).get("gold_passage_ids")
            if ids:
                index[str(row["id"])] = tuple(str(i) for i in ids)
    return index


def gold_passage_ids(example: Any) -> list[str]:
    """The gold passage ids of an example, a data row or an evaluation row ([] when unknown).

    Read from its ``metadata`` (or an evaluation row's ``gold_passage_ids``); failing that, looked
    up by question id in the prepared splits.
    """
    if isinstance(example, Mapping):
        ids = example.get("gold_passage_ids")
        if ids is None:
            ids = (example.get("metadata") or {}).get("gold_passage_ids")
        key = example.get("id")
    else:
        ids = (getattr(example, "metadata", None) or {}).get("gold_passage_ids")
        key = getattr(example, "id", None)
    if ids is None and key is not None:
        ids = _gold_index().get(str(key))
    return [str(i) for i in ids or ()]


# --------------------------------------------------------------------------- one trajectory


@dataclass
class SearchEvidence:
    """One search as retrieval: what it showed and what it added to what was already read."""

    query: str
    passage_ids: list[str] | None  # None: it showed passages, but the backend does not name them
    answer_hit: bool  # its observation holds a gold answer
    new_passages: int  # passages not read in an earlier search of the trajectory
    new_gold: list[str]  # gold passages read here for the first time

    @property
    def redundant(self) -> bool:
        """Brought nothing new: every passage was read before, or none came back (failed, empty)."""
        return self.passage_ids is not None and self.new_passages == 0


@dataclass
class EvidenceReport:
    """Retrieval of one trajectory (or evaluation row) against its question's gold."""

    question: str
    answers: list[str]
    gold_ids: list[str]
    searches: list[SearchEvidence] = field(default_factory=list)

    @property
    def yes_no(self) -> bool:
        return is_yes_no(self.answers)

    @property
    def evidence_hit(self) -> bool | None:
        """A gold answer in the union of the evidence read; None for yes/no questions."""
        return None if self.yes_no else any(s.answer_hit for s in self.searches)

    @property
    def gold_found(self) -> int:
        return sum(len(s.new_gold) for s in self.searches)

    @property
    def gold_recall(self) -> float | None:
        """Share of the gold passages read; None when the question has none on record."""
        return self.gold_found / len(self.gold_ids) if self.gold_ids else None

    @property
    def first_query(self) -> str | None:
        return self.searches[0].query if self.searches else None

    @property
    def first_query_rewritten(self) -> bool | None:
        return query_differs(self.first_query, self.question)

    @property
    def redundant_searches(self) -> int:
        return sum(s.redundant for s in self.searches)


def build_report(question: str, answers: Sequence[str], gold_ids: Sequence[str],
                 searches: Sequence[tuple[str, Sequence[str] | None, bool]]) -> EvidenceReport:
    """The report from (query, passage ids read, observation holds a gold answer) per search, in order.

    Passage ids None: the search showed items that carry no id (an online backend); it then counts
    as neither new nor redundant.
    """
    report = EvidenceReport(question, list(answers), list(gold_ids))
    gold = set(report.gold_ids)
    seen: set[str] = set()
    for query, ids, hit in searches:
        ids = None if ids is None else [str(i) for i in ids]
        fresh = [i for i in dict.fromkeys(ids or ()) if i not in seen]
        report.searches.append(SearchEvidence(query, ids, bool(hit), len(fresh), [i for i in fresh if i in gold]))
        seen.update(fresh)
    return report


def _read_ids(record: Any) -> list[str] | None:
    """Ids of the passages a search record's observation showed; None when they have no ids."""
    if not record.fitted or record.items_kept == 0:
        return []
    return list(record.passage_ids) if record.passage_ids else None


def trajectory_evidence(trajectory: Any, gold_ids: Sequence[str] | None = None) -> EvidenceReport:
    """Retrieval of a rollout trajectory, from its search records (what the model read)."""
    example = trajectory.example
    gold = gold_passage_ids(example) if gold_ids is None else list(gold_ids)
    searches = [(record.query, _read_ids(record), record.fitted and contains_answer(record.content, example.answers))
                for record in trajectory.searches]
    return build_report(example.question, example.answers, gold, searches)


def evidence_fields(trajectory: Any) -> dict[str, Any]:
    """What an evaluation row stores so that retrieval can be scored later (aligned with `queries`)."""
    report = trajectory_evidence(trajectory)
    return {
        "evidence_ids": [search.passage_ids for search in report.searches],
        "evidence_hits": [search.answer_hit for search in report.searches],
        "gold_passage_ids": report.gold_ids,
    }


def search_evidence(query: str, answers: Sequence[str], search: Any) -> tuple[list[str] | None, bool]:
    """(passage ids, gold answer in the observation) of one query re-run on `search`.

    The whole result, as formatted for the model; the local index is deterministic, so this is
    what the agent read unless its observation budget cut items (counted in `truncated_observations`).
    """
    result = search.search(query)
    items = result.items if result.ok else []
    ids = [item.passage_id for item in items if getattr(item, "passage_id", None)]
    return (ids if len(ids) == len(items) else None), contains_answer(format_results(result), answers)


def row_evidence(row: Mapping[str, Any], search: Any = None) -> EvidenceReport:
    """Retrieval of one evaluation row: from its stored evidence fields, or by re-running its queries.

    Rows written before evaluation stored `evidence_ids` / `evidence_hits` need `search` (use the
    backend the run used; the local index gives the same results again).
    """
    queries = list(row.get("queries") or [])
    answers = list(row.get("answers") or [])
    ids, hits = row.get("evidence_ids"), row.get("evidence_hits")
    if ids is None or hits is None:
        if search is None and queries:
            raise ValueError(f"row {row.get('id')!r} has no stored evidence; pass `search` to re-run its queries")
        rerun = [search_evidence(q, answers, search) for q in queries]
        ids, hits = [r[0] for r in rerun], [r[1] for r in rerun]
    return build_report(str(row.get("question", "")), answers, gold_passage_ids(row), list(zip(queries, ids, hits)))


# --------------------------------------------------------------------------- finding or reading


def all_gold_read(row: Mapping[str, Any]) -> bool | None:
    """Were every gold passage among the passages the row's searches returned? None when unknown."""
    gold, read = gold_passage_ids(row), row.get("evidence_ids")
    if not gold or read is None or any(ids is None for ids in read):
        return None
    return set(gold) <= {passage for ids in read for passage in ids}


def finding_and_reading(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per data source and over "all": the share of questions whose gold passages the policy's searches
    all returned (`found`), and its strict EM where they did (`em_found`) and where they did not
    (`em_missed`). A question missed with its evidence read is a reading error; one missed without it
    a finding error. Rows without gold passages or stored evidence ids are left out (`n` counts the rest)."""
    groups: dict[str, list[tuple[bool, bool]]] = {}
    for row in rows:
        found = all_gold_read(row)
        if found is None:
            continue
        item = (found, bool(row.get("exact_match")))
        groups.setdefault(str(row.get("data_source", "")), []).append(item)
        groups.setdefault("all", []).append(item)

    def em(items: list[tuple[bool, bool]]) -> float | None:
        return sum(right for _, right in items) / len(items) if items else None

    table = {}
    for source, items in groups.items():
        hit = [item for item in items if item[0]]
        miss = [item for item in items if not item[0]]
        table[source] = {"n": len(items), "found": len(hit) / len(items), "em_found": em(hit),
                         "em_missed": em(miss), "em": em(items)}
    return table


def reader_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How a policy read, over evaluation rows: strict and lenient EM, the share that searched twice, how
    many questions ended with every gold passage read and EM on those and on the rest (a row whose gold
    passages or evidence are unknown counts with the rest), and on the yes/no questions EM and how often
    the answer was "yes". Run on the same questions with the index's passages and with the gold passages
    handed over (`helpers.search.gold_first`), the difference is what better evidence alone buys."""
    def em(part) -> float | None:
        return round(sum(bool(r["exact_match"]) for r in part) / len(part), 3) if part else None

    def share(count: int) -> float:
        return round(count / max(len(rows), 1), 3)

    in_hand = [r for r in rows if all_gold_read(r) is True]
    yes_no = [r for r in rows if is_yes_no(r["answers"])]
    return {"questions": len(rows), "em": em(rows), "lenient_em": share(sum(bool(r["lenient_match"]) for r in rows)),
            "two_searches": share(sum(r["search_calls"] >= 2 for r in rows)),
            "every_gold_read": len(in_hand), "em_every_gold_read": em(in_hand),
            "em_rest": em([r for r in rows if all_gold_read(r) is not True]),
            "yes_no": len(yes_no), "em_yes_no": em(yes_no),
            "said_yes": sum(normalize_answer(str(r.get("answer") or "")) == "yes" for r in yes_no)}


def question_recall_at_k(rows: Sequence[Mapping[str, Any]], index: Any,
                         ks: Sequence[int] = (1, 3, 5, 10)) -> dict[str, dict[int, float]]:
    """Per data source: the share of questions whose gold passages are all in BM25's top k for the
    question as typed (`index.search(question, k)` returning passages with an `id`, as
    `helpers.search.local.LocalIndex` does), for each k in `ks`. How much a deeper search would find
    with no query writing at all."""
    counts: dict[str, list[int]] = {}
    totals: dict[str, int] = {}
    ks = sorted(set(ks))
    for row in rows:
        gold = set(gold_passage_ids(row))
        if not gold:
            continue
        ranked = [passage.id for passage in index.search(str(row["question"]), k=ks[-1])]
        source = str(row.get("data_source", ""))
        hits = counts.setdefault(source, [0] * len(ks))
        for i, k in enumerate(ks):
            hits[i] += gold <= set(ranked[:k])
        totals[source] = totals.get(source, 0) + 1
    return {source: {k: hits[i] / totals[source] for i, k in enumerate(ks)} for source, hits in counts.items()}


# --------------------------------------------------------------------------- reward terms


@dataclass(frozen=True)
class EvidenceRewardConfig:
    """Weights of the retrieval terms, next to exact match's 1.0 for a right answer."""

    gain: float = 0.1  # all gold passages newly retrieved (spread over the searches that found them)
    redundancy: float = 0.05  # per search that brought no passage not read before
    beyond_rag: float = 0.0  # gold recall above the question-as-query top-k's (0: off)

    def __post_init__(self) -> None:
        if min(self.gain, self.redundancy, self.beyond_rag) < 0:
            raise ValueError(f"gain, redundancy and beyond_rag are weights >= 0, got {self.gain}, "
                             f"{self.redundancy} and {self.beyond_rag}")


@dataclass
class EvidenceTerms:
    base: float  # the outcome reward (exact match / format)
    gain: float
    redundancy: float
    reward: float  # base + gain + beyond_rag - redundancy (terms only with a valid format)
    gold_found: int
    redundant_searches: int
    beyond_rag: float = 0.0


def rag_recall(question: str, gold_ids: Sequence[str], search: Any) -> float | None:
    """Gold recall of the raw question as the only query (plain RAG's top-k on `search`); None when
    the question has no gold on record or the backend does not name its passages."""
    if not gold_ids:
        return None
    ids, _ = search_evidence(question, [], search)
    return None if ids is None else len(set(ids) & set(gold_ids)) / len(set(gold_ids))


def evidence_terms(trajectory: Any, config: EvidenceRewardConfig = EvidenceRewardConfig(),
                   gold_ids: Sequence[str] | None = None, baseline: float | None = None) -> EvidenceTerms:
    """Outcome reward plus the retrieval terms of one finished trajectory whose answer was checked;
    `baseline` is the question-as-query gold recall (`rag_recall`) the `beyond_rag` term pays above."""
    report = trajectory_evidence(trajectory, gold_ids)
    # from the answer check's facts: a reward is computed before the trajectory's reward is written
    base = outcome_reward(trajectory.valid_format, trajectory.exact_match)
    gain = redundancy = beyond = 0.0
    if trajectory.valid_format:
        gains = [len(s.new_gold) / len(report.gold_ids) for s in report.searches] if report.gold_ids else []
        gain = config.gain * sum(gains)
        redundancy = config.redundancy * report.redundant_searches
        if config.beyond_rag and baseline is not None and report.gold_recall is not None:
            beyond = config.beyond_rag * max(0.0, report.gold_recall - baseline)
    return EvidenceTerms(base, gain, redundancy, base + gain + beyond - redundancy, report.gold_found,
                         report.redundant_searches, beyond)


def evidence_reward(gain: float = EvidenceRewardConfig.gain,
                    redundancy: float = EvidenceRewardConfig.redundancy,
                    beyond_rag: float = EvidenceRewardConfig.beyond_rag, search: Any = None):
    """The reward registered as "evidence": exact match plus the retrieval terms, one group at a time.

        TrainConfig(reward="evidence", reward_options={"gain": 0.1, "redundancy": 0.05, "beyond_rag": 0.3})

    `beyond_rag` > 0 re-runs each question once as its own query on `search` (default: the local
    index, deterministic, top 3 as in training) for the baseline. Each step logs the terms' means:
    `outcome` (exact match / format), `evidence_gain`, `beyond_rag`, `redundancy`, `gold_found` and
    `redundant_searches` per trajectory.
    """
    config = EvidenceRewardConfig(gain, redundancy, beyond_rag)
    baselines: dict[str, float | None] = {}  # question id -> question-as-query gold recall

    def baseline_of(example, gold) -> float | None:
        nonlocal search
        if not config.beyond_rag:
            return None
        if example.id not in baselines:
            if search is None:
                from helpers.search.local import LocalSearchClient

                search = LocalSearchClient()
            baselines[example.id] = rag_recall(example.question, gold, search)
        return baselines[example.id]

    def reward(group) -> GroupRewards:
        gold = gold_passage_ids(group.example)
        baseline = baseline_of(group.example, gold)
        terms = [evidence_terms(t, config, gold, baseline) for t in group.trajectories]
        return GroupRewards([t.reward for t in terms], {
            "outcome": [t.base for t in terms],
            "evidence_gain": [t.gain for t in terms],
            "beyond_rag": [t.beyond_rag for t in terms],
            "redundancy": [t.redundancy for t in terms],
            "gold_found": [float(t.gold_found) for t in terms],
            "redundant_searches": [float(t.redundant_searches) for t in terms],
        })

    return reward


register_reward("evidence", evidence_reward)
