"""The scripted teacher: demonstrations of the search-then-answer format for the SFT warm start.

The base model rarely calls the tool and almost never ends with an `Answer:` line, so GRPO
would start from groups whose rewards are all -0.1 (no signal). A scripted teacher fixes the
format first:

1. search the question with the local index;
2. if no gold answer string appears in the evidence, search again with a query the policy could
   have written itself: a name from the evidence it was shown (the bridge of a two-hop question),
   a name from the question, or the question plus a result's title. The teacher only gets to
   choose, from those, the first one that finds the answer;
3. answer `Answer: <the gold string, spelled as the evidence spells it>`.

Questions whose answer never shows up are skipped, so the teacher never answers without
evidence. Every observation is fitted by the rollout's own fitter (`helpers.rollout.fit_observation`),
so a demonstration shows exactly the items a GRPO rollout would, and every "is the answer in the
evidence?" is the reward's matcher (`helpers.reward.find_answer_in`). The SFT run that trains on the
demonstrations is `helpers.sft`.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from typing import Any, Sequence

from tqdm.auto import tqdm

from helpers.data import load_rows
from helpers.evidence import gold_passage_ids
from helpers.protocol import build_messages, tool_message
from helpers.reward import contains_answer, find_answer_in, normalize_answer
from helpers.rollout import observe_search, search_call_message
from helpers.search import format_results
from helpers.search.local import TOKEN_PATTERN, analyze, get_index
from helpers.trajectory import RolloutConfig


@dataclass
class TeacherTrajectory:
    """One scripted demonstration: the chat messages plus what the teacher did."""

    example: Any
    messages: list[dict[str, Any]]
    queries: list[str]
    answer: str
    answer_search: int = 0  # which search's evidence the answer is taken from (0: the first)
    rewritten: bool = False  # the first query is keywords of the question, not the question
    decomposed: bool = False  # searched again although the first evidence already held the answer

    @property
    def search_calls(self) -> int:
        return len(self.queries)


def _search_turn(query: str, call_id: str, observation: str) -> list[dict[str, Any]]:
    """The assistant's search call and the tool message that answers it."""
    return [search_call_message(query, call_id), tool_message(call_id, observation)]


_NAME = re.compile(r"[A-Z][\w'’\-]*(?:\s+(?:(?:of|the|de|for)\s+)?[A-Z0-9][\w'’\-]*)*")
_NOT_NAMES = frozenset("a an the and of for in on to at by from with as or but if is are was were did does do what who "
                       "whom whose which when where how why it its he she they his her their there this that these those "
                       "all some many most after before during since while however also title content source url "
                       "wikipedia".split())


def names_in(text: str) -> list[str]:
    """Capitalised spans ('Fueled by Ramen', 'Sam Snead'), in order, without leading function words."""
    out = []
    for match in _NAME.finditer(text):
        words = match.group(0).split()
        while words and (words[0].lower() in _NOT_NAMES or words[0][0].isdigit()):
            words.pop(0)
        name = " ".join(words)
        if len(name) >= 3 and name.lower() not in _NOT_NAMES:
            out.append(name)
    return list(dict.fromkeys(out))


def spells_answer(query: str, answers: Sequence[str]) -> bool:
    """Does the query contain a gold answer (normalised)? The policy cannot know it, so it may not."""
    text = normalize_answer(query)
    return any(gold and gold in text for gold in map(normalize_answer, answers))


def reachable_queries(question: str, items, answers: Sequence[str]) -> list[str]:
    """Second queries the policy could write from what it has read, in the teacher's order.

    Names from the evidence's text (not already in the question), then names in the question,
    then the question plus each title. Nothing that spells a gold answer: the policy does not know it.
    """
    asked = normalize_answer(question)
    titles = [item.title.strip() for item in items]
    evidence = [n for item in items for n in names_in(item.content)
                if normalize_answer(n) not in asked and n not in titles]
    candidates = evidence + names_in(question) + [f"{question} {t}" for t in titles]
    return [q for q in dict.fromkeys(candidates) if q != question and not spells_answer(q, answers)]


REWRITE_MODES = ("never", "gain", "no_loss")
# the question's form, not its topic; rare in encyclopaedic text, so idf alone would keep them
_QUESTION_WORDS = frozenset("what who whom whose which when where why how do does did is are was were be been being "
                            "has have had can could will would should shall may might must".split())


