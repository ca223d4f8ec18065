"""Preference pairs a rule can label: a stand-in for human preferences, made offline.

Perplexity's post trains its preference model on curated open data, side-by-side user feedback
and in-house annotation. The course has none of that, so it writes pairs whose label a rule
decides: for the same question and the same right answer, the reply a reader would prefer
states it plainly, in the question's language, without padding. Each pair's `rule` names the
flaw of the worse reply, so accuracy can be read per kind of flaw.

Labels are r = 1 when the first reply (y_a) is preferred. `shown_first` sets how often the
preferred reply comes first, the way a labelling tool might show them: anything but 0.5 hands a
one-order model a position to lean on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

PLAIN = (
    "{answer}.",
    "The answer is {answer}.",
    "It is {answer}.",
    "{answer} is the answer.",
)
HEDGED = (
    "I think it might possibly be {answer}, but I am not entirely sure about this.",
    "It could perhaps be {answer}, although I may well be wrong and you should double-check.",
    "Maybe {answer}? I'm honestly not certain, it is just my best guess.",
)
RESTATED = (
    "You asked: {question} So, to answer the question {question} the answer is {answer}.",
    "The question is {question} Having considered the question {question} I would say {answer}.",
)
CITED = (
    "The answer is {answer} [web:{i}][web:{j}].",
    "{answer} [memory:{i}] [web:{j}].",
    "It is {answer} [attached_file:{i}][chart:{j}].",
)
# the same plain reply in a language the question was not asked in
OTHER_LANGUAGE = (
    "Жауабы: {answer}.",
    "Ответ: {answer}.",
    "答案是{answer}。",
    "La respuesta es {answer}.",
)
RULES = {"hedged": HEDGED, "restated": RESTATED, "cited": CITED, "language": OTHER_LANGUAGE}


@dataclass(frozen=True)
class PreferencePair:
    """One labelled comparison: r = 1 when `a` is preferred, 0 when `b` is (rule "tie": neither)."""

    question: str
    a: str
    b: str
    r: int
    rule: str
    example_id: str = ""

    def swapped(self) -> "PreferencePair":
        """The same comparison shown the other way round (the label flips with it)."""
        return PreferencePair(self.question, self.b, self.a, 1 - self.r, self.rule, self.example_id)

    def as_dict(self) -> dict:
        return asdict(self)


def _question_text(question: str) -> str:
    text = " ".join(question.split())
    text = text[0].upper() + text[1:] if text else text
    return text if text.endswith("?") else text + "?"


def worse_reply(rule: str, question: str, answer: str, rng: random.Random) -> str:
    """The flawed reply of `rule` for a question and its right answer."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; rules: {sorted(RULES)}")
    template = rng.choice(RULES[rule])
    return template.format(answer=answer, question=_question_text(question), i=rng.randint(1, 9),
                           j=rng.randint(1, 9))


def make_pairs(examples: Sequence, *, seed: int = 0, rules: Sequence[str] = tuple(RULES),
               shown_first: float = 0.5) -> list[PreferencePair]:
    """One pair per example (its first answer, a rule drawn in turn), reproducible from `seed`.

    examples: anything with `.question`, `.answers` and `.id` (a `helpers.data.SearchExample`).
    """
    if not 0.0 <= shown_first <= 1.0:
        raise ValueError(f"shown_first must lie in [0, 1], got {shown_first}")
    unknown = sorted(set(rules) - set(RULES))
    if unknown or not rules:
        raise ValueError(f"unknown rules {unknown}; rules: {sorted(RULES)}")
    rng = random.Random(seed)
    pairs = []
    for index, example in enumerate(examples):
        answers = [a for a in example.answers if a.strip()]
        if not answers:
            continue
        answer, rule = answers[0].strip(), rules[index % len(rules)]
        good = rng.choice(PLAIN).format(answer=answer)
        good = good[0].upper() + good[1:]
        bad = worse_reply(rule, example.question, answer, rng)
        pair = PreferencePair(example.question, good, bad, 1, rule, str(example.id))
        pairs.append(pair if rng.random() < shown_first else pair.swapped())
    return pairs


def make_ties(examples: Sequence, *, seed: int = 0) -> list[PreferencePair]:
    """Two plain replies with the same right answer: no rule prefers either (r = 0.5).

    Not training data: where the content does not decide, whatever a model prefers is the
    position, so ties show position bias at its clearest.
    """
    rng = random.Random(seed)
    ties = []
    for example in examples:
        answers = [a for a in example.answers if a.strip()]
        if not answers:
            continue
        first, second = rng.sample(PLAIN, 2)
        answer = answers[0].strip()
        a, b = (t.format(answer=answer) for t in (first, second))
        ties.append(PreferencePair(example.question, a[0].upper() + a[1:], b[0].upper() + b[1:], 0, "tie",
                                   str(example.id)))
    return ties


def split_pairs(pairs: Sequence[PreferencePair], held_out: float = 0.25,
                seed: int = 0) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, held-out), shuffled with `seed`; no question is on both sides."""
    if not 0.0 < held_out < 1.0:
        raise ValueError(f"held_out must lie strictly between 0 and 1, got {held_out}")
    questions = sorted({p.question for p in pairs})
    random.Random(seed).shuffle(questions)
    cut = max(1, round(len(questions) * held_out))
    test_questions = set(questions[:cut])
    train = [p for p in pairs if p.question not in test_questions]
    test = [p for p in pairs if p.question in test_questions]
    return train, test


def both_orders(pairs: Sequence[PreferencePair]) -> list[PreferencePair]:
    """Every pair followed by its swap: the data of the symmetrised loss."""
    return [q for p in pairs for q in (p, p.swapped())]
