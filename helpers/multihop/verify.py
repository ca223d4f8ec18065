"""Checks that a question needs its chain; each returns True when the question passes.

In the order the split applies them (``CHECKS``):

- ``answer_in_last_not_first``: a bridge's answer occurs in the last passage of the chain and
  in no earlier one (none of its answers, for a question with several: a film's cast); for a
  comparison, each compared entity's year is in its own passage, the years differ, and the seed
  passage states no hidden entity's year, so no passage alone decides;
- ``names_hidden``: the question names no hidden entity (B, C) and, for a bridge, not the answer;
- ``needs_second_search``: a BM25 top-3 on the raw question does not already hold every chain
  passage (otherwise one search is all the question asks for);
- ``held_out_passages``: no chain passage is a gold passage of a validation or test question;
- ``held_out_text``: the question does not repeat or paraphrase a validation or test question
  (content-word overlap below ``TEXT_OVERLAP``);
- ``solvers``: the verdict of the two independent solvers, where one was recorded
  (see ``helpers.multihop.solvers``): right with all chain passages, wrong with the first only;
- ``repeats``: the same last entity ends at most ``MAX_PER_ENTITY`` kept questions (at most
  ``MAX_PER_FACT`` about one of its facts), and no question text repeats, so one popular
  entity does not fill the split.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from helpers.multihop.facts import clean_title
from helpers.multihop.names_members import SEVERAL_ANSWERS
from helpers.reward import normalize_answer as normalize

CHECKS = ("answer_in_last_not_first", "names_hidden", "needs_second_search", "held_out_passages",
          "held_out_text", "solvers", "repeats")
TEXT_OVERLAP = 0.6  # Jaccard of content words at which two questions count as one
MAX_PER_ENTITY = 8
MAX_PER_FACT = 4  # more questions with one answer would let a policy answer from memory
BM25_TOP_K = 3
_STOP = frozenset(("what which who when where year was were is are did does the of in on a an to and "
                   "for by with from mentioned wikipedia passage about give first earlier").split())


# Two years joined by a dash without spaces, "(1812–1815)", "1939-1945", "1917–18": normalising drops the dash
# and leaves one token ("18121815"), in which no year is stated. The dash becomes a space first, so the span
# reads as a spaced one already does ("1812 – 1815" normalises to "1812 1815"). Only four digits joined to four
# or two, not inside a longer run of digits, dashes or letters: a date "1963-01-22", an ISBN "0-06-015547-7",
# "c.1973-75", "1960-1970s" stay one token. The two-digit end of "1917–18" is not read as 1918: the passage
# writes only the first year in full.
_DASHES = "\\-\u2010\u2011\u2012\u2013\u2014"  # hyphen-minus, hyphen, non-breaking hyphen, figure, en and em dash
_YEAR_SPAN = re.compile(rf"(?<![\w.,/:{_DASHES}])(\d{{4}})[{_DASHES}](\d{{4}}|\d{{2}})(?![\w/{_DASHES}]|[.,:]\d)")


def years_apart(text: str) -> str:
    """`text` with the dash of each year span ("1812–1815", "1917–18") turned into a space."""
    return _YEAR_SPAN.sub(r"\1 \2", text)


def contains(haystack: str, needle: str) -> bool:
    """Normalised, whole-word containment (the way the reward compares answers), with the years of a span joined
    by a dash read apart (``years_apart``)."""
    needle = normalize(years_apart(needle))
    return bool(needle) and f" {needle} " in f" {normalize(years_apart(haystack))} "


def answer_in_last_not_first(candidate: dict, texts: list[str]) -> bool:
    """`texts`: the chain's passage texts (title line included), in chain order."""
    if candidate["kind"] == "comparison":
        years, where = candidate["years"], candidate["compared"]
        if len(set(years)) != len(years):
            return False
        own = all(contains(texts[i], year) for i, year in zip(where, years))
        # the seed passage must not state a hidden entity's year, or it alone would decide
        return own and not any(contains(texts[0], year) for i, year in zip(where, years) if i > 0)
    answer = candidate["answers"][0]
    # a question with several right answers (a film's cast) is answered from an earlier passage that states any
    # of them; another relation's further answers are forms of the first ("Cumbria", "Cumbria, England")
    others = candidate["answers"] if candidate.get("relation") in SEVERAL_ANSWERS else [answer]
    return contains(texts[-1], answer) and not any(contains(text, a) for text in texts[:-1] for a in others)


