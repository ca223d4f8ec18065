"""The question the course follows from the prompt (02) to the trained agent (10).

A HotpotQA *bridge* question from the data pack: the first search finds the film and, in it, the
name of the actress; only a second search, on that name, finds the answer. The offline index holds
both passages, so every notebook can show the two hops on this machine.

Happy-LLM §8.3 tells the same story with the author of *The Little Prince*; the offline corpus has
no passage about Saint-Exupéry, so that one stays an illustration in prose.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.data import SearchExample

RUNNING_EXAMPLE = SearchExample(
    id="5a8c7595554299585d9e36b6",  # the HotpotQA dev id, in the test split
    question="What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
    answers=["Chief of Protocol"],
    data_source="hotpotqa",
)


@dataclass(frozen=True)
class Hop:
    """One search of the two-hop path: the query, the passage it should bring back, what it reveals."""

    query: str
    title: str
    reveals: str


HOPS = (
    Hop("Corliss Archer Kiss and Tell", "Kiss and Tell (1945 film)", "Shirley Temple"),
    Hop("Shirley Temple government position", "Shirley Temple", "Chief of Protocol"),
)
QUERIES = tuple(hop.query for hop in HOPS)
ANSWER = RUNNING_EXAMPLE.answers[0]
