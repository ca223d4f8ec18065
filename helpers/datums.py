"""Trajectories and demonstrations as PyTRIO Datums, and Datums packed into micro-batches.

A GRPO datum (`build_datum`) is the stitched trajectory shifted by one: sampled tokens carry the
sampler's logprob and the trajectory's advantage, prompt and observation tokens carry 0. An SFT
datum (`build_sft_datum`) carries a weight of 1 on assistant tokens instead. Both go through the
same packing (`pack_micro_batches`) and the same weighting for a global mean
(`weight_micro_batch_for_global_mean`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pytrio

from helpers.protocol import render_tokens
from helpers.rollout import stitch

MAX_TRAIN_CONTEXT_TOKENS = 8192


@dataclass
class TrainingDatum:
    """One trajectory as a PyTRIO Datum, plus its input length (what packing sorts by)."""

    datum: pytrio.Datum
    length: int


def build_datum(trajectory, max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS) -> TrainingDatum:
    """Stitch every assistant turn of a trajectory into one shifted training sequence.

    The first prompt and each later observation delta (tool results, chat-template glue) are
    context: old logprob 0 and advantage 0. Sampled assistant tokens keep their sampler logprobs
    and carry the trajectory's advantage. The shift happens once, at the very end.
    """
    if not trajectory.turns:
        raise ValueError("cannot build a training datum from a trajectory with no assistant turns")
    stitched = stitch(trajectory)
    sampled = stitched.sampled
    if not any(sampled):
        raise ValueError("cannot build a training datum from a trajectory with no assistant tokens")
    advantage = float(trajectory.advantage)
    advantages = [advantage if is_sampled else 0.0 for is_sampled in sampled]

    input_tokens = stitched.tokens[:-1]
    if len(input_tokens) > max_tokens:
        raise ValueError(
            f"datum has {len(input_tokens)} input tokens, more than the training context of "
            f"{max_tokens}; lower max_trajectory_tokens in the rollout config"
        )
    datum = pytrio.Datum(
        model_input=pytrio.ModelInput.from_ints(input_tokens),
        loss_fn_inputs={
            "target_tokens": np.asarray(stitched.tokens[1:], dtype=np.int64),
            "logprobs": np.asarray(stitched.logprobs[1:], dtype=np.float32),
            "advantages": np.asarray(advantages[1:], dtype=np.float32),
        },
    )
    return TrainingDatum(datum, len(input_tokens))


def build_training_datums(trajectories: Sequence, max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS) -> list[TrainingDatum]:
    """Datums for every trajectory that carries signal; zero advantage gives zero gradient."""
    return [build_datum(t, max_tokens) for t in trajectories if t.advantage != 0.0]


def padded_tokens(micro_batch: Sequence[TrainingDatum]) -> int:
    """Tokens a padded batch really costs: every row is as long as the longest."""
    return len(micro_batch) * max((item.length for item in micro_batch), default=0)


def pack_micro_batches(
    datums: Sequence[TrainingDatum],
    max_datums: int = 8,
    max_tokens: int = MAX_TRAIN_CONTEXT_TOKENS,
) -> list[list[TrainingDatum]]:
    """First-fit decreasing by length under a cap on datums and on padded tokens per micro-batch.

    Sorting longest first means each micro-batch's first datum sets its padded width, so similar
    lengths end up together and padding stays small. A datum longer than `max_tokens` on its own
    still gets a micro-batch of one (it already passed the training-context check).
    """
    if max_datums < 1 or max_tokens < 1:
        raise ValueError("max_datums and max_tokens must both be at least 1")
    batches: list[list[TrainingDatum]] = []
    for item in sorted(datums, key=lambda d: d.length, reverse=True):
        for batch in batches:
            width = max(batch[0].length, item.length)
            if len(batch) < max_datums and (len(batch) + 1) * width <= max_tokens:
                batch.append(item)
                break
        else:
            batches.append([item])
    return batches


def weight_micro_batch_for_global_mean(
    micro_batch: Sequence[TrainingDatum], total_samples: int
) -> list[pytrio.Datum]:
    """Scale advantages (or SFT weights) by n_k / N so per-call means add up to the global mean.

    forward_backward averages the loss over the datums of one call; importance_sampling is linear
    in the advantages and cross_entropy in the weights, so this weight turns sum_k mean(L_k) into
    mean(L_global). Targets and old logprobs are untouched.
    """
    if total_samples < len(micro_batch) or total_samples < 1:
        raise ValueError(
            f"total_samples ({total_samples}) must count every trajectory of the rollout, "
            f"so it cannot be smaller than the micro-batch ({len(micro_batch)})"
        )
    weight = np.float32(len(micro_batch) / total_samples)
    weighted = []
    for item in micro_batch:
        inputs = {key: value.to_numpy() for key, value in item.datum.loss_fn_inputs.items()}
        for key in {"advantages", "weights"} & set(inputs):
            inputs[key] = inputs[key] * weight
        weighted.append(pytrio.Datum(model_input=item.datum.model_input, loss_fn_inputs=inputs))
    return weighted


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
