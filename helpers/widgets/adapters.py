"""Turn rollout objects into the plain data the widgets draw.

Works on anything shaped like `helpers.rollout.Trajectory` (duck-typed), so the widgets and
their tests never need a model. When `helpers.rollout` provides `token_table`, its rows are used.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from helpers.widgets.tokens import normalise_rows


def _parse(text: str) -> tuple[str, str | None]:
    from helpers.protocol import parse_assistant

    parsed = parse_assistant(text)
    return parsed.kind, parsed.query


def _tool_messages(trajectory: Any) -> list[dict[str, Any]]:
    return [message for message in getattr(trajectory, "messages", []) or [] if message.get("role") == "tool"]


def _count_tokens(tokenizer: Any, text: str) -> int | None:
    if tokenizer is None:
        return None
    return len(tokenizer.encode(text, add_special_tokens=False))


def _cut_flags(trajectory: Any, count: int) -> list[bool]:
    """Per-observation 'was it cut to the budget' flags, from whatever the rollout recorded."""
    for name in ("observation_cut", "observations_cut", "truncated"):
        flags = getattr(trajectory, name, None)
        if isinstance(flags, (list, tuple)):
            return [bool(flag) for flag in flags][:count] + [False] * max(0, count - len(flags))
    observations = getattr(trajectory, "observations", None)
    if isinstance(observations, (list, tuple)):
        flags = [bool(getattr(o, "cut", None) if not isinstance(o, dict) else o.get("cut")) for o in observations]
        return flags[:count] + [False] * max(0, count - len(flags))
    return [False] * count


def leaf_data(trajectory: Any, tokenizer: Any = None) -> dict[str, Any]:
    tools = _tool_messages(trajectory)
    cuts = _cut_flags(trajectory, len(tools))
    turns = []
    tool_position = 0
    for turn in getattr(trajectory, "turns", []) or []:
        kind, query = _parse(turn.text)
        observation = observation_tokens = None
        cut = False
        if kind == "tool" and tool_position < len(tools):
            observation = str(tools[tool_position].get("content") or "")
            observation_tokens = _count_tokens(tokenizer, observation)
            cut = cuts[tool_position]
            tool_position += 1
        turns.append(
            {
                "kind": kind,
                "text": turn.text,
                "query": query,
                "tokens": len(turn.completion_tokens),
                "observation": observation,
                "observation_tokens": observation_tokens,
                "cut": cut,
            }
        )
    return {
        "index": int(getattr(trajectory, "group_index", 0)),
        "reward": float(getattr(trajectory, "reward", 0.0)),
        "advantage": float(getattr(trajectory, "advantage", 0.0)),
        "exact_match": bool(getattr(trajectory, "exact_match", False)),
        "valid_format": bool(getattr(trajectory, "valid_format", False)),
        "turns": turns,
    }


def tree_data(group: Sequence[Any], tokenizer: Any = None) -> dict[str, Any]:
    """One GRPO group (trajectories of the same question) as TrajectoryTree data."""
    group = list(group)
    if not group:
        return {"question": "", "answers": [], "leaves": []}
    questions = {getattr(t, "question_index", 0) for t in group}
    if len(questions) > 1:
        raise ValueError(f"a tree shows one group; got question indexes {sorted(questions)}. Use groups_of(trajectories)")
    example = group[0].example
    return {
        "question": example.question,
        "answers": list(example.answers),
        "leaves": [leaf_data(t, tokenizer) for t in sorted(group, key=lambda t: t.group_index)],
    }


def groups_of(trajectories: Iterable[Any]) -> list[list[Any]]:
    """Split a rollout batch into its groups, in question order."""
    groups: dict[int, list[Any]] = {}
    for trajectory in trajectories:
        groups.setdefault(getattr(trajectory, "question_index", 0), []).append(trajectory)
    return [groups[key] for key in sorted(groups)]


def advantage_groups(trajectories: Iterable[Any]) -> list[dict[str, Any]]:
    """Data for AdvantageBars: rewards and advantages per group."""
    out = []
    for group in groups_of(trajectories):
        group = sorted(group, key=lambda t: t.group_index)
        out.append(
            {
                "question": group[0].example.question,
                "rewards": [float(t.reward) for t in group],
                "advantages": [float(t.advantage) for t in group],
            }
        )
    return out


def _decode(tokenizer: Any, token: int) -> str:
    return tokenizer.decode([token]) if tokenizer is not None else f"<{token}>"


def token_rows(trajectory: Any, tokenizer: Any = None) -> list[dict[str, Any]]:
    """Every token of a trajectory with its role, old logprob, advantage and mask.

    Uses helpers.rollout.token_table when it exists; otherwise walks the turns the way
    build_datum does (first prompt = prompt, later prompt deltas = observation).
    """
    try:
        from helpers.rollout import token_table
    except ImportError:
        token_table = None
    if token_table is not None:
        try:
            table = token_table(trajectory, tokenizer)
        except TypeError:
            table = token_table(trajectory)
        rows = [dict(row) if not isinstance(row, dict) else row for row in table]
        return normalise_rows([_row_from_table(row, tokenizer) for row in rows])
    rows: list[dict[str, Any]] = []
    full: list[int] = []
    for number, turn in enumerate(trajectory.turns):
        if turn.prompt_tokens[: len(full)] != full:
            raise ValueError(f"turn {number + 1}: its prompt does not continue the tokens so far (token continuity broken)")
        role = "prompt" if number == 0 else "observation"
        for token in turn.prompt_tokens[len(full):]:
            rows.append({"id": token, "text": _decode(tokenizer, token), "role": role, "logprob": None, "advantage": 0.0, "mask": 0})
        for token, logprob in zip(turn.completion_tokens, turn.logprobs):
            rows.append({"id": token, "text": _decode(tokenizer, token), "role": "assistant", "logprob": logprob,
                         "advantage": float(trajectory.advantage), "mask": 1})
        full = list(turn.prompt_tokens) + list(turn.completion_tokens)
    return normalise_rows(rows)


def _row_from_table(row: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    token = int(row.get("id", row.get("token_id", row.get("token", -1))))
    text = row.get("text")
    if text is None:
        text = _decode(tokenizer, token)
    role = str(row.get("role") or row.get("source") or "prompt").lower()
    if role in {"tool", "environment", "env"}:
        role = "observation"
    if role in {"system", "user", "question"}:
        role = "prompt"
    mask = row.get("mask", row.get("trained", 1 if role == "assistant" else 0))
    return {
        "id": token,
        "text": text,
        "role": role,
        "logprob": row.get("logprob", row.get("old_logprob")),
        "advantage": row.get("advantage", 0.0),
        "mask": int(bool(mask)),
    }