def names_hidden(candidate: dict) -> bool:
    """A bridge hides every entity after the first; a comparison the compared entities after the first (one
    across two passages names both passages' subjects, and hides the entity each of them names)."""
    question = candidate["question"]
    chain = candidate["chain"]
    hidden = [chain[i] for i in candidate["compared"] if i > 0] if candidate["kind"] == "comparison" else chain[1:]
    if any(contains(question, clean_title(title)) for title in hidden):
        return False
    if candidate["kind"] == "comparison":
        return not any(contains(question, year) for year in candidate["years"])
    return not any(contains(question, answer) for answer in candidate["answers"])


def needs_second_search(candidate: dict, index, k: int = BM25_TOP_K) -> bool:
    """False when one raw-question search already returns every chain passage."""
    found = {p.id for p in index.search(candidate["question"], k=k)}
    return not set(candidate["passage_ids"]) <= found


def held_out_passages(candidate: dict, held_out_ids: set[str]) -> bool:
    return not (set(candidate["passage_ids"]) & held_out_ids)


def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"\w+", normalize(text)) if w not in _STOP)


class TextIndex:
    """Held-out questions by content word, for a quick near-duplicate test."""

    def __init__(self, questions: Iterable[str]):
        self.sets = [content_words(q) for q in questions]
        self.by_word: dict[str, list[int]] = {}
        for i, words in enumerate(self.sets):
            for word in words:
                self.by_word.setdefault(word, []).append(i)

    def closest(self, question: str) -> float:
        """The highest Jaccard overlap with any held-out question (0 when none shares a word)."""
        words = content_words(question)
        best = 0.0
        for i in {i for w in words for i in self.by_word.get(w, ())}:
            other = self.sets[i]
            best = max(best, len(words & other) / len(words | other))
        return best


def held_out_text(candidate: dict, held_out: TextIndex, threshold: float = TEXT_OVERLAP) -> bool:
    return held_out.closest(candidate["question"]) < threshold


def rule_checks(candidate: dict, texts: list[str], index, held_ids: set[str], held_out: TextIndex) -> dict[str, bool]:
    """The checks by rule, before the solvers' verdict and the repeat cap, by name."""
    return {
        "answer_in_last_not_first": answer_in_last_not_first(candidate, texts),
        "names_hidden": names_hidden(candidate),
        "needs_second_search": needs_second_search(candidate, index),
        "held_out_passages": held_out_passages(candidate, held_ids),
        "held_out_text": held_out_text(candidate, held_out),
    }


def needs_verdict(candidate: dict) -> bool:
    """Whether `candidate` is kept only with a passing verdict: a comparison, of any set of rules, and a question
    of the seventh set (``names_members``). The reader answers a comparison right from both (all four) passages
    one time in five, so an unjudged one is more likely a question the policy cannot learn from than one it can;
    a bridge of the first six sets passes 60 to 77 % of the time, so an unjudged one is kept (marked unchecked).
    The seventh set asks for things the reader had not been asked before (another name of an entity it may give
    by its usual name, a team, a band): until its verdicts say how often it passes, an unjudged one is not kept."""
    return candidate["kind"] == "comparison" or bool(candidate.get("names_members"))


def solvers(candidate: dict, verdicts: dict[str, dict], judged_only: bool = True) -> bool:
    """A recorded verdict decides; a question no solver has seen passes (and is marked unchecked), but not a
    comparison (``needs_verdict``; unless `judged_only` is off: which questions would be kept if they passed)."""
    verdict = verdicts.get(candidate["id"])
    if verdict is None:
        return not (judged_only and needs_verdict(candidate))
    return bool(verdict["pass"])


def apply_repeats(candidates: list[dict], max_per_entity: int = MAX_PER_ENTITY,
                  max_per_fact: int = MAX_PER_FACT) -> list[bool]:
    """For each candidate in order: kept under the caps per last entity and per (entity, fact),
    and not a repeat of an earlier question's text."""
    counts: dict[object, int] = {}
    texts: set[str] = set()
    keep = []
    for candidate in candidates:
        entity = candidate["chain"][-1]
        fact = (entity, candidate["relation"])
        text = normalize(candidate["question"])
        ok = (counts.get(entity, 0) < max_per_entity and counts.get(fact, 0) < max_per_fact
              and text not in texts)
        if ok:
            counts[entity] = counts.get(entity, 0) + 1
            counts[fact] = counts.get(fact, 0) + 1
            texts.add(text)
        keep.append(ok)
    return keep
