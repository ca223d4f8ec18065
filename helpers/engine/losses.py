"""The built-in losses of `forward_backward`, and how one call reduces them.

Notation for one datum i of a `forward_backward(data, loss_fn)` call: position t predicts
`target_tokens[t]` (the caller shifts targets; with `auto_shift=True` the engine does, and
position 0's label is dropped). `logp_t` is the current policy's log-probability of that
target; a token is *active* when its target is not -100 (and, for `cross_entropy`, its weight
is not 0).

    cross_entropy        L_i = sum_t  w_t * (-logp_t)                     (w_t = weights, default 1)
    importance_sampling  L_i = sum_t  -(r_t * A_t),   r_t = exp(logp_t - old_logp_t)
    ppo                  L_i = sum_t  -min(r_t * A_t, clip(r_t, lo, hi) * A_t)
                                       lo, hi = loss_fn_config["clip_low_threshold"] (0.8),
                                                loss_fn_config["clip_high_threshold"] (1.2)

`old_logp_t` is `loss_fn_inputs["logprobs"]` (the sampler's logprob of the token) and `A_t` is
`loss_fn_inputs["advantages"]`. Tokens with A_t = 0 (prompt and tool-observation tokens)
contribute nothing to the policy losses.

Reduction: each datum's loss is a SUM over its tokens, and one call AVERAGES over its datums:

    objective = (1/N) * sum_i L_i          N = number of datums in this forward_backward call

and the gradient of that objective is added to the accumulated gradient (until `optim_step`).
This is the behaviour the Search-R1 chapter states for PyTRIO, which is why a logical batch
split into micro-batches of n_k datums must scale each micro-batch's advantages by n_k / N.
`probe_loss_normalisation` measures what a backend actually does.

Metrics (the SDK's three): `loss_sum` = sum_i L_i, `token_count` = active tokens,
`loss_mean` = loss_sum / token_count.
"""

from __future__ import annotations

LOSS_FUNCTIONS = ("cross_entropy", "importance_sampling", "ppo")
PPO_DEFAULTS = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}


def check_config(loss_fn: str, loss_fn_config: dict | None) -> dict:
    """Validate `loss_fn_config` up front (clear errors instead of silently ignored keys)."""
    config = dict(loss_fn_config or {})
    if loss_fn not in LOSS_FUNCTIONS:
        raise ValueError(
            f"the local engine implements loss_fn in {LOSS_FUNCTIONS}, got {loss_fn!r}; "
            "use forward_backward_custom for other losses"
        )
    allowed = PPO_DEFAULTS if loss_fn == "ppo" else {}
    unknown = set(config) - set(allowed)
    if unknown:
        raise ValueError(f"unknown loss_fn_config keys for {loss_fn!r}: {sorted(unknown)}; allowed: {sorted(allowed)}")
    merged = {**allowed, **config}
    if loss_fn == "ppo" and not (0 <= merged["clip_low_threshold"] <= 1 <= merged["clip_high_threshold"]):
        raise ValueError("ppo needs 0 <= clip_low_threshold <= 1 <= clip_high_threshold")
    return merged


def trained_positions(loss_fn: str, inputs: dict):
    """[B, T] bool: the tokens whose loss can be non-zero (the only ones with a gradient)."""
    scale = inputs["weights"] if loss_fn == "cross_entropy" else inputs["advantages"]
    return (inputs["active"] != 0) & (scale != 0)


def token_losses(loss_fn: str, logprobs, inputs: dict, config: dict):
    """Per-token loss [B, T] (0 on inactive tokens). `inputs` holds [B, T] float tensors."""
    import torch

    active = inputs["active"]
    if loss_fn == "cross_entropy":
        loss = -inputs["weights"] * logprobs
    else:
        ratio = torch.exp(logprobs - inputs["logprobs"])
        advantages = inputs["advantages"]
        loss = -(ratio * advantages)
        if loss_fn == "ppo":
            clipped = ratio.clamp(config["clip_low_threshold"], config["clip_high_threshold"]) * advantages
            loss = -torch.minimum(ratio * advantages, clipped)
    return loss * active
