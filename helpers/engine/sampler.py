"""Batched decoding for the local sampler.

All rows of all requests in a batch are decoded together: unique prompts are left-padded and
prefilled once, their KV cache is repeated for the `num_samples` rows that share them, then one
token per row per step is drawn with a KV cache. Rows leave the batch when they stop (an EOS
token, a stop token id, a stop string, or `max_tokens`), so the batch shrinks as it goes.

Randomness: each row draws its uniforms from its own `random.Random`, seeded from
`(seed, sample index)` when the request has a seed, so results do not depend on what else was
in the batch. Tokens are drawn by inverse-CDF over the (temperature, top-k, top-p) distribution;
the uniforms of all steps are drawn before decoding starts and live on the device.

Logprobs: the returned logprob of a sampled token is its log-probability under the model
itself (log-softmax of the raw logits, temperature 1), the quantity the trainer computes for
the same token. With temperature 1 and no top-k/top-p it is also the log-probability under the
distribution the token was drawn from; with other settings the two differ by design, and the
importance ratio of `importance_sampling` is then relative to the untempered policy.
"""

from __future__ import annotations

import os
import random
import sys

from pytrio.types import SampleResponse, SampleSequence

from helpers.engine.drawing import LENGTH_BUCKET, DrawParams, Row, accept, bucket_rows, collect, draw


def split_stop(stop) -> tuple[list[str], list[int]]:
    """SamplingParams.stop is a string, a list of strings or a list of token ids."""
    if stop is None:
        return [], []
    if isinstance(stop, str):
        return [stop], []
    items = list(stop)
    if all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        return [], [int(i) for i in items]
    if all(isinstance(i, str) for i in items):
        return [s for s in items if s], []
    raise ValueError("stop must be a string, a list of strings, or a list of token ids (not mixed)")


def validate_params(params, prompt_len: int, max_context: int | None) -> None:
    from pytrio.errors.base import ValidationError

    if params.max_tokens is None or params.max_tokens <= 0:
        raise ValidationError(
            "sampling_params.max_tokens must be greater than 0", code="validation.invalid_sampling_request"
        )
    if params.temperature < 0 or not (0 < params.top_p <= 1) or params.top_k < -1:
        raise ValidationError(
            "invalid sampling request: need temperature >= 0, 0 < top_p <= 1, top_k >= -1 (-1 or 0: no limit)",
            code="validation.invalid_sampling_request",
        )
    if max_context and prompt_len + params.max_tokens > max_context:
        raise ValidationError(
            f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) exceeds the model's "
            f"context of {max_context} tokens; shorten the prompt or lower max_tokens",
            code="validation.invalid_sampling_request",
        )


def make_rows(jobs, eos_ids: set[int]) -> list[Row]:
    rows = []
    for job_index, job in enumerate(jobs):
        p = job.params
        strings, ids = split_stop(p.stop)
        for sample_index in range(job.num_samples):
            rng = random.Random(f"{p.seed}:{sample_index}") if p.seed is not None else random.Random(os.urandom(16))
            rows.append(
                Row(
                    prompt=list(job.prompt),
                    job_index=job_index,
                    max_tokens=int(p.max_tokens),
                    temperature=float(p.temperature),
                    top_k=int(p.top_k),
                    top_p=float(p.top_p),
                    stop_ids=set(ids) | eos_ids,
                    stop_strings=strings,
                    rng=rng,
                )
            )
    return rows


DECODE_PATHS = ("graphs", "static", "dynamic")


def decode_path(host) -> str:
    """How a batch is decoded (COURSE_ENGINE_DECODE overrides):

    - "graphs" (CUDA default): the step in plain tensor ops, replayed as CUDA graphs (helpers.engine.graphs);
    - "static": transformers' forward over a static KV cache, compiled with torch.compile on CUDA;
    - "dynamic" (CPU default): transformers' forward, finished rows leave the batch.
    COURSE_ENGINE_STATIC=1/0 selects "static"/"dynamic" (older setting).
    """
    chosen = os.environ.get("COURSE_ENGINE_DECODE", "").strip()
    if chosen:
        if chosen not in DECODE_PATHS:
            raise ValueError(f"COURSE_ENGINE_DECODE={chosen!r}: choose one of {DECODE_PATHS}")
        return chosen
    flag = os.environ.get("COURSE_ENGINE_STATIC")
    if flag is not None:
        return "static" if flag.strip() not in {"0", "false", ""} else "dynamic"
    return "graphs" if host.device == "cuda" else "dynamic"


def use_static_cache(host) -> bool:
    """Whether decoding runs over a fixed-shape static KV cache (the graphs and static paths)."""
    return decode_path(host) != "dynamic"


