"""SFT warm start: teach the format with a scripted teacher before GRPO (the first stage in Perplexity's post).

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
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytrio
from tqdm.auto import tqdm

from helpers import config as course_config
from helpers.data import load_examples, load_rows
from helpers.engine import connect
from helpers.evidence import find_answer_in, gold_passage_ids
from helpers.protocol import build_messages, render_tokens, tool_message
from helpers.reward import normalize_answer
from helpers.rollout import RolloutConfig
from helpers.runs import (RunDir, add_config_arguments, append_jsonl, config_from_args, materialise_checkpoint,
                          write_jsonl)
from helpers.runs import result as _result
from helpers.search import create_search_client, format_results
from helpers.search.local import TOKEN_PATTERN, analyze, get_index
from helpers.tracking import DEFAULT_TRACKER, open_tracker, run_name
from helpers.train import (MAX_TRAIN_CONTEXT_TOKENS, TrainingDatum, pack_micro_batches, padded_tokens,
                           weight_micro_batch_for_global_mean)


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
    call = {"type": "function", "id": call_id, "function": {"name": "search", "arguments": {"query": query}}}
    return [{"role": "assistant", "content": "", "tool_calls": [call]}, tool_message(call_id, observation)]


TOOL_TURN_OVERHEAD = 16  # template tokens around a tool message (role header, <tool_response> tags)


def fit_observation(tokenizer, result, max_tokens: int | None) -> str | None:
    """The observation the rollout would show: as many whole items, in rank order, as fit.

    Mirrors helpers.rollout.fit_tool_content (whole items under max_tool_response_tokens), so
    SFT demonstrations look like GRPO observations. None when not even one item fits.
    """
    if tokenizer is None or max_tokens is None or not (result.ok and result.items):
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
    raw_hit = find_answer_in(format_results(raw), example.answers) is not None
    for query in [q for q in keyword_queries(question, index) if not spells_answer(q, example.answers)][:max_tries]:
        result = search_client.search(query)
        found = _gold_in(result, gold)
        if found - raw_gold and len(found) >= len(raw_gold):
            return query
        if mode == "no_loss" and found >= raw_gold and (
                not raw_hit or find_answer_in(format_results(result), example.answers) is not None):
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

    def answer(text: str) -> dict[str, str]:
        return {"role": "assistant", "content": f"Answer: {text}"}

    messages = build_messages(example.question)
    question = example.question.strip()
    first = rewritten_first_query(example, search_client, gold, rewrite) if rewrite != "never" else None
    first = first or question
    result = search_client.search(first)
    observation = fit_observation(tokenizer, result, max_tool_response_tokens)
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
            second_observation = fit_observation(tokenizer, second, max_tool_response_tokens)
            if second_observation is not None:
                messages += [*_search_turn(query, "call_2", second_observation), answer(found)]
                return TeacherTrajectory(example, messages, [first, query], found, answer_search=0,
                                         rewritten=rewritten, decomposed=True)
        return TeacherTrajectory(example, [*messages, answer(found)], [first], found, rewritten=rewritten)
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
        observation = fit_observation(tokenizer, second, max_tool_response_tokens)
        found = find_answer_in(observation, example.answers) if observation is not None else None
        if found is not None:
            messages += [*_search_turn(query, "call_2", observation), answer(found)]
            return TeacherTrajectory(example, messages, [first, query], found, answer_search=1, rewritten=rewritten)
    return None


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


def build_sft_datum(tokenizer, messages: list[dict[str, Any]], max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS) -> TrainingDatum:
    """Render the chat once; weight 1 on every assistant span (and its end-of-turn token) only.

    Each assistant span is located by rendering the conversation up to it twice: with the
    generation prompt (where sampling would start) and including the message (where it ends).
    Both renders must be token prefixes of the full conversation, exactly as in the rollout.
    """
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
