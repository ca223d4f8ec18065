"""Rubric-checked prompts: the general-chat half of Perplexity's post, with rules as the judge.

The post's general-chat data gives every prompt a few rubrics, each objective (checkable without
taste) and necessary (needed to answer, not a stylistic wish), and r_base = 1 only when a reply
meets all of them. Its judge is a model; here every rubric is a rule, so the course can check
them offline. Prompts are questions of the course's data whose answer is in the corpus, each
asked with a few instructions, and each instruction is one rubric.

Two more steps of the post live here: the pass@4 filter (sample four replies per prompt, drop a
prompt that none or all of them pass: it teaches nothing) and the 90/10 prompt mix (verifiable
questions : rubric prompts), so the easier rubric signal does not dominate the updates.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.reward import GroupRewards, contains_answer

CITATION_MARK = re.compile(r"\[(web|memory|chart|attached_file|\w+):\s*\d+\]")
HEDGES = ("i think", "maybe", "perhaps", "might", "not sure", "not certain", "i guess", "possibly")


@dataclass(frozen=True)
class Rubric:
    """One objective, necessary criterion and the rule that checks it."""

    name: str
    text: str
    check: Callable[[str], bool] = field(repr=False, compare=False)

    def __call__(self, reply: str) -> bool:
        return bool(self.check(reply or ""))


@dataclass(frozen=True)
class RubricPrompt:
    """A prompt, the question behind it (for the answer rubric) and its 3-5 rubrics."""

    id: str
    prompt: str
    question: str
    answers: tuple[str, ...]
    rubrics: tuple[Rubric, ...]

    def meets(self, reply: str) -> list[bool]:
        return [rubric(reply) for rubric in self.rubrics]

    def r_base(self, reply: str) -> int:
        """1 when the reply meets every rubric, else 0 (the post's r_base for rubric data)."""
        return int(all(self.meets(reply)))


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def _english(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(c.isascii() for c in letters) / len(letters) >= 0.9


# instruction -> rubric; the answer rubric and the citation rubric are always there (the post's example has both)
INSTRUCTIONS: dict[str, tuple[str, Callable[[int], Rubric]]] = {
    "short": ("Reply in at most {n} words.",
              lambda n: Rubric(f"at most {n} words", f"The reply has at most {n} words.",
                               lambda r: len(_words(r)) <= n)),
    "english": ("Reply in English.",
                lambda n: Rubric("in English", "The reply is written in English.", _english)),
    "no_hedge": ("State it plainly, without hedging.",
                 lambda n: Rubric("no hedges", f"The reply uses none of {', '.join(HEDGES)}.",
                                  lambda r: not any(re.search(rf"\b{h}\b", r.lower()) for h in HEDGES))),
    "sentence": ("Answer in one full sentence ending with a full stop.",
                 lambda n: Rubric("one sentence", "The reply is one sentence that ends with '.'.",
                                  lambda r: r.strip().endswith(".") and r.strip().count(". ") == 0)),
}


def make_rubric_prompts(examples: Sequence[Any], *, seed: int = 0) -> list[RubricPrompt]:
    """One rubric prompt per example (3-5 rubrics each), reproducible from `seed`.

    examples: `helpers.data.SearchExample`s whose answer the corpus holds (their gold passages).
    """
    rng = random.Random(seed)
    prompts = []
    for example in examples:
        answers = tuple(a for a in example.answers if a.strip())
        if not answers:
            continue
        chosen = sorted(rng.sample(sorted(INSTRUCTIONS), rng.randint(1, 3)))
        n = rng.choice((8, 12, 20))
        text = " ".join([" ".join(example.question.split())] + [INSTRUCTIONS[k][0].format(n=n) for k in chosen]
                        + ["Do not include citation marks."])
        rubrics = (
            Rubric("answer", f"The reply names {answers[0]!r}.",
                   lambda r, answers=answers: contains_answer(r, answers)),
            *(INSTRUCTIONS[k][1](n) for k in chosen),
            Rubric("no citation marks", "The reply has no citation marks of the form [type:idx].",
                   lambda r: CITATION_MARK.search(r) is None),
        )
        prompts.append(RubricPrompt(f"rubric-{example.id}", text, example.question, answers, rubrics))
    return prompts


@dataclass
class FilterReport:
    """What the pass@k filter kept and why it dropped the rest."""

    kept: list[RubricPrompt]
    none_pass: list[RubricPrompt]
    all_pass: list[RubricPrompt]
    passes: dict[str, int]  # prompt id -> how many of the k samples met every rubric

    def counts(self) -> dict[str, int]:
        return {"prompts": len(self.kept) + len(self.none_pass) + len(self.all_pass), "kept": len(self.kept),
                "dropped: no sample passes": len(self.none_pass), "dropped: every sample passes": len(self.all_pass)}


def pass_at_k_filter(prompts: Sequence[RubricPrompt], sample: Callable[[RubricPrompt, int], Sequence[str]],
                     k: int = 4) -> FilterReport:
    """Keep the prompts where some but not all of k samples meet every rubric (the post's pass@4).

    sample(prompt, k) returns k independent replies (a policy, or any stand-in sampler).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    report = FilterReport([], [], [], {})
    for prompt in prompts:
        replies = list(sample(prompt, k))
        if len(replies) != k:
            raise ValueError(f"the sampler returned {len(replies)} replies for {prompt.id}, expected {k}")
        passed = sum(prompt.r_base(reply) for reply in replies)
        report.passes[prompt.id] = passed
        (report.none_pass if passed == 0 else report.all_pass if passed == k else report.kept).append(prompt)
    return report


# the post's mix: 90 % verifiable questions, 10 % rubric prompts (TrainConfig.rubric_share; a step's batch
# mixes them as helpers.multihop.mix.step_batch does the synthetic share)
RUBRIC_SHARE = 0.1


RUBRIC_SET_SIZE = 36


def rubric_set(n: int = RUBRIC_SET_SIZE, split: str = "validation", seed: int = 0) -> list[RubricPrompt]:
    """The course's rubric prompts: the first `n` questions of `split` whose gold passages are in the
    corpus (so a search can find the answer), each with its rubrics."""
    from helpers.data import load_examples

    answerable = [ex for ex in load_examples(split) if ex.metadata.get("gold_passage_ids")]
    return make_rubric_prompts(answerable[:n], seed=seed)


# ---------------------------------------------------------------- rubric prompts in GRPO

RUBRIC_SOURCE = "rubric"  # the data_source of a rubric prompt asked as a training question


def as_example(prompt: RubricPrompt) -> Any:
    """The prompt as a question the agent is asked (its rubrics stay with the prompt, found by id)."""
    from helpers.data import SearchExample

    return SearchExample(prompt.id, prompt.prompt, list(prompt.answers), RUBRIC_SOURCE)


def policy_replies(sampling_client: Any, tokenizer: Any, search_client: Any, prompts: Sequence[RubricPrompt],
                   rollout_config: Any) -> dict[str, list[str]]:
    """group_size final replies of a policy per prompt, each prompt asked as the agent's question
    (searches allowed, as in training): what `pass_at_k_filter` samples, all prompts at once."""
    from helpers.rollout import rollout_groups

    groups = rollout_groups(sampling_client, tokenizer, search_client, [as_example(p) for p in prompts],
                            rollout_config, progress=False)
    return {p.id: [t.final_text for t in group] for p, group in zip(prompts, groups, strict=True)}


def write_filter(path: str | Path, report: FilterReport, n: int, split: str, seed: int) -> Path:
    """The filter's counts and kept prompt ids, with what rebuilds the prompts (`load_rubric_prompts`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rubric_set": {"n": n, "split": split, "seed": seed}, "counts": report.counts(),
                                "kept": [p.id for p in report.kept], "passes": report.passes}, indent=2))
    return path


