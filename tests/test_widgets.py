"""The course widgets on plain data: escaping, tree/strip content, bars, packing, dashboard, playground."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.widgets import (
    AdvantageBars,
    MicroBatchBlocks,
    RolloutPlayground,
    TokenStrip,
    TrainingDashboard,
    TrajectoryTree,
    token_rows,
    tree_data,
    tree_html,
)
from helpers.checkers import exercises
from helpers.widgets.bars import packing_stats
from helpers.widgets.budgets import budgets
from helpers.widgets.tokens import strip_summary, token_strip_html

EVIL = '<img src=x onerror=alert(1)>'
WIDGET_DIR = Path(__file__).resolve().parent.parent / "helpers" / "widgets"


def leaf(index, reward, advantage, turns):
    return {"index": index, "reward": reward, "advantage": advantage, "exact_match": reward == 1.0,
            "valid_format": reward >= 0, "turns": turns}


def tool_turn(query, observation, cut=False):
    return {"kind": "tool", "text": f"<tool_call>{query}</tool_call>", "query": query, "tokens": 12,
            "observation": observation, "observation_tokens": len(observation.split()), "cut": cut}


def answer_turn(text):
    return {"kind": "answer", "text": text, "query": None, "tokens": 4, "observation": None,
            "observation_tokens": None, "cut": False}


@pytest.fixture
def group():
    return {
        "question": "What country was the author of The Little Prince born in?",
        "answers": ["France"],
        "leaves": [
            leaf(0, 1.0, 0.5, [tool_turn("Little Prince author", "Antoine de Saint-Exupery " + EVIL, cut=True),
                               answer_turn("Answer: France")]),
            leaf(1, 0.0, -0.5, [answer_turn("Answer: Belgium")]),
        ],
    }


def test_tree_html_escapes_untrusted_text_and_keeps_it_visible(group):
    group["question"] = "Q " + EVIL
    html = tree_html(group, selected=0)
    assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # shown as text, in question and observation
    assert html.count("&lt;img") == 2


def test_token_strip_html_escapes_token_text():
    html = token_strip_html([{"id": 1, "text": EVIL, "role": "observation"}, {"id": 2, "text": '" onmouseover="x', "role": "assistant", "advantage": 0.5}])
    assert "<img" not in html
    assert 'onmouseover="x' not in html
    assert "&quot; onmouseover=&quot;x" in html


@pytest.mark.parametrize("name", ["tree.js", "tokens.js"])
def test_javascript_views_never_parse_strings_as_html(name):
    source = (WIDGET_DIR / name).read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute(\"on"):
        assert sink not in source, f"{name} uses {sink}; untrusted text must go through textContent"
    assert "textContent" in source


def test_tree_widget_keeps_raw_strings_for_textcontent_and_tracks_selection(group):
    group["leaves"][0]["turns"][0]["observation"] = EVIL
    tree = TrajectoryTree(group)
    # the synced data carries the raw text: the JS view assigns it with textContent
    assert tree.data["leaves"][0]["turns"][0]["observation"] == EVIL
    assert tree.selected == -1
    tree.selected = 1
    assert "Answer: Belgium" in tree.to_html()
    # new data without leaf 1 clears a stale selection
    tree.update({"question": "q", "answers": [], "leaves": [group["leaves"][0]]})
    assert tree.selected == -1


def test_tree_rejects_unknown_turn_kinds(group):
    group["leaves"][0]["turns"][0]["kind"] = "stop"
    with pytest.raises(ValueError, match="turn kind"):
        TrajectoryTree(group)


def test_tree_html_marks_cut_observations(group):
    html = tree_html(group)
    assert "(cut)" in html
    group["leaves"][0]["turns"][0]["cut"] = False
    assert "(cut)" not in tree_html(group)


def fake_trajectory(advantage=0.5):
    """Two turns: prompt 5 → turn 1 (3 tokens) → observation (4) → turn 2 (2)."""
    example = SimpleNamespace(question="Who?", answers=["France"])
    turn1 = SimpleNamespace(prompt_tokens=[1, 2, 3, 4, 5], completion_tokens=[6, 7, 8], logprobs=[-0.1, -0.2, -0.3],
                            text='<tool_call>\n{"name": "search", "arguments": {"query": "who"}}\n</tool_call>')
    turn2 = SimpleNamespace(prompt_tokens=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], completion_tokens=[13, 14],
                            logprobs=[-0.4, -0.5], text="Answer: France")
    return SimpleNamespace(example=example, group_index=0, question_index=0, turns=[turn1, turn2], reward=1.0,
                           advantage=advantage, exact_match=True, valid_format=True,
                           messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                                     {"role": "assistant", "content": turn1.text},
                                     {"role": "tool", "content": "[1] Title: " + EVIL},
                                     {"role": "assistant", "content": turn2.text}])


def test_token_rows_roles_follow_the_observation_mask():
    rows = token_rows(fake_trajectory())
    assert [row["role"] for row in rows] == ["prompt"] * 5 + ["assistant"] * 3 + ["observation"] * 4 + ["assistant"] * 2
    assert [row["mask"] for row in rows] == [0] * 5 + [1] * 3 + [0] * 4 + [1] * 2
    assert [row["logprob"] for row in rows if row["role"] == "assistant"] == [-0.1, -0.2, -0.3, -0.4, -0.5]
    summary = strip_summary(rows)
    assert summary["tokens"] == 14 and summary["with_advantage"] == 5
    strip = TokenStrip(rows)
    assert strip.summary["observation"] == 4


def test_token_rows_refuse_a_broken_prefix():
    trajectory = fake_trajectory()
    trajectory.turns[1].prompt_tokens[2] = 99
    with pytest.raises(ValueError, match="continuity"):
        token_rows(trajectory)


def test_advantage_bars_flag_degenerate_groups():
    bars = AdvantageBars([
        {"question": "a", "rewards": [1, 0, 1, 0], "advantages": [0.5, -0.5, 0.5, -0.5]},
        {"question": "b " + EVIL, "rewards": [0, 0, 0, 0], "advantages": [0, 0, 0, 0]},
    ])
    assert [g["degenerate"] for g in bars.groups] == [False, True]
    assert "1</b> of 2 groups degenerate" in bars.value
    assert "<img" not in bars.value
    with pytest.raises(ValueError, match="rewards"):
        bars.update([{"rewards": [1, 0], "advantages": [0.5]}])


def test_micro_batch_blocks_count_padding():
    blocks = MicroBatchBlocks([[10, 6], [3]])
    assert blocks.stats == {"micro_batches": 2, "samples": 3, "real_tokens": 19, "padded_tokens": 23,
                            "padding_fraction": pytest.approx(4 / 23)}
    assert "weight n/N = 2/3" in blocks.value and "weight n/N = 1/3" in blocks.value
    assert packing_stats([[SimpleNamespace(length=5)]])["real_tokens"] == 5


def test_dashboard_updates_on_each_step():
    dashboard = TrainingDashboard("grpo")
    assert "waiting" in dashboard.view.value
    dashboard.on_step({"step": 0, "reward_mean": -0.1, "exact_match": 0.0, "time_rollout": 2.0, "time_training": 1.0})
    first = dashboard.view.value
    dashboard.on_step({"step": 1, "reward_mean": 0.4, "exact_match": 0.25, "time_rollout": 1.0, "time_training": 1.0})
    assert dashboard.view.value != first
    assert dashboard.series("reward") == [-0.1, 0.4]
    assert "step 1" in dashboard.view.value and "rollout 1.00 s" in dashboard.view.value
    assert "exact match" in dashboard.view.value


def test_stage_times_partition_the_step_without_counting_nested_timings_twice():
    from helpers.widgets.dashboard import STAGE_COLOURS, dashboard_html, stage_times

    # a recorded step: sampling and search happen inside the rollout; the search latency is a sum
    metrics = {"step": 3, "time_sync_weights": 0.04, "time_rollout": 253.48, "time_sampling": 247.53,
               "time_search": 5.72, "time_search_latency_sum": 20.35, "time_training": 6.88, "time_step": 260.45}
    parts = stage_times(metrics)
    assert sum(parts.values()) == pytest.approx(260.45)
    assert parts["rollout: sampling"] == pytest.approx(247.53) and parts["rollout: search"] == pytest.approx(5.72)
    assert parts["rollout: other"] == pytest.approx(253.48 - 247.53 - 5.72)
    assert "rollout" not in parts and "sampling" not in parts and "search_latency_sum" not in parts
    assert parts["other"] == pytest.approx(260.45 - 0.04 - 253.48 - 6.88)
    # nested timings larger than their stage (clock noise) are scaled down, never added on top
    noisy = stage_times({"time_rollout": 2.0, "time_sampling": 2.5, "time_training": 1.0})
    assert sum(noisy.values()) == pytest.approx(3.0)
    html = dashboard_html([metrics])
    bar = re.search(r'class="srt-stage-bar".*?</div></div>', html).group(0)
    colours = re.findall(r"background:(#[0-9A-Fa-f]{6})", bar)
    assert len(colours) == len(parts) and len(set(colours)) == len(colours)
    assert set(colours) <= set(STAGE_COLOURS)


def test_sparklines_carry_their_axes():
    from helpers.widgets.dashboard import sparkline

    svg = sparkline([0.5, None, 0.25, 0.75], steps=[10, 11, 12, 13])
    labels = re.findall(r"<text[^>]*>(.*?)</text>", svg)
    assert "0.75" in labels and "0.25" in labels  # the y range
    assert "10" in labels and "step 13" in labels  # the x range
    assert svg.count("<line") == 2


def test_playground_reruns_on_slider_change_and_reports_errors(group):
    seen = []

    def run(values):
        seen.append(values)
        if values["group_size"] == 7:
            raise RuntimeError("boom " + EVIL)
        data = dict(group)
        data["leaves"] = [leaf(i, 0.0, 0.0, [answer_turn("Answer: x")]) for i in range(values["group_size"])]
        return data

    playground = RolloutPlayground(run, values=budgets("fast"), background=False)
    assert len(playground.tree.data["leaves"]) == budgets("fast")["group_size"]
    playground.sliders["group_size"].value = 5
    assert len(playground.tree.data["leaves"]) == 5 and seen[-1]["group_size"] == 5
    playground.sliders["group_size"].value = 7
    assert "rollout failed" in playground.status.value and "<img" not in playground.status.value
    assert len(playground.tree.data["leaves"]) == 5  # the last good tree stays
    assert playground.runs == 2


def test_budgets_shrink_in_the_fast_profile():
    fast, full = budgets("fast"), budgets("full")
    assert set(fast) == set(full)
    assert all(fast[key] <= full[key] for key in fast if key != "temperature")
    with pytest.raises(ValueError):
        budgets("huge")


def test_checkers_say_correct_or_not_yet(capsys):
    assert exercises.check_mask_on_paper(377, 28)
    assert not exercises.check_mask_on_paper(378, 28)
    assert not exercises.check_mask_on_paper(None, None)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "correct" and all(line.startswith("not yet: ") for line in out[1:])
    assert exercises.check_group_advantages([1, 0, 1, 0], [0.5, -0.5, 0.5, -0.5])
    assert not exercises.check_group_advantages([1, 0, 1, 0], [1, 0, 1, 0])
    assert exercises.check_micro_batch_weights([5, 3], [5 / 8, 3 / 8])
    assert exercises.check_overlap([5, 6, 99], [99, 10], 1) and exercises.check_overlap([5, 6], [99, 10], 0)
    assert exercises.check_glued([5, 99], [99, 10], [10])
    assert exercises.check_step_order(exercises.STEP_ORDER)
    assert not exercises.check_step_order(list(reversed(exercises.STEP_ORDER)))
    assert exercises.check_eval_fixed("abcd") and not exercises.check_eval_fixed("abcdf")
    rows = [{"first_search_hit": False, "search_calls": 2}, {"first_search_hit": False, "search_calls": 1},
            {"first_search_hit": False, "search_calls": 3}, {"first_search_hit": True, "search_calls": 2}]
    assert exercises.check_searched_again_when_missed(rows, 2 / 3)
    assert not exercises.check_searched_again_when_missed(rows, 3 / 4)  # the hit does not count
    assert not exercises.check_searched_again_when_missed(rows, None)
    hits = [{"first_search_hit": True, "search_calls": 1, "exact_match": True},
            {"first_search_hit": True, "search_calls": 1, "exact_match": False},
            {"first_search_hit": True, "search_calls": 2, "exact_match": False},
            {"first_search_hit": False, "search_calls": 2, "exact_match": True}]
    assert exercises.check_second_search_cost(hits, 0.5)  # 1/2 when stopped, 0/1 when searched again
    assert not exercises.check_second_search_cost(hits, -0.5) and not exercises.check_second_search_cost(hits, None)
    assert not exercises.check_second_search_cost(hits[:2], 0.0)  # no second search after a hit: nothing to compare
    assert exercises.check_kept_rows(["a", "d", "f"]) and not exercises.check_kept_rows(["a", "e"])


def test_wikipedia_url_checker_accepts_any_parameter_order():
    import urllib.parse

    params = dict(exercises.WIKIPEDIA_PARAMS, gsrsearch=exercises.WIKIPEDIA_QUERY)
    url = exercises.WIKIPEDIA_ENDPOINT + "?" + urllib.parse.urlencode(dict(reversed(list(params.items()))))
    assert exercises.check_wikipedia_url(url)
    assert not exercises.check_wikipedia_url(url.replace("gsrlimit=3", "gsrlimit=5"))
    assert not exercises.check_wikipedia_url(url.replace("en.wikipedia", "de.wikipedia"))


def test_the_seed_cases_agree_with_the_protocol_and_reward_code():
    from helpers.protocol import parse_assistant
    from helpers.reward import score_answer

    assert [parse_assistant(text).kind for text, _ in exercises.PARSER_CASES] == [kind for _, kind in exercises.PARSER_CASES]
    assert [score_answer(text, refs).reward for text, refs, _ in exercises.REWARD_CASES] == pytest.approx(
        [reward for _, _, reward in exercises.REWARD_CASES])


def test_tree_data_uses_the_rollout_search_records_for_size_and_cut():
    from helpers.data import SearchExample
    from helpers.rollout import AssistantTurn, SearchRecord, Trajectory

    call = '<tool_call>\n{"name": "search", "arguments": {"query": "Lyon"}}\n</tool_call>'
    example = SearchExample("q1", "Where was Saint-Exupery born?", ["Lyon"], "demo")
    searched = Trajectory(example=example, group_index=0, messages=[], reward=1.0, advantage=0.5, end_reason="answer",
                          valid_format=True, exact_match=True,
                          turns=[AssistantTurn([1, 2], [3, 4], [-0.1, -0.2], call, kind="tool", query="Lyon"),
                                 AssistantTurn([1, 2, 3, 4, 5, 6], [7], [-0.3], "Answer: Lyon", kind="answer")],
                          searches=[SearchRecord(turn_index=0, call_id="c1", query="Lyon", ok=True, error=None, latency=0.01,
                                                 items_returned=3, items_kept=1, observation_tokens=42,
                                                 content="[1] " + EVIL, fitted=True)])
    starved = Trajectory(example=example, group_index=1, messages=[], reward=-0.1, advantage=-0.5,
                         end_reason="observation_budget",
                         turns=[AssistantTurn([1, 2], [3, 4], [-0.1, -0.2], call, kind="tool", query="Lyon")],
                         searches=[SearchRecord(turn_index=0, call_id="c2", query="Lyon", ok=True, error=None, latency=0.01,
                                                items_returned=3, items_kept=0, fitted=False)])
    data = tree_data([starved, searched])
    assert [leaf["index"] for leaf in data["leaves"]] == [0, 1]
    first = data["leaves"][0]["turns"][0]
    assert (first["observation_tokens"], first["cut"], first["observation"]) == (42, True, "[1] " + EVIL)
    assert data["leaves"][0]["turns"][1]["kind"] == "answer"
    ended = data["leaves"][1]
    assert ended["end_reason"] == "observation_budget"
    assert ended["turns"][0]["observation"] is None and ended["turns"][0]["cut"] is True
    html = tree_html(data, selected=0)
    assert "&lt;img" in html and "<img" not in html


def test_token_rows_from_the_rollout_token_table_keep_roles_mask_and_logprobs():
    from helpers.data import SearchExample
    from helpers.rollout import AssistantTurn, Trajectory

    example = SearchExample("q1", "q", ["a"], "demo")
    trajectory = Trajectory(example=example, group_index=0, messages=[], advantage=-0.5,
                            turns=[AssistantTurn([1, 2], [3, 4], [-0.1, -0.2], "call"),
                                   AssistantTurn([1, 2, 3, 4, 5, 6], [7], [-0.3], "Answer: a")])
    rows = token_rows(trajectory)
    assert [r["role"] for r in rows] == ["prompt", "prompt", "assistant", "assistant", "observation", "observation", "assistant"]
    assert [r["mask"] for r in rows] == [0, 0, 1, 1, 0, 0, 1]
    assert [r["logprob"] for r in rows] == [None, None, -0.1, -0.2, None, None, -0.3]
    assert [r["advantage"] for r in rows] == [0, 0, -0.5, -0.5, 0, 0, -0.5]
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]


def test_a_verdict_is_a_bool_that_displays_nothing(capsys):
    verdict = exercises.check_mask_on_paper(377, 28)
    assert bool(verdict) is True and verdict._ipython_display_() is None
    assert bool(exercises.check_mask_on_paper(1, 1)) is False


def test_hand_overs_between_notebooks_live_with_this_checkouts_runs(monkeypatch, tmp_path):
    from helpers import config
    from helpers.widgets import course

    monkeypatch.setattr(config, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setenv("COURSE_CACHE", str(tmp_path / "shared-cache"))
    path = course.remember("rollout_05", {"answer": 1})
    assert path.is_relative_to(tmp_path / "runs") and course.recall("rollout_05") == {"answer": 1}
    # another checkout (its own runs folder) sharing the same cache sees none of it
    monkeypatch.setattr(config, "RUNS_DIR", tmp_path / "other-checkout" / "runs")
    assert course.recall("rollout_05") is None


def test_a_policy_keeps_its_colour_whichever_policies_are_shown_with_it():
    import matplotlib
    from matplotlib.colors import to_hex

    from helpers import efficiency as eff
    from helpers.analyse import POLICY_COLOURS, policy_colour

    matplotlib.use("Agg")
    points = [eff.BudgetPoint(p, b, 2, 0.1 * b, 1, b, 5, 50, 55, 0) for p in ("base", "sft", "sft_grpo") for b in range(3)]
    widget = eff.budget_curve_widget(points)

    def colours():
        return {line.get_label(): to_hex(line.get_color()) for line in widget.drawn["axes"].get_lines()}

    three = colours()
    widget.controls["policies"].value = ("sft", "sft_grpo")
    two = colours()
    widget.controls["policies"].value = ("sft_grpo",)
    one = colours()
    assert three["sft_grpo"] == two["sft_grpo"] == one["sft_grpo"] == POLICY_COLOURS["sft_grpo"]
    assert three["sft"] == two["sft"] and len(set(three.values())) == 3
    # the static plot of notebook 12 and the recorded report use the same map
    axes = eff.plot_tool_efficiency([p for p in points if p.policy != "base"])
    assert {line.get_label(): to_hex(line.get_color()) for line in axes[0].get_lines()} == two
    # any other name (a checkpoint, a reward's run) gets a colour of its own that does not move either
    assert policy_colour("/runs/ckpt-7") == policy_colour("/runs/ckpt-7") not in POLICY_COLOURS.values()


def test_an_invalid_turn_shows_the_parsers_reason_escaped():
    from helpers.widgets.tree import tree_html

    data = {"question": "q", "answers": ["a"], "leaves": [
        {"index": 0, "reward": -0.1, "advantage": 0.0, "end_reason": "invalid",
         "turns": [{"kind": "invalid", "text": "<tool_call>{", "tokens": 3, "error": "<b>unclosed</b> tool call"}]}]}
    html = tree_html(data)
    assert "invalid (&lt;b&gt;unclosed&lt;/b&gt; tool call)" in html and "<b>unclosed" not in html
    assert "invalid: " in tree_html({**data, "leaves": [{**data["leaves"][0], "turns": [
        {"kind": "invalid", "text": "x", "tokens": 1}]}]})  # no error: no empty brackets
