"""SFT warm start: teach the format with a scripted teacher before GRPO (stage 1 of seed 004).

The base model rarely calls the tool and almost never ends with an `Answer:` line, so GRPO
would start from groups whose rewards are all -0.1 (no signal). A scripted teacher fixes the
format first:

1. search the question with the local index;
2. if no gold answer string appears in the evidence, search again with a query the policy could
   have written itself: a name from the evidence it was shown (the bridge of a two-hop question),
   a name from the question, or the question plus a result's title. The teacher only gets to
   choose, from those, the first one that finds the answer;
3. answer `Answer: <the gold string, spelled as the evidence spells it>`.

Earlier teachers searched again with the question plus the top title (2 % of demonstrations
searched twice, and the SFT policy never did: results/h200), or with the gold passages' titles
(`teacher_hints`; the policy learned to search again but not what for, since those titles are in
nothing it reads, and one GRPO step dropped the habit: results/h200_hints).

Questions whose answer never shows up are skipped, so the teacher never answers without
evidence. Only the TRAIN split is used. The conversation is rendered by the model's own chat
template (native tool calls), and `cross_entropy` gets weight 1 on assistant tokens (their
end-of-turn token included) and 0 on everything else (system prompt, question, observations).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytrio

from helpers.train import (
    MAX_TRAIN_CONTEXT_TOKENS,
    RunDir,
    TrainingDatum,
    _result,
    add_config_arguments,
    materialise_checkpoint,
    config_from_args,
    pack_micro_batches,
    padded_tokens,
)


@dataclass
class TeacherTrajectory:
    """One scripted demonstration: the chat messages plus what the teacher did."""

    example: Any
    messages: list[dict[str, Any]]
    queries: list[str]
    answer: str

    @property
    def search_calls(self) -> int:
        return len(self.queries)


def find_answer_in(evidence: str, answers: Sequence[str]) -> str | None:
    """The first gold answer found in the evidence, spelled as the evidence spells it.

    Case-insensitive, on word boundaries, so 'Paris' does not match inside 'Parisian'.
    """
    for answer in answers:
        answer = answer.strip()
        if not answer:
            continue
        pattern = r"(?<!\w)" + re.escape(answer) + r"(?!\w)"
        match = re.search(pattern, evidence, flags=re.IGNORECASE)
        if match:
            return match.group(0)
    return None


def _call_message(query: str, call_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "id": call_id, "function": {"name": "search", "arguments": {"query": query}}}],
    }


TOOL_TURN_OVERHEAD = 16  # template tokens around a tool message (role header, <tool_response> tags)


def fit_observation(tokenizer, result, max_tokens: int | None) -> str | None:
    """The observation the rollout would show: as many whole items, in rank order, as fit.

    Mirrors helpers.rollout.fit_tool_content (whole items under max_tool_response_tokens), so
    SFT demonstrations look like GRPO observations. None when not even one item fits.
    """
    from helpers.search import format_results

    if tokenizer is None or max_tokens is None:
        return format_results(result)
    if not (result.ok and result.items):
        return format_results(result)
    best = None
    for count in range(1, len(result.items) + 1):
        content = format_results(result, max_items=count)
        if len(tokenizer.encode(content, add_special_tokens=False)) + TOOL_TURN_OVERHEAD > max_tokens:
            break
        best = content
    return best


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
    from helpers.reward import normalize_answer

    text = normalize_answer(query)
    return any(gold and gold in text for gold in map(normalize_answer, answers))


def reachable_queries(question: str, items, answers: Sequence[str]) -> list[str]:
    """Second queries the policy could write from what it has read, in the teacher's order.

    Names from the evidence's text (not already in the question), then names in the question,
    then the question plus each title. Nothing that spells a gold answer: the policy does not know it.
    """
    from helpers.reward import normalize_answer

    asked = normalize_answer(question)
    titles = [item.title.strip() for item in items]
    evidence = [n for item in items for n in names_in(item.content)
                if normalize_answer(n) not in asked and n not in titles]
    candidates = evidence + names_in(question) + [f"{question} {t}" for t in titles]
    return [q for q in dict.fromkeys(candidates) if q != question and not spells_answer(q, answers)]


def teacher_trajectory(
    example,
    search_client,
    tokenizer=None,
    max_tool_response_tokens: int | None = None,
    hints: Sequence[str] = (),
    max_tries: int = 24,
    second_query: str = "reachable",
) -> TeacherTrajectory | None:
    """Script one demonstration for `example`, or None when the evidence never holds the answer.

    When the first evidence lacks the answer, the second search tries `hints` first (gold
    titles the first search did not return; only `teacher_hints` passes them), then
    `reachable_queries` of the evidence shown, at most `max_tries` searches in all. With
    `second_query="top_title"` the only fallback is the question plus the top title (the teacher of
    results/h200). Only the search that found the answer appears in the demonstration.
    """
    from helpers.protocol import build_messages, tool_message

    if second_query not in ("reachable", "top_title"):
        raise ValueError(f"second_query is 'reachable' or 'top_title', got {second_query!r}")
    messages = build_messages(example.question)
    question = example.question.strip()
    result = search_client.search(question)
    observation = fit_observation(tokenizer, result, max_tool_response_tokens)
    if observation is None:
        return None
    messages.append(_call_message(question, "call_1"))
    messages.append(tool_message("call_1", observation))
    found = find_answer_in(observation, example.answers)
    if found is not None:
        messages.append({"role": "assistant", "content": f"Answer: {found}"})
        return TeacherTrajectory(example, messages, [question], found)
    if not result.ok or not result.items:
        return None
    shown = [item for i, item in enumerate(result.items, start=1) if f"[{i}] Title:" in observation]
    seen = {item.title.strip() for item in result.items}
    candidates = [h.strip() for h in hints if h.strip() and h.strip() not in seen
                  and not spells_answer(h, example.answers)]
    if second_query == "top_title":
        candidates.append(f"{question} {result.items[0].title.strip()}")
    else:
        candidates += reachable_queries(question, shown, example.answers)
    for query in list(dict.fromkeys(candidates))[:max_tries]:
        second = search_client.search(query)
        observation = fit_observation(tokenizer, second, max_tool_response_tokens)
        found = find_answer_in(observation, example.answers) if observation is not None else None
        if found is not None:
            messages.append(_call_message(query, "call_2"))
            messages.append(tool_message("call_2", observation))
            messages.append({"role": "assistant", "content": f"Answer: {found}"})
            return TeacherTrajectory(example, messages, [question, query], found)
    return None


def gold_titles(examples, split: str = "train") -> dict[str, list[str]]:
    """Titles of each example's gold passages (from the split's metadata and the local corpus).

    The teacher's hints for a second search. Empty when the local index is not available.
    """
    from helpers.data import load_rows
    from helpers.search.local import get_index

    try:
        titles = {p.id: p.title for p in get_index().passages}
        rows = {r["id"]: r.get("metadata") or {} for r in load_rows(split)}
    except (FileNotFoundError, OSError):
        return {}
    return {e.id: [titles[g] for g in rows.get(e.id, {}).get("gold_passage_ids") or [] if g in titles]
            for e in examples}


def build_sft_datum(tokenizer, messages: list[dict[str, Any]], max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS) -> TrainingDatum:
    """Render the chat once; weight 1 on every assistant span (and its end-of-turn token) only.

    Each assistant span is located by rendering the conversation up to it twice: with the
    generation prompt (where sampling would start) and including the message (where it ends).
    Both renders must be token prefixes of the full conversation, exactly as in the rollout.
    """
    from helpers.protocol import render_tokens

    full = render_tokens(tokenizer, messages, add_generation_prompt=False)
    weights = [0.0] * len(full)
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start_tokens = render_tokens(tokenizer, messages[:index], add_generation_prompt=True)
        end_tokens = render_tokens(tokenizer, messages[: index + 1], add_generation_prompt=False)
        if full[: len(start_tokens)] != start_tokens or full[: len(end_tokens)] != end_tokens:
            raise ValueError(
                f"assistant message {index}: the chat template does not render the conversation "
                "as a token prefix; this tokenizer cannot be used for multi-turn training"
            )
        end = len(end_tokens)
        # The template closes a turn with end-of-turn plus a newline; train up to end-of-turn.
        while end > len(start_tokens) and tokenizer.decode(full[end - 1 : end]).strip() == "":
            end -= 1
        for position in range(len(start_tokens), end):
            weights[position] = 1.0
    if not any(weights):
        raise ValueError("the conversation has no assistant tokens to train on")
    input_tokens, target_tokens, target_weights = full[:-1], full[1:], weights[1:]
    if len(input_tokens) > max_tokens:
        raise ValueError(f"SFT datum has {len(input_tokens)} tokens, more than {max_tokens}")
    datum = pytrio.Datum(
        model_input=pytrio.ModelInput.from_ints(input_tokens),
        loss_fn_inputs={
            "target_tokens": np.asarray(target_tokens, dtype=np.int64),
            "weights": np.asarray(target_weights, dtype=np.float32),
        },
    )
    return TrainingDatum(datum, len(input_tokens))


def marker_spans(tokenizer, ids: Sequence[int], trained: Sequence[float], marker: str = "<tool_call>"):
    """(start, end) of each trained token run whose text begins with `marker`.

    Found by text, not by `tokenizer.encode(marker)`: when the marker is spelled in pieces the
    template's `>` and the newline after it merge into one token (Qwen: `>\n`), so the encoded
    marker never appears as such in the rendered conversation.
    """
    spans = []
    for start in range(1, len(ids)):
        if trained[start] <= 0:
            continue
        text = ""
        for end in range(start, min(len(ids), start + 16)):
            text += tokenizer.decode([ids[end]])
            if len(text) >= len(marker):
                if text.startswith(marker):
                    spans.append((start, end + 1))
                break
            if not marker.startswith(text):
                break
    return spans


def call_marker_probability(sampling_client, tokenizer, demos, limit: int = 8) -> float | None:
    """Mean probability the policy gives the whole `<tool_call>` marker where a demonstration opens a call.

    Teacher-forced (`compute_logprobs`, no sampling), so it is cheap and compiles nothing. Near 1
    after a good SFT. Measured on 2026-11-30: under a tokenizer whose marker was an untrained
    single id, the SFT policy wrote `<|im_start|>` there instead and every rollout was invalid.
    Only assistant tokens count (the system prompt mentions the tags too). None: no call to check.
    """
    probabilities = []
    for demo in demos[:limit]:
        datum = build_sft_datum(tokenizer, demo.messages).datum
        full = list(datum.model_input.to_ints()) + [int(datum.loss_fn_inputs["target_tokens"].data[-1])]
        trained = [0.0] + list(datum.loss_fn_inputs["weights"].data)  # weight of full[i]
        spans = marker_spans(tokenizer, full, trained)
        if not spans:
            continue
        logprobs = _result(sampling_client.compute_logprobs(pytrio.ModelInput.from_ints(full)))
        probabilities += [math.exp(sum(logprobs[start:end])) for start, end in spans]
    return sum(probabilities) / len(probabilities) if probabilities else None


def weight_sft_micro_batch(micro_batch: Sequence[TrainingDatum], total_samples: int) -> list[pytrio.Datum]:
    """cross_entropy is linear in its weights: scale by n_k / N, as GRPO scales advantages."""
    scale = np.float32(len(micro_batch) / total_samples)
    return [
        pytrio.Datum(
            model_input=item.datum.model_input,
            loss_fn_inputs={
                "target_tokens": item.datum.loss_fn_inputs["target_tokens"].to_numpy(),
                "weights": item.datum.loss_fn_inputs["weights"].to_numpy() * scale,
            },
        )
        for item in micro_batch
    ]


# --------------------------------------------------------------------------- the SFT run


@dataclass
class SFTConfig:
    model: str | None = None
    backend: str | None = None
    search_backend: str = "local"
    split: str = "train"
    limit: int | None = None  # questions to script (None: the whole train split)
    epochs: int = 2
    batch_size: int = 16  # datums per optimiser step
    learning_rate: float = 2e-4
    grad_clip_norm: float = 1.0
    lora_rank: int = 16
    train_unembed: bool = False
    max_tool_response_tokens: int = 768
    micro_batch_datums: int = 16
    micro_batch_tokens: int = 16384
    seed: int = 0
    teacher_hints: bool = False  # second search may try the gold passages' titles first (run h200_hints)
    repeat_two_search: int = 1  # each two-search demonstration is trained on this many times per epoch
    second_query: str = "reachable"  # or "top_title": the teacher of results/h200 (see teacher_trajectory)
    out: str = "results/runs/sft"
    resume: bool = True  # a finished SFT run in `out` is reused, not redone


@dataclass
class SFTResult:
    state_path: str  # --init-from for GRPO (load_state)
    sampler_path: str  # model_path for create_sampling_client / evaluate
    demonstrations: int
    skipped: int
    steps: int
    seconds: float
    two_searches: int = 0  # demonstrations with a second search
    call_marker_prob: float | None = None  # see call_marker_probability; low means the format cannot be emitted
    losses: list[float] = field(default_factory=list)


def build_demonstrations(examples, search_client, tokenizer, max_tool_response_tokens=768, progress=True,
                         hints: dict[str, list[str]] | None = None, second_query: str = "reachable"):
    from tqdm.auto import tqdm

    kept, skipped = [], 0
    hints = hints or {}
    for example in tqdm(examples, desc="scripted teacher", disable=not progress):
        demo = teacher_trajectory(example, search_client, tokenizer, max_tool_response_tokens,
                                  hints.get(example.id, ()), second_query=second_query)
        if demo is None:
            skipped += 1
        else:
            kept.append(demo)
    return kept, skipped


def sft_datums(render, demos, repeat_two_search: int = 1) -> list:
    """One datum per demonstration, a two-search one `repeat_two_search` times (rendered once).

    On 2026-11-30 a policy trained on 66 two-search demonstrations among 699 never searched twice;
    repeated 4 times they made it search again on 54 % of HotpotQA questions (results/h200_reach).
    """
    out = []
    for demo in demos:
        datum = render(demo.messages)
        out += [datum] * (repeat_two_search if demo.search_calls > 1 else 1)
    return out


def sft_examples(config: SFTConfig) -> list:
    """The questions the teacher scripts: the split's first `limit`, in file order.

    The split file is already shuffled (helpers.data.prepare_data), and GRPO takes the questions
    after them (`skip=limit`), so the two stages never share a question. Until 2026-11-30 this
    shuffled again before cutting, and 467 of GRPO's 1,105 questions had been SFT questions.
    """
    from helpers.data import load_examples

    return load_examples(config.split, limit=config.limit)


def run_sft(config: SFTConfig, service=None, search_client=None, examples=None, progress: bool = True) -> SFTResult:
    """Script demonstrations from the train split, fine-tune a LoRA on them, save a checkpoint."""
    from tqdm.auto import tqdm

    run = RunDir(config.out)
    done = run.path / "result.json"
    if config.resume and done.exists():
        return SFTResult(**json.loads(done.read_text()))
    from helpers import config as course_config
    from helpers.engine import connect

    if config.split != "train":
        raise ValueError("the SFT teacher may only use the train split (evaluation questions must stay unseen)")
    started = time.perf_counter()
    model = config.model or course_config.default_model()
    service = service or connect(config.backend)
    training_client = service.create_lora_training_client(
        base_model=model, rank=config.lora_rank, seed=config.seed, train_unembed=config.train_unembed
    )
    tokenizer = training_client.get_tokenizer()
    if search_client is None:
        from helpers.search import create_search_client

        search_client = create_search_client(config.search_backend)
    if examples is None:
        examples = sft_examples(config)
    hints = gold_titles(examples, config.split) if config.teacher_hints else {}
    demos, skipped = build_demonstrations(examples, search_client, tokenizer, config.max_tool_response_tokens, progress,
                                          hints, config.second_query)
    if not demos:
        raise RuntimeError("the scripted teacher found no answer in the evidence for any question; is the index built?")
    with (run.path / "demonstrations.jsonl").open("w") as handle:
        for demo in demos:
            handle.write(json.dumps({"id": demo.example.id, "data_source": demo.example.data_source,
                                     "queries": demo.queries, "answer": demo.answer}) + "\n")
    datums = sft_datums(lambda messages: build_sft_datum(tokenizer, messages), demos, config.repeat_two_search)
    adam = pytrio.AdamParams(learning_rate=config.learning_rate, grad_clip_norm=config.grad_clip_norm)
    rng = random.Random(config.seed)
    losses: list[float] = []
    steps = 0
    batches_per_epoch = -(-len(datums) // config.batch_size)
    bar = tqdm(total=config.epochs * batches_per_epoch, desc="SFT steps", disable=not progress)
    for epoch in range(config.epochs):
        order = list(range(len(datums)))
        rng.shuffle(order)
        for start in range(0, len(order), config.batch_size):
            batch = [datums[i] for i in order[start : start + config.batch_size]]
            loss_sum, token_count = 0.0, 0.0
            for micro_batch in pack_micro_batches(batch, config.micro_batch_datums, config.micro_batch_tokens):
                output = _result(training_client.forward_backward(
                    weight_sft_micro_batch(micro_batch, len(batch)), loss_fn="cross_entropy"))
                metrics = getattr(output, "metrics", {}) or {}
                # Weighted loss_sum: divide by weight to report plain per-token NLL.
                weight = len(micro_batch) / len(batch)
                loss_sum += float(metrics.get("loss_sum", metrics.get("loss:sum", 0.0))) / weight
                token_count += float(metrics.get("token_count", 0.0))
            _result(training_client.optim_step(adam))
            steps += 1
            nll = loss_sum / token_count if token_count else float("nan")
            losses.append(nll)
            run.append_jsonl(run.metrics, {"step": steps, "epoch": epoch, "nll": nll, "datums": len(batch),
                                           "padded_tokens": sum(padded_tokens(b) for b in [batch])})
            bar.update(1)
            bar.set_postfix(nll=f"{nll:.3f}")
    bar.close()
    name = Path(config.out).name
    state = _result(training_client.save_state(f"{name}-state"))
    sampler = _result(training_client.save_weights_for_sampler(f"{name}-sampler"))
    result = SFTResult(
        state_path=materialise_checkpoint(str(getattr(state, "path", state)), run.path / "state"),
        sampler_path=materialise_checkpoint(str(getattr(sampler, "path", sampler)), run.path / "sampler"),
        demonstrations=len(demos),
        skipped=skipped,
        two_searches=sum(demo.search_calls > 1 for demo in demos),
        steps=steps,
        seconds=time.perf_counter() - started,
        losses=losses,
    )
    sampling_client = service.create_sampling_client(base_model=model, model_path=result.sampler_path)
    result.call_marker_prob = call_marker_probability(sampling_client, tokenizer, demos)
    warning = call_marker_warning(result.call_marker_prob, len(demos) * config.epochs, steps)
    if warning:
        print(warning, flush=True)
    run.write_json("config.json", {"sft": dataclasses.asdict(config), "model": model})
    run.write_json("result.json", dataclasses.asdict(result))
    return result


# Fewer demonstrations than this (counted once per epoch) cannot be expected to teach the call.
ENOUGH_DEMONSTRATIONS_SEEN = 32


def call_marker_warning(probability: float | None, demonstrations_seen: int, steps: int) -> str | None:
    """The warning for a policy that still does not open its search calls after SFT, naming the
    likely cause: too little training (the fast profile's one-step SFT), or, after a real warm
    start, a tokenizer that splits the marker otherwise than the weights learned."""
    if probability is None or probability >= 0.5:
        return None
    head = (f"WARNING: after SFT the policy gives <tool_call> probability {probability:.2f} where its "
            "demonstrations call search, so most rollouts will not parse. ")
    if demonstrations_seen < ENOUGH_DEMONSTRATIONS_SEEN:
        return head + (f"{demonstrations_seen} demonstration(s) in {steps} optimiser step(s) are too few to teach "
                       "the call: expected in the fast profile, which only checks that the code runs. Train on more "
                       "questions (sft_questions, sft_epochs) to see the warm start work.")
    return head + ("Check how the tokenizer splits the marker (notebook 06, Trap 4) before training further.")


def main(argv: Sequence[str] | None = None) -> SFTResult:
    parser = argparse.ArgumentParser(prog="python -m helpers.sft", description="SFT warm start (scripted teacher)")
    add_config_arguments(parser, SFTConfig)
    result = run_sft(config_from_args(SFTConfig, parser.parse_args(argv)))
    print(json.dumps({k: v for k, v in dataclasses.asdict(result).items() if k != "losses"}, indent=2))
    return result


if __name__ == "__main__":
    main()