def load_rubric_prompts(path: str | Path | None = None) -> list[RubricPrompt]:
    """The course's rubric set, or the prompts a pass@k filter kept (a file `write_filter` wrote)."""
    if path is None:
        return rubric_set()
    saved = json.loads(Path(path).read_text())
    prompts = {p.id: p for p in rubric_set(**saved["rubric_set"])}
    missing = sorted(set(saved["kept"]) - set(prompts))
    if missing:
        raise ValueError(f"{path} keeps prompts the rubric set no longer has: {missing[:5]}")
    return [prompts[i] for i in saved["kept"]]


class RubricReward:
    """Rubric prompts rewarded by their rubrics (r_base: every rubric met), other questions by `inner`.

    The post's rubric data has r_base from its rubrics instead of a checked answer; the preference
    score and the efficiency penalties of a gated `inner` reward stay with the verifiable questions.
    `rubric/prompt` and `rubric/met_all` are logged for every trajectory (0 off rubric prompts), so
    their means are the step's share of rubric samples and of rubric samples that met every rubric.
    """

    def __init__(self, inner: Callable[[Any], GroupRewards], prompts: Sequence[RubricPrompt]) -> None:
        self.inner = inner
        self.prompts = {p.id: p for p in prompts}
        counterfactuals = getattr(inner, "sample_counterfactuals", None)
        if callable(counterfactuals):  # the verifiable questions' counterfactuals (helpers.search_gain)
            self.sample_counterfactuals = lambda sampling_client, tokenizer, groups: counterfactuals(
                sampling_client, tokenizer, [g for g in groups if self._prompt(g) is None])

    def _prompt(self, group: Any) -> RubricPrompt | None:
        example = group.example
        return self.prompts.get(example.id) if getattr(example, "data_source", None) == RUBRIC_SOURCE else None

    def prepare(self, groups: Sequence[Any]) -> None:
        prepare = getattr(self.inner, "prepare", None)
        if callable(prepare):
            prepare([g for g in groups if self._prompt(g) is None])

    def __call__(self, group: Any) -> GroupRewards:
        n = len(group.trajectories)
        prompt = self._prompt(group)
        if prompt is None:
            result = self.inner(group)
            return GroupRewards(result.rewards, {**result.components, "rubric/prompt": [0.0] * n,
                                                 "rubric/met_all": [0.0] * n})
        met = [float(prompt.r_base(t.final_text)) for t in group.trajectories]
        return GroupRewards(met, {"rubric/prompt": [1.0] * n, "rubric/met_all": met})