def decode(host, rows: list[Row]) -> None:
    """Fill `tokens`, `logprobs` and `stop_reason` of every row (in place).

    Out of device memory, the rows are decoded again in two halves (recursively): several training
    runs share one GPU, each capped to a share of its memory (COURSE_CUDA_MEMORY_FRACTION), and a batch
    of long multi-turn prompts can outgrow its share in the prefill or the decode. Each half needs
    about half the memory, and a row's draws do not depend on what else is in its batch (its uniforms
    come from its own generator, put back before a retry), so the samples are those the whole batch
    would have given, up to rounding. One row that still does not fit raises the device's own error.
    Mirrors `LoraRun.forward` (helpers.engine.training) on the training side.
    """
    import torch

    pending = [rows]
    while pending:
        batch = pending.pop(0)
        draws = [row.rng.getstate() for row in batch]  # the attempt draws its uniforms from these
        try:
            _decode_batch(host, batch)
            continue
        except torch.OutOfMemoryError:
            if len(batch) == 1:
                raise
        # Outside the `except`: the error's traceback held the frames of the attempt and, through
        # them, its tensors (prefill cache, logits, decode buffers); they are released by now.
        for row, state in zip(batch, draws):  # a retried row starts clean: no tokens, the same draws
            row.tokens, row.logprobs, row.stop_reason = [], [], None
            row.rng.setstate(state)
        host.release_decode_buffers()
        print(f"engine: sampling {len(batch)} rows did not fit in device memory; retrying in two halves",
              file=sys.stderr, flush=True)
        half = len(batch) // 2
        pending[:0] = [batch[:half], batch[half:]]


def _decode_batch(host, rows: list[Row]) -> None:
    """One decode batch: prefill, then decode on the chosen path."""
    import torch

    from helpers.engine.graphs import decode_graphs

    path = decode_path(host)
    with torch.inference_mode():
        first_logits, prefix, mask, next_pos = _prefill(host, rows)
        if path == "graphs":
            decode_graphs(host, rows, first_logits, prefix, mask, next_pos)
        elif path == "static":
            _decode_static(host, rows, first_logits, prefix, mask, next_pos)
        else:
            _decode_dynamic(host, rows, first_logits, prefix, mask, next_pos)


def _prefill(host, rows):
    """Prefill each distinct prompt once (left-padded); rows sharing a prompt share its KV cache."""
    import torch
    from transformers import DynamicCache

    device = host.device
    pad = host.tokenizer.pad_token_id if host.tokenizer.pad_token_id is not None else 0
    unique: dict[tuple[int, ...], int] = {}
    source = [unique.setdefault(tuple(r.prompt), len(unique)) for r in rows]
    prompts = list(unique)
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = host.forward_model()(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                               logits_to_keep=1, **{_cache_argument(host): cache})
    index = torch.tensor(source, device=device)
    logits = out.logits[:, -1].index_select(0, index)
    return logits, (cache, index), mask.index_select(0, index), positions[:, -1].index_select(0, index) + 1


def _decode_dynamic(host, rows, logits, prefix, mask, next_pos) -> None:
    """Eager decode with a DynamicCache; finished rows leave the batch (the cache shrinks).

    The CPU path: there, fewer rows means less work, and a host sync per step costs nothing.
    """
    import torch

    model, device, cache_arg = host.forward_model(), host.device, _cache_argument(host)
    cache, index = prefix
    cache.batch_select_indices(index)
    params = DrawParams(rows, device)
    active = list(range(len(rows)))
    step = 0
    while True:
        tokens, logps = draw(logits, params, step)
        keep = [j for j, (t, lp) in enumerate(zip(tokens.tolist(), logps.tolist()))
                if accept(rows[active[j]], t, lp, host.tokenizer)]
        if not keep:
            return
        if len(keep) < len(active):
            sel = torch.tensor(keep, device=device)
            cache.batch_select_indices(sel)
            mask, next_pos, tokens = mask.index_select(0, sel), next_pos.index_select(0, sel), tokens.index_select(0, sel)
            params = params.select(sel)
            active = [active[j] for j in keep]
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
        out = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                    use_cache=True, **{cache_arg: cache})
        logits = out.logits[:, -1]
        next_pos = next_pos + 1
        step += 1


