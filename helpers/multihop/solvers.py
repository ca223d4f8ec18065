"""The post's independent solvers: a question is kept when the chain is what answers it.

Two reading-comprehension solvers see the question and a set of passages and write one answer:
one is given every passage of the chain and must answer right, the other only the first passage
and must not (if the first passage is enough, the question needs no second search). Both are the
same sampling client (greedy, a short ``Answer:`` continuation), so a verdict costs two short
generations. ``solve_all`` writes the verdicts keyed by the question's stable id; the set-up stage
reads them from ``helpers/multihop/verdicts.jsonl``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from helpers.reward import normalize_answer
from helpers.runs import write_jsonl

SYSTEM = ("You answer questions from the passages you are given and from nothing else. "
          "Reply with the short answer only: a name, a place or a year.")
MAX_ANSWER_TOKENS = 24
MAX_PASSAGE_CHARS = 1200


def solver_messages(question: str, passages: Sequence[tuple[str, str]]) -> list[dict]:
    """Chat messages for one solver: numbered passages (title, text), then the question."""
    shown = "\n\n".join(f"Passage {i + 1} ({title}):\n{text[:MAX_PASSAGE_CHARS]}"
                        for i, (title, text) in enumerate(passages))
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{shown}\n\nQuestion: {question}"}]


def is_right(reply: str, answers: Sequence[str]) -> bool:
    """The normalised reply equals or contains a normalised reference (short replies only)."""
    got = normalize_answer(reply)
    if not got or len(got.split()) > 12:
        return False
    return any((ref := normalize_answer(a)) and (got == ref or f" {ref} " in f" {got} ") for a in answers)


def prompt_tokens(tokenizer, messages: list[dict], prefix: str = "Answer:") -> list[int]:
    """The chat prompt, then `prefix`: the reply continues the assistant's own line."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text + prefix, add_special_tokens=False))


def greedy_lines(sampling_client, tokenizer, prompts: list[list[dict]], prefix: str = "Answer:",
                 max_tokens: int = MAX_ANSWER_TOKENS, desc: str = "solvers", show_progress: bool = True) -> list[str]:
    """One greedy line after `prefix` for each chat prompt; every request is submitted before any
    is awaited, so the engine batches them."""
    import pytrio
    from tqdm.auto import tqdm

    params = pytrio.SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=["\n"])
    futures = [sampling_client.sample(prompt=pytrio.ModelInput.from_ints(prompt_tokens(tokenizer, m, prefix)),
                                      num_samples=1, sampling_params=params) for m in prompts]
    replies = []
    for future in tqdm(futures, desc=desc, unit=" prompts", disable=not show_progress, mininterval=2.0):
        result = future.result()
        replies.append(tokenizer.decode(result.sequences[0].tokens, skip_special_tokens=True).strip())
    return replies


def verdicts(candidates: Sequence[dict], passages_of, sampling_client, tokenizer,
             show_progress: bool = True) -> list[dict]:
    """One verdict per candidate: ``with_all`` right, ``with_first`` right, and ``pass``.

    ``passages_of(candidate)`` gives the chain's (title, text) pairs in chain order.
    """
    prompts = []
    for candidate in candidates:
        chain = passages_of(candidate)
        prompts.append(solver_messages(candidate["question"], chain))
        prompts.append(solver_messages(candidate["question"], chain[:1]))
    replies = greedy_lines(sampling_client, tokenizer, prompts, show_progress=show_progress)
    out = []
    for i, candidate in enumerate(candidates):
        full, first = replies[2 * i], replies[2 * i + 1]
        with_all, with_first = is_right(full, candidate["answers"]), is_right(first, candidate["answers"])
        out.append({"id": candidate["id"], "question": candidate["question"], "with_all": with_all,
                    "with_first": with_first, "pass": with_all and not with_first,
                    "reply_all": full, "reply_first": first})
    return out


def write_verdicts(rows: Sequence[dict], path: str | Path) -> Path:
    return write_jsonl(path, sorted(rows, key=lambda r: r["id"]))