def rarest_words(question: str, index, k: int) -> str | None:
    """The question's `k` rarest words (highest BM25 idf on `index`) in its own order; None when it
    has no more than `k`. Question words and words the index lacks never count."""
    scores = index.retriever.scores
    vocab, indptr, documents = index.retriever.vocab_dict, scores["indptr"], int(scores["num_docs"])

    def idf(word: str) -> float:
        stems = analyze(word)
        if not stems or stems[0] not in vocab:
            return 0.0
        df = int(indptr[vocab[stems[0]] + 1] - indptr[vocab[stems[0]]])
        return math.log(1 + (documents - df + 0.5) / (df + 0.5))

    words = [w for w in dict.fromkeys(re.findall(r"[\w'’\-]+", question))
             if TOKEN_PATTERN.search(w) and w.lower() not in _QUESTION_WORDS and idf(w) > 0]
    if len(words) <= k:
        return None
    keep = set(sorted(words, key=lambda w: -idf(w))[:k])
    return " ".join(w for w in words if w in keep)


def keyword_queries(question: str, index) -> list[str]:
    """First queries the policy could write from the question alone, in the teacher's order.

    The names in the question together, then each name alone (a HotpotQA question names its
    entities), then the question's 3, 4 and 2 rarest words (`rarest_words`). A query with the
    question's own BM25 terms (it only drops stop words) is not a rewrite.
    """
    names = names_in(question)
    candidates = ([" ".join(names)] if len(names) > 1 else []) + names
    candidates += [rarest_words(question, index, k) for k in (3, 4, 2)]
    asked = analyze(question)
    return [q for q in dict.fromkeys(candidates) if q and analyze(q) != asked]


def _gold_in(result, gold: set[str]) -> set[str]:
    return {item.passage_id for item in (result.items if result.ok else []) if item.passage_id in gold}


def rewritten_first_query(example, search_client, gold_ids: Sequence[str], mode: str = "gain",
                          max_tries: int = 8) -> str | None:
    """Keywords of the question to search first instead of the question, or None to keep the question.

    "gain": a keyword query that retrieves a gold passage the question's top results miss, and no
    fewer gold passages. "no_loss": also one that retrieves the same gold passages and still shows a
    gold answer where the question's results do. Checked on the index with the gold ids (the teacher
    may look; the policy only sees the rewrite), never a query that spells an answer.
    """
    if mode not in REWRITE_MODES:
        raise ValueError(f"rewrite mode is one of {REWRITE_MODES}, got {mode!r}")
    index = getattr(search_client, "index", None)
    gold = set(gold_ids)
    if mode == "never" or not gold or index is None:
        return None
    question = example.question.strip()
    raw = search_client.search(question)
    raw_gold = _gold_in(raw, gold)
    raw_hit = contains_answer(format_results(raw), example.answers)
    for query in [q for q in keyword_queries(question, index) if not spells_answer(q, example.answers)][:max_tries]:
        result = search_client.search(query)
        found = _gold_in(result, gold)
        if found - raw_gold and len(found) >= len(raw_gold):
            return query
        if mode == "no_loss" and found >= raw_gold and (
                not raw_hit or contains_answer(format_results(result), example.answers)):
            return query
    return None


def in_share(key: str, share: float, seed: int = 0) -> bool:
    """A fixed pseudo-random `share` of keys (the same questions whatever the order or the run)."""
    if share <= 0:
        return False
    return zlib.crc32(f"{seed}:{key}".encode()) / 2**32 < share


def bridge_query(example, items, search_client, gold_ids: Sequence[str], max_tries: int = 24) -> tuple[str, Any] | None:
    """(query, result) of the first reachable second query that retrieves a gold passage not yet read.

    The candidates are `reachable_queries` of the evidence shown (the bridge entity first); the
    teacher checks each on the index against the gold ids.
    """
    gold = set(gold_ids) - {item.passage_id for item in items}
    if not gold:
        return None
    for query in reachable_queries(example.question.strip(), items, example.answers)[:max_tries]:
        result = search_client.search(query)
        if _gold_in(result, gold):
            return query, result
    return None


