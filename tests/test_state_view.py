"""The by-hand view of notebook 05: what a Trajectory holds after each call."""

from __future__ import annotations

from helpers.data import SearchExample
from helpers.rollout import AssistantTurn, Trajectory
from helpers.widgets.state import state_table, trajectory_state


def test_each_row_reads_the_trajectory_as_it_is_now():
    trajectory = Trajectory(example=SearchExample("q", "a question", ["x"], "demo"), group_index=0,
                            messages=[{"role": "system", "content": "rules"}, {"role": "user", "content": "Question: a question"}])
    first = trajectory_state(trajectory, "Trajectory(...)")
    assert first == {"after": "Trajectory(...)", "turns": "–", "messages": "S U",
                     "last message": "user: Question: a question", "next prompt tokens": None,
                     "search calls": 0, "done": False, "end reason": "–"}
    trajectory.turns.append(AssistantTurn([1, 2], [3], [-0.1], "call", kind="tool"))
    trajectory.messages += [{"role": "assistant", "content": "x " * 80}, {"role": "tool", "content": "result"}]
    trajectory.next_prompt_tokens, trajectory.search_calls = [1, 2, 3, 4, 5], 1
    second = trajectory_state(trajectory, "finish_search")
    assert (second["turns"], second["messages"], second["next prompt tokens"], second["search calls"]) == ("tool", "S U A T", 5, 1)
    trajectory.messages.pop()
    assert len(trajectory_state(trajectory, "x")["last message"]) <= len("assistant: ") + 60
    table = state_table([first, second])
    assert list(table.index) == ["Trajectory(...)", "finish_search"] and table.loc["finish_search", "search calls"] == 1


def test_counts_print_as_whole_numbers_and_a_missing_count_as_a_blank():
    trajectory = Trajectory(example=SearchExample("q", "a question", ["x"], "demo"), group_index=0,
                            messages=[{"role": "user", "content": "Question: a question"}])
    before = trajectory_state(trajectory, "Trajectory(...)")
    trajectory.next_prompt_tokens = list(range(417))
    after = trajectory_state(trajectory, "make_request")
    table = state_table([before, after])
    shown = table.to_string()
    assert "NaN" not in shown and "417.0" not in shown and "417" in shown
    assert table.loc["Trajectory(...)", "next prompt tokens"] == ""
    assert table.loc["make_request", "next prompt tokens"] == 417
    assert "<NA>" not in table.to_html() and "NaN" not in table.to_html()
