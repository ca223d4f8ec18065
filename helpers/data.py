"""NQ + HotpotQA questions as SearchExample rows (owner: data issue #3)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchExample:
    id: str
    question: str
    answers: list[str]
    data_source: str
