"""The trajectory as the trainer sees it, token by token: what the token views draw."""

from __future__ import annotations

from typing import Any

from helpers.rollout.continuity import stitch
from helpers.trajectory import Trajectory


def trajectory_tokens(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory as the trainer sees it: one row per token, source and mask included.

    Sources: ``prompt`` (the first prompt), ``assistant`` (sampled: old logprob and the
    trajectory's advantage), ``observation`` (template + search text between turns: logprob
    and advantage 0, not trained).
    """
    stitched = stitch(trajectory)
    return [
        {"position": k, "token_id": token, "source": source, "turn": turn, "logprob": logprob,
         "advantage": float(trajectory.advantage) if source == "assistant" else 0.0,
         "trained": source == "assistant"}
        for k, (token, logprob, source, turn) in enumerate(
            zip(stitched.tokens, stitched.logprobs, stitched.sources, stitched.turns))
    ]


def token_table(trajectory: Trajectory, tokenizer: Any | None = None) -> list[dict[str, Any]]:
    """``trajectory_tokens`` with each token's text (decoded one by one) when a tokenizer is given."""
    rows = trajectory_tokens(trajectory)
    if tokenizer is not None:
        for row in rows:
            row["text"] = tokenizer.decode([row["token_id"]], skip_special_tokens=False)
    return rows
