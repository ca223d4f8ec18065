"""Evaluate a policy in the same environment it was trained in (Happy-LLM §8.3.8).

`evaluate(EvalConfig(...))` reuses `rollout_batch` with `group_size=1` and the training budgets,
so the protocol, search backend, budgets, questions and answer checker are identical for every
model. `model_path=None` evaluates the base model; a path from `save_weights_for_sampler` (or
an adapter folder) evaluates a checkpoint. Two baselines skip the agent loop:

- `closed_book`: the base model answers from memory (no tool, no evidence);
- `rag`: one forced retrieval of the question, evidence pasted into the prompt, one answer.

Every question becomes one JSONL row; `helpers.analyse` turns rows into tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pytrio
from tqdm.auto import tqdm

from helpers import config as course_config
from helpers.analyse import format_table, summarise
from helpers.data import load_examples
from helpers.engine import connect
from helpers.evidence import evidence_fields
from helpers.metrics import trajectory_facts
from helpers.protocol import build_messages, stop_sequences
from helpers.reward import contains_answer, score_answer
from helpers.rollout import RolloutConfig, observe_search, rollout_batch
from helpers.runs import add_config_arguments, config_from_args, updated, write_jsonl
from helpers.runs import result as _result
from helpers.search import SEARCH_TOPK, check_client_topk, check_search_topk, create_search_client, format_results
from helpers.tracking import DEFAULT_TRACKER, evaluation_run_name, log_evaluation, open_tracker

MODES = ("agent", "closed_book", "rag")

CLOSED_BOOK_SYSTEM = (
    "You answer factual questions from your own knowledge. Think briefly if you need to, then "
    "end with exactly one line of the form `Answer: <short answer>` (a few words)."
)
RAG_SYSTEM = (
    "You answer factual questions using the evidence given with the question. Think briefly if "
    "you need to, then end with exactly one line of the form `Answer: <short answer>` (a few words)."
)


@dataclass
class EvalConfig:
    model: str | None = None
    backend: str | None = None
    model_path: str | None = None  # None: the base model
    mode: str = "agent"  # agent | closed_book | rag
    label: str | None = None  # name of this run in tables (default: mode or the checkpoint)
    split: str = "test"
    data_source: str | None = None
    limit: int | None = None
    # budgets and sampling, the training defaults but greedy: one deterministic answer per question;
    # rollout.search_budget states a budget in the prompt (budget-forced evaluation)
    rollout: RolloutConfig = field(default_factory=lambda: RolloutConfig(group_size=1, temperature=0.0))
    search_backend: str = "local"
    search_topk: int = SEARCH_TOPK  # passages one search returns
    batch_size: int = 64
    output: str | None = None  # JSONL path
    tracker: str = DEFAULT_TRACKER  # or 'tensorboard' / 'swanlab': the summary table sent there too

    def __post_init__(self) -> None:
        if isinstance(self.rollout, dict):  # from JSON (a saved config) or a preset
            self.rollout = updated(RolloutConfig(group_size=1, temperature=0.0), self.rollout)
        check_search_topk(self.search_topk)

    def rollout_config(self) -> RolloutConfig:
        """The rollout of an evaluation: one trajectory per question."""
        return dataclasses.replace(self.rollout, group_size=1)

    def resolved_label(self) -> str:
        if self.label:
            return self.label
        return self.mode if self.model_path is None else f"{self.mode}:{Path(self.model_path).name}"


def _row(example, mode: str, label: str, text: str, scored, **counts: Any) -> dict[str, Any]:
    """One question's row; `scored` has the reward's fields (a Trajectory or a RewardResult)."""
    return {"id": example.id, "question": example.question, "answers": list(example.answers),
            "data_source": example.data_source, "mode": mode, "label": label, "final_text": text,
            "answer": getattr(scored, "answer", None), "reward": scored.reward,
            "valid_format": bool(scored.valid_format), "exact_match": bool(scored.exact_match),
            # lenient: a gold answer anywhere in the final text (normalised, on word boundaries)
            "lenient_match": contains_answer(text, example.answers), **counts}


def trajectory_row(trajectory, mode: str, label: str) -> dict[str, Any]:
    facts = trajectory_facts(trajectory)
    counts = {key: facts[key] for key in ("search_calls", "failed_searches", "truncated_observations",
                                          "assistant_turns", "sampled_tokens", "trajectory_tokens")}
    return _row(
        trajectory.example, mode, label, trajectory.final_text, trajectory,
        **counts,
        queries=[s.query for s in trajectory.searches],
        end_reason=trajectory.end_reason,
        **evidence_fields(trajectory),  # for scoring retrieval afterwards; the rollout never sees them
    )


def single_turn_messages(example, mode: str, search_client=None, tokenizer=None, max_tool_response_tokens=None):
    """Messages of the two baselines that skip the agent loop."""
    if mode == "closed_book":
        return [{"role": "system", "content": CLOSED_BOOK_SYSTEM},
                {"role": "user", "content": f"Question: {example.question.strip()}"}], []

    question = example.question.strip()
    result = search_client.search(question)
    # the evidence the agent's own first search of the question would read
    evidence = (observe_search(tokenizer, build_messages(question), question, "call_1", result, max_tool_response_tokens)
                or format_results(result, max_items=1))
    user = f"Evidence (search results for the question):\n{evidence}\n\nQuestion: {example.question.strip()}"
    return [{"role": "system", "content": RAG_SYSTEM}, {"role": "user", "content": user}], [result]


def _single_turn_batch(sampling_client, tokenizer, search_client, examples, config: EvalConfig, label: str):
    rollout = config.rollout
    params = pytrio.SamplingParams(
        max_tokens=rollout.max_assistant_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
        seed=rollout.seed, stop=stop_sequences(tokenizer),
    )
    prepared = []
    for example in examples:
        messages, results = single_turn_messages(example, config.mode, search_client, tokenizer,
                                                 rollout.max_tool_response_tokens)
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = list(tokenizer.encode(text, add_special_tokens=False))
        future = sampling_client.sample(prompt=pytrio.ModelInput.from_ints(prompt), num_samples=1, sampling_params=params)
        prepared.append((example, results, prompt, future))
    rows = []
    for example, results, prompt, future in prepared:
        sequence = _result(future).sequences[0]
        text = tokenizer.decode(sequence.tokens, skip_special_tokens=True).strip()
        scored = score_answer(text, example.answers)
        rows.append(_row(
            example, config.mode, label, text, scored,
            search_calls=len(results),
            queries=[example.question.strip()] * len(results),
            failed_searches=sum(1 for r in results if not r.ok),
            truncated_observations=0,
            assistant_turns=1,
            sampled_tokens=len(sequence.tokens),
            trajectory_tokens=len(prompt) + len(sequence.tokens),
            end_reason="answer" if scored.valid_format else "invalid",
        ))
    return rows


def evaluate(
    config: EvalConfig,
    service=None,
    search_client=None,
    examples=None,
    sampling_client=None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """One row per question; also written to `config.output` (JSONL) when it is set."""
    if config.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {config.mode!r}")
    if config.mode != "agent" and config.model_path is not None:
        raise ValueError("closed_book and rag are baselines of the base model; leave model_path empty")
    if search_client is not None:
        check_client_topk(search_client, config.search_topk)
    model = config.model or course_config.default_model()
    tracker = open_tracker(config.tracker, evaluation_run_name(config.output, config.resolved_label()),
                           {"eval": dataclasses.asdict(config), "model": model})
    if sampling_client is None:
        service = service or connect(config.backend)
        sampling_client = service.create_sampling_client(base_model=model, model_path=config.model_path)
    tokenizer = sampling_client.get_tokenizer()
    if search_client is None and config.mode != "closed_book":
        search_client = create_search_client(config.search_backend, topk=config.search_topk)
    if examples is None:
        examples = load_examples(config.split, data_source=config.data_source, limit=config.limit)
    examples = list(examples)
    label = config.resolved_label()
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    bar = tqdm(total=len(examples), desc=f"eval {label}", disable=not progress)
    for start in range(0, len(examples), config.batch_size):
        batch = examples[start : start + config.batch_size]
        if config.mode == "agent":
            trajectories = rollout_batch(sampling_client, tokenizer, search_client, batch, config.rollout_config(),
                                         progress=False)
            rows.extend(trajectory_row(t, config.mode, label) for t in trajectories)
        else:
            rows.extend(_single_turn_batch(sampling_client, tokenizer, search_client, batch, config, label))
        bar.update(len(batch))
    bar.close()
    seconds = time.perf_counter() - started
    for row in rows:
        row["model"] = model
        row["model_path"] = config.model_path
    if config.output:
        write_jsonl(config.output, rows)
        meta = {"eval": dataclasses.asdict(config), "model": model, "questions": len(rows), "seconds": seconds}
        Path(config.output).with_suffix(".config.json").write_text(json.dumps(meta, indent=2))
    if tracker.active:
        log_evaluation(tracker, rows)
    tracker.close()
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m helpers.eval", description="Evaluate a policy or a baseline")
    add_config_arguments(parser, EvalConfig)
    config = config_from_args(EvalConfig, parser.parse_args(argv))
    rows = evaluate(config)
    print(format_table({config.resolved_label(): summarise(rows)}))
    return rows


if __name__ == "__main__":
    main()
