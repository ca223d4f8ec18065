"""Per-token logprobs of target tokens without a full-vocabulary log-softmax over the sequence.

The decoder runs once; the unembedding and the log-softmax are then applied to chunks of
positions. Under autograd each chunk is checkpointed, so only one chunk's logits
([batch, chunk, vocab]) exist at a time, in the forward and in the backward pass.

A policy-gradient datum trains a few dozen of its thousand positions (the rest are prompt and
tool observations, whose advantage is 0). Given `trained`, only those positions go through the
unembedding under autograd; the others are computed once without a graph (same values, and no
gradient is lost: theirs is zero). On a CPU the unembedding is about a quarter of a training step.
"""

from __future__ import annotations

# fp32 logits held at once, [rows, chunk positions, vocab]: 1 GiB on a GPU, 32 MiB elsewhere
LOGITS_CHUNK_BYTES = {"cuda": 1 << 30}
DEFAULT_CHUNK_BYTES = 1 << 25


def _causal_lm(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_inputs(attention_mask):
    """(attention mask, position ids) to hand the decoder: no mask when every row is right-padded.

    With right padding a causal decoder never lets a real position see a padding one (padding comes
    after it), so the mask changes only the padding positions' own hidden states: no log-prob reads
    them (their targets are < 0) and their gradient is zero. Without it the attention runs the causal
    kernels an unpadded micro-batch runs. The positions then count on through the padding
    (0..width-1; the real ones are the same): positions that stop increasing would be read by
    transformers as packed sequences, and a mask made for them.

    Why not pass the mask anyway: with one, PyTorch 2.11 on an H100 runs cuDNN's masked attention in
    bfloat16, whose backward writes NaN into the query gradient when the key length is 64 modulo 128
    and a query row's logsumexp is below ln(FLT_MAX) = -88.7 (the padded half of the last 128-key
    tile is scored 0 instead of -inf, and exp(0 - lse) overflows). Qwen2.5-0.5B's layer-8 head 3,
    whose keys carry a massive activation (logits down to about -600), has many such rows in a long
    sequence, so a padded micro-batch of such a width made the whole step's gradient NaN (float32
    was spared: cuDNN's attention has no float32 kernel)."""
    import torch

    if bool((attention_mask.cumprod(-1) == attention_mask).all()):
        width = attention_mask.shape[-1]
        return None, torch.arange(width, device=attention_mask.device).expand(attention_mask.shape[0], width)
    # left padding or gaps: real positions could see masked ones
    return attention_mask, (attention_mask.cumsum(-1) - 1).clamp(min=0)


def _chunk_logprobs(head, hidden, targets):
    import torch

    logits = head(hidden).float()
    picked = logits.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    out = picked - torch.logsumexp(logits, dim=-1)
    return out.masked_fill(targets < 0, 0.0)


def _chunked(head, hidden, targets, chunk: int, grad: bool):
    from torch.utils.checkpoint import checkpoint

    pieces = []
    for start in range(0, hidden.shape[-2], chunk):
        h, t = hidden[..., start:start + chunk, :], targets[..., start:start + chunk]
        pieces.append(checkpoint(_chunk_logprobs, head, h, t, use_reentrant=False) if grad
                      else _chunk_logprobs(head, h, t))
    return pieces


def sequence_logprobs(model, input_ids, attention_mask, targets, chunk_bytes: int | None = None,
                      trained=None):
    """log p(targets[b, t] | input_ids[b, :t+1]) as fp32 [B, T]; 0 where targets < 0 (ignored).

    Right padding is expected (positions follow the attention mask). `trained` ([B, T] bool)
    names the positions whose gradient is wanted; without it every position carries one.
    """
    import torch

    lm = _causal_lm(model)
    mask, positions = decoder_inputs(attention_mask)
    hidden = lm.get_decoder()(
        input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False
    ).last_hidden_state
    head = lm.get_output_embeddings()
    rows, vocab = hidden.shape[0], getattr(head, "out_features", None) or lm.config.vocab_size
    budget = chunk_bytes or LOGITS_CHUNK_BYTES.get(hidden.device.type, DEFAULT_CHUNK_BYTES)
    chunk = max(1, budget // (rows * vocab * 4))
    grad = torch.is_grad_enabled()
    if trained is None or not grad:
        return torch.cat(_chunked(head, hidden, targets, chunk, grad), dim=1)
    with torch.no_grad():
        values = torch.cat(_chunked(head, hidden.detach(), targets, chunk, False), dim=1)
    where = trained.nonzero(as_tuple=True)
    if not len(where[0]):
        return values
    picked = torch.cat(_chunked(head, hidden[where], targets[where], chunk * rows, True))
    return values.index_put(where, picked)