def _decode_static(host, rows, logits, prefix, mask, next_pos) -> None:
    """Decode with a static KV cache and fixed shapes, so the step can be compiled (CUDA graphs).

    Shapes are bucketed (rows to a power of two >= 8, cache length to a multiple of 512), so a
    training run reuses a handful of compiled graphs. Finished and filler rows keep running
    (their outputs are ignored): on a GPU that is cheaper than changing shapes.

    No host sync in the loop's critical path: step t's tokens are copied to pinned host memory
    without blocking, and the host reads them (stop checks, bookkeeping) only after step t+1
    has been queued, so the GPU always has work while Python runs. Stopping is therefore
    noticed one step late; that step's output is discarded.
    """
    import torch

    device = host.device
    dyn_cache, index = prefix
    n_rows, width = len(rows), mask.shape[1]
    batch = bucket_rows(n_rows)
    steps = max(r.max_tokens for r in rows)
    length = -(-(width + steps) // LENGTH_BUCKET) * LENGTH_BUCKET
    fill = torch.zeros(batch - n_rows, dtype=index.dtype, device=device)
    full_index = torch.cat([index, fill])  # filler rows copy prompt 0
    cache = host.static_cache(batch, length)
    for static_layer, dyn_layer in zip(cache.layers, dyn_cache.layers):
        keys, values = dyn_layer.keys.index_select(0, full_index), dyn_layer.values.index_select(0, full_index)
        if not static_layer.is_initialized:
            static_layer.lazy_initialization(keys, values)
        static_layer.keys.zero_()
        static_layer.values.zero_()
        static_layer.keys[:, :, :width].copy_(keys)
        static_layer.values[:, :, :width].copy_(values)
        static_layer.cumulative_length.fill_(width)
    full_mask = torch.ones((batch, length), dtype=mask.dtype, device=device)
    full_mask[:n_rows, :width] = mask
    full_mask[n_rows:, :width] = mask[:1]
    positions = torch.cat([next_pos, next_pos[:1].expand(batch - n_rows)])[:, None].clone()
    logits = torch.cat([logits, logits[:1].expand(batch - n_rows, -1)])
    feed = torch.zeros((batch, 1), dtype=torch.long, device=device)
    params = DrawParams(rows, device, batch=batch, steps=steps)
    forward = host.decode_step()
    mirror = _HostMirror(device, batch)
    running = set(range(n_rows))
    for t in range(steps):
        tokens, logps = draw(logits, params, t)
        mirror.push(t, tokens, logps)
        if t + 1 < steps:
            feed.copy_(tokens[:, None])
            logits = forward(feed, positions, full_mask, cache)
            positions += 1
        if t > 0:
            collect(host, rows, running, mirror.pop(t - 1))
            if not running:
                return
    collect(host, rows, running, mirror.pop(steps - 1))


class _HostMirror:
    """Two pinned host slots that receive each step's tokens and logprobs without a sync."""

    def __init__(self, device: str, batch: int) -> None:
        import torch

        pinned = device == "cuda"
        self.tokens = torch.empty((2, batch), dtype=torch.long, pin_memory=pinned)
        self.logps = torch.empty((2, batch), dtype=torch.float32, pin_memory=pinned)
        self.events = [torch.cuda.Event() for _ in range(2)] if pinned else None

    def push(self, step: int, tokens, logps) -> None:
        slot = step % 2
        self.tokens[slot].copy_(tokens, non_blocking=self.events is not None)
        self.logps[slot].copy_(logps.float(), non_blocking=self.events is not None)
        if self.events is not None:
            self.events[slot].record()

    def pop(self, step: int) -> tuple[list[int], list[float]]:
        slot = step % 2
        if self.events is not None:
            self.events[slot].synchronize()
        return self.tokens[slot].tolist(), self.logps[slot].tolist()


def _cache_argument(host) -> str:
    """transformers 5 renamed `past_key_values` to `cache`; use whichever the model takes."""
    import inspect

    return "cache" if "cache" in inspect.signature(host.model.forward).parameters else "past_key_values"


def prompt_logprobs(host, prompt: list[int]) -> list[float | None]:
    """log p(prompt[i] | prompt[:i]) for i >= 1; the first position has no logprob (None)."""
    from helpers.engine.logprobs import sequence_logprobs

    import torch

    ids = torch.tensor([prompt], device=host.device)
    targets = torch.full_like(ids, -100)
    targets[0, :-1] = ids[0, 1:]
    with torch.inference_mode():
        lp = sequence_logprobs(host.forward_model(), ids, torch.ones_like(ids), targets)[0]
    return [None] + [float(x) for x in lp[:-1].tolist()]


def run_sample_jobs(host, jobs) -> list[SampleResponse]:
    for job in jobs:
        validate_params(job.params, len(job.prompt), host.max_context)
    rows = make_rows(jobs, host.eos_ids)
    decode(host, rows)
    responses = []
    for job_index, job in enumerate(jobs):
        mine = [r for r in rows if r.job_index == job_index]
        sequences = [
            SampleSequence(
                stop_reason=r.stop_reason or "length",
                tokens=r.tokens,
                logprobs=r.logprobs,
                text=host.tokenizer.decode(r.tokens, skip_special_tokens=True) if job.return_text else None,
            )
            for r in mine
        ]
        responses.append(
            SampleResponse(
                sequences=sequences,
                prompt_logprobs=prompt_logprobs(host, job.prompt) if job.include_prompt_logprobs else [],
                input_tokens=len(job.prompt),
                output_tokens=sum(len(r.tokens) for r in mine),
            )
        )
    return responses