def teacher_trajectory(
    example,
    search_client,
    tokenizer=None,
    max_tool_response_tokens: int | None = None,
    hints: Sequence[str] = (),
    max_tries: int = 24,
    second_query: str = "reachable",
    decompose: float = 0.0,
    rewrite: str = "never",
    seed: int = 0,
) -> TeacherTrajectory | None:
    """Script one demonstration for `example`, or None when the evidence never holds the answer.

    When the first evidence lacks the answer, the second search tries `hints` first (gold
    titles the first search did not return; only `teacher_hints` passes them), then
    `reachable_queries` of the evidence shown, at most `max_tries` searches in all. With
    `second_query="top_title"` the only fallback is the question plus the top title (the teacher of
    results/h200). Only the search that found the answer appears in the demonstration.

    Two options decompose the search (both need the gold passage ids, `helpers.evidence`):
    `rewrite` ("gain" / "no_loss", see `rewritten_first_query`) searches keywords of the question
    first where that retrieves more gold; `decompose` is the share of HotpotQA questions whose first
    evidence already holds the answer that still search a second time, for the gold passage the
    first search missed (`bridge_query`), and answer from the first evidence. Without it every
    two-search demonstration answers from its second observation, and the policy learns to answer
    from whatever it read last.
    """
    if second_query not in ("reachable", "top_title"):
        raise ValueError(f"second_query is 'reachable' or 'top_title', got {second_query!r}")
    if not 0.0 <= decompose <= 1.0:
        raise ValueError(f"decompose is a share in [0, 1], got {decompose}")
    gold = gold_passage_ids(example) if (decompose > 0 or rewrite != "never") else []

    messages = build_messages(example.question)
    question = example.question.strip()
    first = rewritten_first_query(example, search_client, gold, rewrite) if rewrite != "never" else None
    first = first or question
    result = search_client.search(first)
    observation = observe_search(tokenizer, messages, first, "call_1", result, max_tool_response_tokens)
    if observation is None:
        return None
    messages += _search_turn(first, "call_1", observation)
    found = find_answer_in(observation, example.answers)
    shown = [item for i, item in enumerate(result.items, start=1) if f"[{i}] Title:" in observation] if result.ok else []
    rewritten = first != question
    if found is not None:
        bridge = None
        if example.data_source == "hotpotqa" and in_share(example.id, decompose, seed):
            bridge = bridge_query(example, shown, search_client, gold, max_tries)
        if bridge is not None:
            query, second = bridge
            second_observation = observe_search(tokenizer, messages, query, "call_2", second, max_tool_response_tokens)
            if second_observation is not None:
                messages += [*_search_turn(query, "call_2", second_observation), _answer(found)]
                return TeacherTrajectory(example, messages, [first, query], found, answer_search=0,
                                         rewritten=rewritten, decomposed=True)
        return TeacherTrajectory(example, [*messages, _answer(found)], [first], found, rewritten=rewritten)
    if not result.ok or not result.items:
        return None
    seen = {item.title.strip() for item in result.items}
    candidates = [h.strip() for h in hints if h.strip() and h.strip() not in seen
                  and not spells_answer(h, example.answers)]
    if second_query == "top_title":
        candidates.append(f"{question} {result.items[0].title.strip()}")
    else:
        candidates += reachable_queries(question, shown, example.answers)
    for query in [q for q in dict.fromkeys(candidates) if q != first][:max_tries]:
        second = search_client.search(query)
        observation = observe_search(tokenizer, messages, query, "call_2", second, max_tool_response_tokens)
        found = find_answer_in(observation, example.answers) if observation is not None else None
        if found is not None:
            messages += [*_search_turn(query, "call_2", observation), _answer(found)]
            return TeacherTrajectory(example, messages, [first, query], found, answer_search=1, rewritten=rewritten)
    return None


def _answer(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": f"Answer: {text}"}


def gold_titles(examples, split: str = "train") -> dict[str, list[str]]:
    """Titles of each example's gold passages (from the split's metadata and the local corpus).

    The teacher's hints for a second search. Empty when the local index is not available.
    """
    try:
        titles = {p.id: p.title for p in get_index().passages}
        rows = {r["id"]: r.get("metadata") or {} for r in load_rows(split)}
    except (FileNotFoundError, OSError):
        return {}
    return {e.id: [titles[g] for g in rows.get(e.id, {}).get("gold_passage_ids") or [] if g in titles]
            for e in examples}


def build_demonstrations(examples, search_client, tokenizer,
                         max_tool_response_tokens=RolloutConfig.max_tool_response_tokens, progress=True,
                         hints: dict[str, list[str]] | None = None, second_query: str = "reachable",
                         decompose: float = 0.0, rewrite: str = "never", seed: int = 0):
    kept, skipped = [], 0
    hints = hints or {}
    for example in tqdm(examples, desc="scripted teacher", disable=not progress):
        demo = teacher_trajectory(example, search_client, tokenizer, max_tool_response_tokens,
                                  hints.get(example.id, ()), second_query=second_query,
                                  decompose=decompose, rewrite=rewrite, seed=seed)
        if demo is None:
            skipped += 1
        else:
            kept.append(demo)
    return kept, skipped

