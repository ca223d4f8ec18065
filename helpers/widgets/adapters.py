"""Turn rollout objects into the plain data the widgets draw.

Works on anything shaped like `helpers.rollout.Trajectory` (duck-typed), so the widgets and
their tests never need a model; token rows and trees come from `helpers.rollout` itself.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from helpers.advantages import no_signal
from helpers.rollout import Trajectory, groups_of, token_table
from helpers.widgets.tokens import normalise_rows

__all__ = ["advantage_groups", "groups_of", "token_rows", "trajectory_tree", "tree_data"]


def _leaf_from_branch(branch: dict[str, Any]) -> dict[str, Any]:
    """A branch of `trajectory_tree` as a TrajectoryTree leaf."""
    turns = []
    for turn in branch["turns"]:
        observation = turn.get("observation")
        turns.append(
            {
                "kind": turn.get("kind") or "answer",
                "text": turn.get("text") or "",
                "query": turn.get("query"),
                "tokens": turn.get("sampled_tokens", 0),
                "error": turn.get("error"),
                "observation": observation.get("content") if observation and observation.get("fitted") else None,
                "observation_tokens": observation.get("tokens") if observation and observation.get("fitted") else None,
                "cut": bool(observation and (observation.get("cut") or not observation.get("fitted"))),
            }
        )
    return {
        "index": branch["group_index"],
        "reward": branch["reward"],
        "advantage": branch["advantage"],
        "exact_match": branch.get("exact_match", False),
        "valid_format": branch.get("valid_format", False),
        "end_reason": branch.get("end_reason") or "",
        "turns": turns,
    }


def tree_data(group: Sequence[Trajectory]) -> dict[str, Any]:
    """One GRPO group (trajectories of the same question) as TrajectoryTree data.

    The branches of `trajectory_tree`, which knows each observation's size and whether it was cut.
    """
    group = list(group)
    if not group:
        return {"question": "", "answers": [], "leaves": []}
    tree = trajectory_tree(group)
    leaves = sorted((_leaf_from_branch(b) for b in tree["branches"]), key=lambda leaf: leaf["index"])
    return {"question": tree["question"], "answers": list(tree["references"]), "leaves": leaves}


def advantage_groups(trajectories: Iterable[Any]) -> list[dict[str, Any]]:
    """Data for AdvantageBars: rewards and advantages per group."""
    out = []
    for group in groups_of(list(trajectories)):
        group = sorted(group.trajectories, key=lambda t: t.group_index)
        out.append(
            {
                "question": group[0].example.question,
                "rewards": [float(t.reward) for t in group],
                "advantages": [float(t.advantage) for t in group],
            }
        )
    return out


def token_rows(trajectory: Any, tokenizer: Any = None) -> list[dict[str, Any]]:
    """Every token of a trajectory with its role, old logprob, advantage and mask.

    The rows of `helpers.rollout.token_table`: the trajectory stitched as the trainer sees it
    (first prompt = prompt, later prompt deltas = observation, sampled tokens = assistant);
    context tokens have no sampler logprob (the table stores 0.0 there), so they show none.
    """
    return normalise_rows([
        {"id": row["token_id"], "text": row.get("text", f"<{row['token_id']}>"), "role": row["source"],
         "logprob": row["logprob"] if row["trained"] else None, "advantage": row["advantage"],
         "mask": int(row["trained"])}
        for row in token_table(trajectory, tokenizer)
    ])


def _turn_view(trajectory: Trajectory, index: int) -> dict[str, Any]:
    turn = trajectory.turns[index]
    search = next((s for s in trajectory.searches if s.turn_index == index), None)
    is_last = index == len(trajectory.turns) - 1
    view = {
        "index": index, "kind": turn.kind, "text": turn.text, "query": turn.query,
        "error": turn.error, "stop_reason": turn.stop_reason,
        "sampled_tokens": len(turn.completion_tokens),
        "is_answer": is_last and trajectory.end_reason == "answer",
        "answer": trajectory.answer if is_last and trajectory.end_reason == "answer" else None,
        "observation": None,
    }
    if search is not None:
        view["observation"] = {
            "call_id": search.call_id, "ok": search.ok, "error": search.error,
            "items_returned": search.items_returned, "items_kept": search.items_kept,
            "tokens": search.observation_tokens, "cut": search.cut, "fitted": search.fitted,
            "content": search.content, "latency": search.latency,
        }
    return view


def trajectory_tree(group: Sequence[Trajectory]) -> dict[str, Any]:
    """One question's group as a tree: a shared root (the prompt), then one branch per trajectory.

    ``branches`` lists each trajectory's turns (kind, query, observation size and cut, answer)
    with its reward and advantage; ``children`` nests the same turns, merging branches whose
    sampled turns are identical, so a learner sees where the group really diverges.
    """
    group = list(group)
    if not group:
        raise ValueError("trajectory_tree needs the trajectories of one question")
    if len({t.question_index for t in group}) != 1:
        raise ValueError("trajectory_tree takes one question's group; split the batch by question_index")
    example = group[0].example
    rewards = [t.reward for t in group]
    branches = [
        {
            "group_index": t.group_index, "reward": t.reward, "advantage": t.advantage,
            "exact_match": t.exact_match, "valid_format": t.valid_format, "answer": t.answer,
            "end_reason": t.end_reason, "search_calls": t.search_calls,
            "sampled_tokens": t.sampled_tokens, "observation_tokens": t.observation_tokens,
            "turns": [_turn_view(t, i) for i in range(len(t.turns))],
        }
        for t in group
    ]
    root: dict[str, Any] = {"label": "prompt", "children": [], "branches": [b["group_index"] for b in branches]}
    for branch, trajectory in zip(branches, group):
        node = root
        for index, turn in enumerate(branch["turns"]):
            key = tuple(trajectory.turns[index].completion_tokens)
            child = next((c for c in node["children"] if c["_key"] == key), None)
            if child is None:
                child = {"_key": key, "turn": turn, "children": [], "branches": []}
                node["children"].append(child)
            child["branches"].append(branch["group_index"])
            node = child
        node.setdefault("leaves", []).append(
            {"group_index": branch["group_index"], "reward": branch["reward"], "advantage": branch["advantage"]}
        )

    def strip(node):
        node.pop("_key", None)
        for c in node["children"]:
            strip(c)
        return node

    return {
        "question_index": group[0].question_index,
        "question": example.question,
        "references": list(example.answers),
        "prompt_tokens": len(group[0].turns[0].prompt_tokens) if group[0].turns else 0,
        "group_size": len(group),
        "mean_reward": sum(rewards) / len(rewards),
        "degenerate": no_signal(rewards),
        "branches": branches,
        "root": strip(root),
    }
