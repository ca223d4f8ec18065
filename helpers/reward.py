"""The outcome reward of Search-R1: exact match on one ``Answer:`` line.

    1.0   the format is valid and the normalised answer equals a normalised reference
    0.0   the format is valid, the answer is wrong
   -0.1   no single ``Answer:`` line, or the final turn still holds tool-call markup

Nothing is given for searching: the reward sees only the end of the trajectory.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

FORMAT_PENALTY = -0.1
ARTICLE_PATTERN = re.compile(r"\b(a|an|the)\b")
# Matched against one line at a time, split by str.splitlines: every Unicode line break ends a
# line (\r alone, U+0085, U+2028 too), so two answers cannot hide on one "line". The letters are
# spelled out: re.IGNORECASE would also let "ſ" (long s) stand in for "s".
ANSWER_PATTERN = re.compile(r"\s*[Aa][Nn][Ss][Ww][Ee][Rr]:\s*(.*?)\s*")


@dataclass(frozen=True)
class RewardResult:
    reward: float
    valid_format: bool
    exact_match: bool
    answer: str | None


def normalize_answer(text: str) -> str:
    """Lowercase, drop every Unicode punctuation character, drop a/an/the, collapse spaces."""
    lowered = str(text).lower()
    no_punct = "".join(ch for ch in lowered if not unicodedata.category(ch).startswith("P"))
    return " ".join(ARTICLE_PATTERN.sub(" ", no_punct).split())


def extract_answer(text: str) -> str | None:
    """The text of the only ``Answer:`` line, or None (no such line, several, or empty)."""
    matches = [m.group(1) for line in str(text).splitlines() if (m := ANSWER_PATTERN.fullmatch(line))]
    if len(matches) != 1:
        return None
    return matches[0].strip() or None


def score_answer(text: str, references: Iterable[str]) -> RewardResult:
    text = str(text)
    if "<tool_call>" in text or "</tool_call>" in text:
        # A turn that (also) calls the tool is not a final answer, whatever else it says.
        return RewardResult(FORMAT_PENALTY, False, False, None)
    answer = extract_answer(text)
    if answer is None:
        return RewardResult(FORMAT_PENALTY, False, False, None)
    normalized = normalize_answer(answer)
    # An answer that normalises to nothing ("the", "...") matches nothing.
    exact = bool(normalized) and any(normalized == normalize_answer(ref) for ref in references)
    return RewardResult(float(exact), True, exact, answer)
