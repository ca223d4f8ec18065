"""Per-token logprobs of target tokens without a full-vocabulary log-softmax over the sequence.

The decoder runs once; the unembedding and the log-softmax are then applied to chunks of
positions. Under autograd each chunk is checkpointed, so only one chunk's logits
([batch, chunk, vocab]) exist at a time, in the forward and in the backward pass.
"""

from __future__ import annotations

# fp32 logits held at once, [rows, chunk positions, vocab]: 1 GiB on a GPU, 32 MiB elsewhere
LOGITS_CHUNK_BYTES = {"cuda": 1 << 30}
DEFAULT_CHUNK_BYTES = 1 << 25


def _causal_lm(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _chunk_logprobs(head, hidden, targets):
    import torch

    logits = head(hidden).float()
    picked = logits.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    out = picked - torch.logsumexp(logits, dim=-1)
    return out.masked_fill(targets < 0, 0.0)


def sequence_logprobs(model, input_ids, attention_mask, targets, chunk_bytes: int | None = None):
    """log p(targets[b, t] | input_ids[b, :t+1]) as fp32 [B, T]; 0 where targets < 0 (ignored).

    Right padding is expected (positions follow the attention mask).
    """
    import torch
    from torch.utils.checkpoint import checkpoint

    lm = _causal_lm(model)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = lm.get_decoder()(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=False
    ).last_hidden_state
    head = lm.get_output_embeddings()
    rows, vocab = hidden.shape[0], getattr(head, "out_features", None) or lm.config.vocab_size
    budget = chunk_bytes or LOGITS_CHUNK_BYTES.get(hidden.device.type, DEFAULT_CHUNK_BYTES)
    chunk = max(1, budget // (rows * vocab * 4))
    pieces = []
    for start in range(0, hidden.shape[1], chunk):
        h = hidden[:, start:start + chunk]
        t = targets[:, start:start + chunk]
        if torch.is_grad_enabled():
            pieces.append(checkpoint(_chunk_logprobs, head, h, t, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(head, h, t))
    return torch.cat(pieces, dim=1)
