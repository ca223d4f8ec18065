"""What a Trajectory holds after each call of the rollout state machine (notebook 05, by hand)."""

from __future__ import annotations

from typing import Any

from helpers.widgets._html import shorten


def trajectory_state(trajectory: Any, after: str) -> dict[str, Any]:
    """One row: the call just made and the trajectory's turns, messages, next prompt and flags."""
    last = trajectory.messages[-1] if trajectory.messages else {}
    return {
        "after": after,
        "turns": " → ".join(turn.kind or "?" for turn in trajectory.turns) or "–",
        "messages": " ".join(message["role"][0].upper() for message in trajectory.messages),
        "last message": f"{last.get('role', '')}: {shorten(last.get('content', ''), 60)}" if last else "",
        "next prompt tokens": len(trajectory.next_prompt_tokens) if trajectory.next_prompt_tokens is not None else None,
        "search calls": trajectory.search_calls,
        "done": trajectory.done,
        "end reason": trajectory.end_reason or "–",
    }


# Counts are whole numbers; a count that does not exist yet (no prompt rendered) is a blank cell.
COUNT_COLUMNS = ("next prompt tokens", "search calls")


def state_table(rows: list[dict[str, Any]]):
    """The rows so far as a table (messages: S system, U user, A assistant, T tool)."""
    import pandas as pd

    table = pd.DataFrame(rows).set_index("after")
    for column in COUNT_COLUMNS:
        if column in table:
            # object dtype keeps ints as ints (a float column would print 417.0 and NaN)
            table[column] = [("" if value is None or pd.isna(value) else int(value)) for value in table[column]]
            table[column] = table[column].astype(object)
    return table
