"""SFT warm start: teach the format before GRPO (the first stage in Perplexity's post).

The base model ends with a well-formed `Answer:` line on almost every question but almost never
calls the search tool, and its answers are mostly wrong (the recorded base row:
`helpers.course.recorded.eval_summary("base_agent")`). GRPO would start from groups that score 0 throughout
and show no search to reinforce. The scripted teacher (`helpers.teacher`) demonstrates searching
first, from the TRAIN split only: it searches the question, searches again with a query the policy
could have written itself when no gold answer string appears in the evidence, and answers with the
gold string as the evidence spells it (questions whose answer never shows up are skipped). This
module trains a LoRA on those demonstrations with `cross_entropy`: each conversation is rendered by
the model's own chat template (native tool calls) and weighted 1 on assistant tokens (their
end-of-turn token included) and 0 on everything else (system prompt, question, observations;
`helpers.datums.build_sft_datum`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pytrio
from tqdm.auto import tqdm

from helpers import config as course_config
from helpers.data import load_examples
from helpers.datums import build_sft_datum, pack_micro_batches, padded_tokens, weight_micro_batch_for_global_mean
from helpers.engine import connect
from helpers.rollout import RolloutConfig
from helpers.runs import (RunDir, add_config_arguments, append_jsonl, config_from_args, materialise_checkpoint,
                          write_jsonl)
from helpers.runs import result as _result
from helpers.search import create_search_client
from helpers.teacher import build_demonstrations, gold_titles
from helpers.tracking import DEFAULT_TRACKER, open_tracker, run_name


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
    after a good SFT; low when, e.g., the marker is an untrained single id, and then no rollout
    parses. Only assistant tokens count (the system prompt mentions the tags too). None: no call.
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
    max_tool_response_tokens: int = RolloutConfig.max_tool_response_tokens  # observations as GRPO shows them
    micro_batch_datums: int = 16
    micro_batch_tokens: int = 16384
    seed: int = 0
    teacher_hints: bool = False  # second search may try the gold passages' titles first (run h200_hints)
    repeat_two_search: int = 1  # each two-search demonstration is trained on this many times per epoch
    second_query: str = "reachable"  # or "top_title": the teacher of results/h200 (see teacher_trajectory)
    # share of HotpotQA questions answered by the first evidence that still search for the bridge passage
    decompose: float = 0.0
    rewrite_first_query: str = "never"  # "gain" / "no_loss": keywords first where they retrieve more gold
    out: str = "results/runs/sft"
    resume: bool = True  # a finished SFT run in `out` is reused, not redone
    tracker: str = DEFAULT_TRACKER  # or 'tensorboard' / 'swanlab': the metrics mirrored there (helpers.tracking)


@dataclass
class SFTResult:
    state_path: str  # --init-from for GRPO (load_state)
    sampler_path: str  # model_path for create_sampling_client / evaluate
    demonstrations: int
    skipped: int
    steps: int
    seconds: float
    two_searches: int = 0  # demonstrations with a second search
    decomposed: int = 0  # of those, searched again although the first evidence held the answer
    rewritten: int = 0  # demonstrations whose first query is keywords, not the question
    call_marker_prob: float | None = None  # see call_marker_probability; low means the format cannot be emitted
    losses: list[float] = field(default_factory=list)


def sft_datums(render, demos, repeat_two_search: int = 1) -> list:
    """One datum per demonstration, a two-search one `repeat_two_search` times (rendered once):
    a few two-search demonstrations among many one-search ones teach no second search."""
    out = []
    for demo in demos:
        datum = render(demo.messages)
        out += [datum] * (repeat_two_search if demo.search_calls > 1 else 1)
    return out


def sft_examples(config: SFTConfig) -> list:
    """The questions the teacher scripts: the split's first `limit`, in file order (the file is
    shuffled once by prepare_data); GRPO takes those after them (`skip=limit`), so no question is shared."""
    return load_examples(config.split, limit=config.limit)


def train_on_demonstrations(training_client, datums: list, config: SFTConfig, run: RunDir, tracker,
                            progress: bool = True) -> list[float]:
    """`config.epochs` shuffled passes of `cross_entropy` over the datums, one optimiser step per
    `config.batch_size`; returns the per-token NLL of each step (each step logged to the run and tracker)."""
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
                    weight_micro_batch_for_global_mean(micro_batch, len(batch)), loss_fn="cross_entropy"))
                metrics = getattr(output, "metrics", {}) or {}
                # Weighted loss_sum: divide by weight to report plain per-token NLL.
                weight = len(micro_batch) / len(batch)
                loss_sum += float(metrics.get("loss_sum", metrics.get("loss:sum", 0.0))) / weight
                token_count += float(metrics.get("token_count", 0.0))
            _result(training_client.optim_step(adam))
            steps += 1
            nll = loss_sum / token_count if token_count else float("nan")
            losses.append(nll)
            row = {"step": steps, "epoch": epoch, "nll": nll, "datums": len(batch),
                   "padded_tokens": padded_tokens(batch)}
            append_jsonl(run.metrics, row)
            tracker.log(row)
            bar.update(1)
            bar.set_postfix(nll=f"{nll:.3f}")
    bar.close()
    return losses


def run_sft(config: SFTConfig, service=None, search_client=None, examples=None, progress: bool = True) -> SFTResult:
    """Script demonstrations from the train split, fine-tune a LoRA on them, save a checkpoint."""
    run = RunDir(config.out)
    done = run.path / "result.json"
    if config.resume and done.exists():
        return SFTResult(**json.loads(done.read_text()))
    if config.split != "train":
        raise ValueError("the SFT teacher may only use the train split (evaluation questions must stay unseen)")
    started = time.perf_counter()
    model = config.model or course_config.default_model()
    # closed however the run ends: a failure half-way still leaves its curves in the tracker
    settings = {"sft": dataclasses.asdict(config), "model": model}
    with open_tracker(config.tracker, run_name(config.out), settings) as tracker:
        service = service or connect(config.backend)
        training_client = service.create_lora_training_client(
            base_model=model, rank=config.lora_rank, seed=config.seed, train_unembed=config.train_unembed
        )
        tokenizer = training_client.get_tokenizer()
        if search_client is None:
            search_client = create_search_client(config.search_backend)
        if examples is None:
            examples = sft_examples(config)
        hints = gold_titles(examples, config.split) if config.teacher_hints else {}
        demos, skipped = build_demonstrations(examples, search_client, tokenizer, config.max_tool_response_tokens,
                                              progress, hints, config.second_query, config.decompose,
                                              config.rewrite_first_query, config.seed)
        if not demos:
            raise RuntimeError("the scripted teacher found no answer in the evidence for any question; "
                               "is the index built?")
        write_jsonl(run.path / "demonstrations.jsonl", [
            {"id": demo.example.id, "data_source": demo.example.data_source, "queries": demo.queries,
             "answer": demo.answer, "answer_search": demo.answer_search, "rewritten": demo.rewritten,
             "decomposed": demo.decomposed}
            for demo in demos])
        datums = sft_datums(lambda messages: build_sft_datum(tokenizer, messages), demos, config.repeat_two_search)
        losses = train_on_demonstrations(training_client, datums, config, run, tracker, progress)
        steps = len(losses)
        name = Path(config.out).name
        state = _result(training_client.save_state(f"{name}-state"))
        sampler = _result(training_client.save_weights_for_sampler(f"{name}-sampler"))
        result = SFTResult(
            state_path=materialise_checkpoint(state, run.path / "state"),
            sampler_path=materialise_checkpoint(sampler, run.path / "sampler"),
            demonstrations=len(demos),
            skipped=skipped,
            two_searches=sum(demo.search_calls > 1 for demo in demos),
            decomposed=sum(demo.decomposed for demo in demos),
            rewritten=sum(demo.rewritten for demo in demos),
            steps=steps,
            seconds=time.perf_counter() - started,
            losses=losses,
        )
        sampling_client = service.create_sampling_client(base_model=model, model_path=result.sampler_path)
        result.call_marker_prob = call_marker_probability(sampling_client, tokenizer, demos)
        warning = call_marker_warning(result.call_marker_prob, len(demos) * config.epochs, steps)
        if warning:
            print(warning, flush=True)
        run.write_json("config.json", settings)
        run.write_json("result.json", dataclasses.asdict(result))
        tracker.log_table("sft/result", [{k: v for k, v in dataclasses.asdict(result).items() if k != "losses"}], steps)
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
    return head + ("Check how the tokenizer splits the marker (`helpers.models.settle_marker_tokens`) before training further.")


def main(argv: Sequence[str] | None = None) -> SFTResult:
    parser = argparse.ArgumentParser(prog="python -m helpers.sft", description="SFT warm start (scripted teacher)")
    add_config_arguments(parser, SFTConfig)
    result = run_sft(config_from_args(SFTConfig, parser.parse_args(argv)))
    print(json.dumps({k: v for k, v in dataclasses.asdict(result).items() if k != "losses"}, indent=2))
    return result


if __name__ == "__main__":
    main()
