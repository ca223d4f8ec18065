"""The live widgets without a model: policy picker, every slider, question picker, the change
summary, latest-wins runs, and the questions picked from the recorded evaluation."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

from helpers import config
from helpers.data import SearchExample
from helpers.widgets.budgets import SLIDERS, budgets
from helpers.widgets.changes import SUMMARY_FIELDS, branch_summary, changes_html, compare_runs
from helpers.widgets.live import WatchedSampler, budget_questions, budget_run_fn, live_run_fn
from helpers.widgets.playground import RolloutPlayground, Superseded

EVIL = "<img src=x onerror=alert(1)>"


def tool(query, tokens, cut=False, fitted=True):
    return {"kind": "tool", "text": f"<tool_call>{query}</tool_call>", "query": query, "tokens": 10,
            "observation": "evidence" if fitted else None, "observation_tokens": tokens if fitted else None, "cut": cut}


def answer(text):
    return {"kind": "answer", "text": text, "tokens": 4}


def branch(index, turns, reward, advantage, end_reason="answer"):
    return {"index": index, "reward": reward, "advantage": advantage, "end_reason": end_reason, "turns": turns}


def tree(*leaves):
    return {"question": "Where was the author of The Little Prince born?", "answers": ["Lyon"], "leaves": list(leaves)}


def searches_run(values):
    """A stand-in for the rollout: each branch searches as often as max_search_calls allows."""
    calls = int(values["max_search_calls"])
    leaves = []
    for index in range(int(values["group_size"])):
        turns = [tool(f"q{n}", int(values["max_tool_response_tokens"]) // 2) for n in range(calls)]
        leaves.append(branch(index, [*turns, answer("Answer: Lyon" if calls else "Answer: Paris")],
                             1.0 if calls else 0.0, 0.0))
    return tree(*leaves)


def test_branch_summary_counts_searches_kept_tokens_and_cuts():
    leaf = branch(0, [tool("a", 100), tool("b", 40, cut=True), tool("c", 0, cut=True, fitted=False)], -0.1, -0.4,
                  end_reason="observation_budget")
    summary = branch_summary(leaf)
    assert summary["searches"] == 2 and summary["observation_tokens"] == 140 and summary["cut"] == 2
    assert summary["end_reason"] == "observation_budget" and summary["answer"] == ""
    assert branch_summary(branch(1, [answer("Answer: Lyon")], 1.0, 0.5))["answer"] == "Lyon"
    assert branch_summary({**branch(1, [answer("x")], 1.0, 0.5), "answer": "given"})["answer"] == "given"


def test_change_summary_shows_per_branch_what_a_lower_search_budget_changed():
    before = tree(branch(0, [tool("first", 120), tool("second", 90), answer("Answer: Lyon")], 1.0, 0.55),
                  branch(1, [tool("first", 120), answer("Answer: Paris")], 0.0, -0.55))
    after = tree(branch(0, [tool("first", 120), {"kind": "tool", "text": "<tool_call>", "query": "second"}],
                        -0.1, 0.0, end_reason="search_budget"),
                 branch(1, [tool("first", 120), answer("Answer: Paris")], 0.0, 0.0))
    rows = compare_runs(before, after)
    # τ1 did exactly the same; only its advantage moved, because τ0's reward fell
    assert [row["status"] for row in rows] == ["changed", "advantage only"]
    assert set(rows[0]["changed"]) == {"searches", "observation_tokens", "end_reason", "answer", "reward", "advantage"}
    assert rows[0]["before"]["searches"] == 2 and rows[0]["after"]["searches"] == 1
    assert rows[1]["changed"] == ["advantage"]
    html = changes_html(rows, {"max_search_calls": (2, 1)})
    assert "max_search_calls 2 → 1" in html and "answer → search_budget" in html
    assert 'data-searches="1" data-searches-before="2"' in html
    assert "Lyon → <i>none</i>" in html
    assert html.count('class="srt-changed"') == 6 and html.count('class="srt-moved"') == 1  # τ1's advantage only
    assert 'data-status="advantage only"' in html and "another branch of the group changed" in html


def test_a_question_switch_starts_a_new_baseline_instead_of_comparing_two_questions():
    first = SearchExample("a", "Which prophets are in the Quran?", ["Moses"], "hotpotqa")
    second = SearchExample("b", "Are Ian Brown and Dee Snider both actors?", ["no"], "hotpotqa")

    def run(values):
        question = values["question"]
        return {"question": question.question, "answers": question.answers,
                "leaves": [branch(0, [answer(f"Answer: {question.answers[0]}")], 1.0, 0.0)]}

    playground = RolloutPlayground(run, values=budgets("fast"), questions=[first, second], background=False)
    playground.pickers["question"].value = second.question
    html = playground.changes.value
    assert "another question" in html and "a new baseline" in html
    assert "→" not in html.split("</p>", 1)[1]  # no cell compares Moses with no
    assert 'data-status="first"' in html
    playground.sliders["max_search_calls"].value = 0  # same question again: compared as before
    assert "max_search_calls 1 → 0" in playground.changes.value and 'data-status="same"' in playground.changes.value


def test_a_question_that_names_its_policy_picks_it():
    from helpers.widgets.live import BudgetQuestion

    seen = []

    def run(values):
        seen.append((values["policy"], values["question"].id))
        return searches_run(values)

    once = BudgetQuestion(SearchExample("a", "question a", ["x"], "hotpotqa"), "answered after one search", "sft_grpo")
    twice = BudgetQuestion(SearchExample("b", "question b", ["y"], "hotpotqa"), "searched twice", "agent")
    typed = BudgetQuestion(SearchExample("c", "question c", ["z"], "hotpotqa"), "cut", None)
    options = [("SFT + GRPO", "sft_grpo"), ("search agent", "agent"), ("SFT", "sft"), ("base model", "base")]
    playground = RolloutPlayground(run, values=budgets("fast"), policies=options, policy="sft_grpo",
                                   questions=[once, twice, typed], background=False)
    playground.pickers["question"].value = "question b"
    assert playground.pickers["policy"].value == "agent" and seen[-1] == ("agent", "b")
    playground.pickers["question"].value = "question c"  # names no policy: the picked one stays
    assert seen[-1] == ("agent", "c")
    playground.pickers["question"].value = "question a"
    assert seen[-1] == ("sft_grpo", "a")


def test_the_change_table_can_leave_the_advantage_column_out():
    rows = compare_runs(None, tree(branch(0, [answer("Answer: Lyon")], 1.0, 0.0)))
    assert "<th>advantage</th>" in changes_html(rows)
    without = changes_html(rows, fields=tuple(f for f in SUMMARY_FIELDS if f != "advantage"), row_prefix="q")
    assert "<th>advantage</th>" not in without and "+0.00" not in without.replace("+1.00", "") and ">q0 " in without
    with pytest.raises(ValueError, match="unknown change-table fields"):
        changes_html(rows, fields=("searches", "mood"))


def test_change_summary_marks_new_and_gone_branches_and_escapes_everything():
    before = tree(branch(0, [answer("Answer: " + EVIL)], 0.0, 0.0), branch(1, [answer("Answer: b")], 0.0, 0.0))
    after = tree(branch(0, [answer("Answer: " + EVIL)], 0.0, 0.0))
    rows = compare_runs(before, after)
    assert [(row["index"], row["status"]) for row in rows] == [(0, "same"), (1, "gone")]
    html = changes_html(rows, {"question": (EVIL, "plain")})
    assert "<img" not in html and "&lt;img" in html
    grown = compare_runs(after, before)
    assert [row["status"] for row in grown] == ["same", "new"]
    first = changes_html(compare_runs(None, after))
    assert "first run" in first and 'data-status="first"' in first


def test_policy_picker_defaults_to_the_trained_policy_and_feeds_the_run():
    seen = []

    def run(values):
        seen.append(values["policy"])
        return searches_run(values)

    options = [("SFT + GRPO", "sft_grpo"), ("SFT", "sft"), ("base model", "base")]
    playground = RolloutPlayground(run, values=budgets("fast"), policies=options, policy="sft_grpo", background=False)
    assert playground.pickers["policy"].value == "sft_grpo" and seen == ["sft_grpo"]
    playground.pickers["policy"].value = "base"
    assert seen == ["sft_grpo", "base"]
    assert "policy sft_grpo → base" in playground.changes.value
    with pytest.raises(Exception):
        playground.pickers["policy"].value = "not offered"


def test_a_policy_that_cannot_load_is_reported_in_the_widget_not_raised():
    from helpers.course.policies import PolicyNotAvailable

    def run(values):
        if values["policy"] == "sft":
            raise PolicyNotAvailable("no SFT adapter committed " + EVIL)
        return searches_run(values)

    playground = RolloutPlayground(run, values=budgets("fast"), policies=[("a", "sft_grpo"), ("b", "sft")],
                                   background=False)
    playground.pickers["policy"].value = "sft"
    assert "no SFT adapter committed" in playground.status.value and "<img" not in playground.status.value
    assert playground.runs == 1 and playground.last_values["policy"] == "sft_grpo"


def _other_value(slider):
    return slider.max if slider.value != slider.max else slider.min


@pytest.mark.parametrize("name", list(SLIDERS))
def test_every_slider_reruns_with_its_new_value_and_says_what_changed(name):
    seen = []

    def run(values):
        seen.append(dict(values))
        return searches_run(values)

    playground = RolloutPlayground(run, values=budgets("fast"), background=False)
    slider = playground.sliders[name]
    old, new = slider.value, _other_value(slider)
    slider.value = new
    assert len(seen) == 2 and seen[-1][name] == new and seen[0][name] == old
    assert f"{name} {old} → {new}" in playground.changes.value


def test_the_sliders_cover_every_limit_of_the_seed_plus_group_temperature_and_top_k():
    playground = RolloutPlayground(searches_run, values=budgets("full"), run_now=False)
    assert set(playground.sliders) == {"max_search_calls", "max_assistant_turns", "max_assistant_tokens",
                                       "max_tool_response_tokens", "max_trajectory_tokens", "group_size",
                                       "temperature", "search_topk"}
    for name, slider in playground.sliders.items():
        assert slider.min <= budgets("full")[name] <= slider.max, name


def test_lowering_max_search_calls_shows_fewer_searches_per_branch():
    values = {**budgets("fast"), "max_search_calls": 2}
    playground = RolloutPlayground(searches_run, values=values, background=False)
    playground.sliders["max_search_calls"].value = 1
    assert playground.changes.value.count('data-searches="1" data-searches-before="2"') == values["group_size"]


def test_question_picker_offers_recorded_questions_first_and_accepts_free_text():
    seen = []

    def run(values):
        seen.append(values["question"])
        return searches_run(values)

    offered = [SimpleNamespace(example=SearchExample("q1", "Who wrote " + EVIL + "?", ["Saint-Exupéry"], "nq"),
                               why="evidence cut " + EVIL),
               SimpleNamespace(example=SearchExample("q2", "Where is Lyon?", ["France"], "nq"), why="searched twice")]
    playground = RolloutPlayground(run, values=budgets("fast"), questions=offered, background=False)
    box = playground.pickers["question"]
    assert list(box.options) == ["Who wrote " + EVIL + "?", "Where is Lyon?"]
    assert seen[-1].id == "q1" and seen[-1].answers == ["Saint-Exupéry"]
    assert "<img" not in playground.why.value and "evidence cut &lt;img" in playground.why.value
    box.value = "Where is Lyon?"
    assert seen[-1].id == "q2" and "searched twice" in playground.why.value
    box.value = "  Who painted   the Mona Lisa? "
    typed = seen[-1]
    assert typed.question == "Who painted the Mona Lisa?" and typed.answers == []
    assert "no reference answer" in playground.why.value


def test_the_latest_change_wins_and_changes_made_meanwhile_do_not_queue():
    release, started = threading.Event(), threading.Event()
    calls = []

    def run(values, control):
        calls.append(values["group_size"])
        control.progress("sampling request 1")
        if len(calls) == 2:  # the first background run: hold it until newer changes arrive
            started.set()
            assert release.wait(10)
        control.check()
        return searches_run(values)

    playground = RolloutPlayground(run, values=budgets("fast"))  # the first run is synchronous
    assert calls == [budgets("fast")["group_size"]]
    slider = playground.sliders["group_size"]
    slider.value = 3
    assert started.wait(10)
    assert "running" in playground.status.value
    slider.value = 4
    slider.value = 5
    slider.value = 6
    assert "newer settings" in playground.status.value
    release.set()
    assert playground.wait(10)
    assert calls == [2, 3, 6]  # 4 and 5 never ran
    assert len(playground.tree.data["leaves"]) == 6 and playground.runs == 2  # run 3 was overtaken: not drawn
    assert "group_size 2 → 6" in playground.changes.value


def test_watched_sampler_reports_requests_and_stops_an_overtaken_run():
    class Control:
        superseded = False
        messages: list[str] = []

        def check(self):
            if self.superseded:
                raise Superseded("newer")

        def progress(self, text):
            self.messages.append(text)

    inner = SimpleNamespace(sample=lambda **kw: "sampled", get_tokenizer=lambda: "tok")
    control = Control()
    sampler = WatchedSampler(inner, control)
    assert sampler.sample(prompt=None) == "sampled" and sampler.get_tokenizer() == "tok"
    assert control.messages == ["sampling request 1"]
    control.superseded = True
    with pytest.raises(Superseded):
        sampler.sample(prompt=None)


def test_live_run_fn_loads_the_picked_policy_and_uses_the_top_k_slider(monkeypatch):
    import helpers.widgets.live as live

    loaded, used = [], {}

    def fake_rollout(sampler, tokenizer, search, examples, config, progress):
        used.update(topk=search.topk, question=examples[0].question, group=config.group_size,
                    searches=config.max_search_calls)
        return []

    monkeypatch.setattr("helpers.rollout.rollout_batch", fake_rollout)
    monkeypatch.setattr(live, "tree_data", lambda batch: {"question": "", "answers": [], "leaves": []})
    monkeypatch.setattr(live, "search_client_for", lambda topk, backend="local": SimpleNamespace(topk=topk))
    run = live_run_fn(load=lambda name: loaded.append(name) or SimpleNamespace(sampler=None, tokenizer=None))
    run({**budgets("fast"), "policy": "sft_grpo", "question": "who?", "search_topk": 5, "group_size": 3})
    assert loaded == ["sft_grpo"] and used == {"topk": 5, "question": "who?", "group": 3,
                                                "searches": budgets("fast")["max_search_calls"]}
    with pytest.raises(ValueError, match="type a question"):
        run({**budgets("fast"), "policy": "base", "question": "   "})


def test_budget_run_fn_states_and_enforces_b_on_every_question(monkeypatch):
    seen = {}

    def fake_rollout(sampler, tokenizer, search, examples, config, progress):
        seen.update(budget=config.search_budget, calls=config.max_search_calls, group=config.group_size,
                    questions=len(examples))
        return [SimpleNamespace(question_index=i, exact_match=i == 0, answer="a", group_index=0, example=example)
                for i, example in enumerate(examples)]

    monkeypatch.setattr("helpers.rollout.rollout_batch", fake_rollout)
    monkeypatch.setattr("helpers.widgets.live.tree_data",
                        lambda group: {"leaves": [branch(0, [answer("Answer: a")], 1.0, 0.0)]})
    monkeypatch.setattr("helpers.widgets.live.search_client_for", lambda topk, backend="local": None)
    questions = [SearchExample("1", "q one", ["gold one"], "hotpotqa"), SearchExample("2", "q two", ["gold two"], "nq")]
    run = budget_run_fn(questions, load=lambda name: SimpleNamespace(sampler=None, tokenizer=None))
    data = run({**budgets("fast"), "policy": "sft_grpo", "budget": 2})
    assert seen == {"budget": 2, "calls": 2, "group": 1, "questions": 2}
    assert [leaf["index"] for leaf in data["leaves"]] == [0, 1] and data["accuracy"] == 0.5
    assert "budget b = 2: 1 answered right" in data["question"]
    # each row is its own question with its own gold; rows are q0, q1 in the tree and the table alike;
    # a question is a group of one, so no advantage is shown
    assert [(leaf["question"], leaf["answers"]) for leaf in data["leaves"]] == [("q one", ["gold one"]),
                                                                                ("q two", ["gold two"])]
    from helpers.widgets.tree import normalise_tree, tree_html

    shown = normalise_tree(data)
    assert shown["row_prefix"] == "q" and shown["advantages"] is False
    assert "no reference answer" not in shown["gold"] and shown["leaves"][1]["gold"] == "gold: gold two"
    html = tree_html(data)
    assert "<b>q0</b>" in html and "τ0" not in html and "gold: gold one" in html and " · A " not in html
    playground = RolloutPlayground(run, values={**budgets("fast"), "budget": 1, "policy": "sft_grpo"},
                                   sliders={"budget": (0, 5, 1)}, background=False)
    assert ">q0 " in playground.changes.value and "τ" not in playground.changes.value
    assert "<th>advantage</th>" not in playground.changes.value
    assert "no reference answer" not in playground.tree.data["gold"]


def _write_eval(folder, name, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(qid, calls, cut=0, right=False, source="hotpotqa"):
    return {"id": qid, "question": f"question {qid}", "answers": [f"gold {qid}"], "data_source": source,
            "mode": "agent", "search_calls": calls, "truncated_observations": cut, "exact_match": right}


def _write_policy_eval(name, rows):
    """A recorded policy's evaluation rows where its own run keeps them (under the patched results folder)."""
    from helpers.course.policies import evaluation_path

    path = evaluation_path(name)
    _write_eval(path.parent, path.stem, rows)


def test_budget_questions_take_each_kind_in_turn(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    from helpers.course.policies import SEARCHES_AGAIN

    _write_policy_eval(SEARCHES_AGAIN, [_row("a", 1), _row("b", 2), _row("c", 2), _row("d", 1), _row("e", 1)])
    _write_policy_eval("sft_grpo", [_row("a", 1, right=True), _row("b", 1), _row("c", 1), _row("d", 1, cut=1),
                                    _row("e", 0)])
    picked = budget_questions()
    assert [q.example.id for q in picked] == ["a", "b", "d", "c"]
    assert "answered right after one search" in picked[0].why and "searched 2 times" in picked[1].why
    assert "cut" in picked[2].why and picked[0].example.answers == ["gold a"]
    assert [q.example.id for q in budget_questions(limit=2)] == ["a", "b"]
    assert budget_questions(run="missing") == []


def test_budget_questions_come_from_the_recorded_run():
    picked = budget_questions()
    assert len(picked) == 8 and all(q.example.answers for q in picked)
    kinds = {q.why.split(":")[0] for q in picked[:3]}
    assert len(kinds) == 3


def _trajectory(*kinds):
    return SimpleNamespace(turns=[SimpleNamespace(kind=kind) for kind in kinds], group_index=0, answer="")


@pytest.mark.parametrize("kinds, forced", [(("answer",), True), (("invalid",), True), (("tool",), False)])
def test_a_teacher_forced_branch_is_added_only_when_no_sampled_branch_tried_to_search(monkeypatch, kinds, forced):
    import helpers.widgets.live as live

    batch = [_trajectory(*kinds), _trajectory("answer")]
    monkeypatch.setattr("helpers.rollout.rollout_batch", lambda *args, **kwargs: batch)
    monkeypatch.setattr(live, "search_client_for", lambda topk, backend="local": "search")
    monkeypatch.setattr(live, "tree_data", lambda group: tree(*[branch(i, [answer("Answer: x")], 0.0, 0.0)
                                                               for i in range(len(group))]))
    given = []

    def fake_forced(example, queries, gold, **kwargs):
        given.append((example.id, list(queries), gold, kwargs["values"]["max_tool_response_tokens"],
                      kwargs["group_index"]))
        return SimpleNamespace(answer=gold)

    monkeypatch.setattr(live, "forced_trajectory", fake_forced)
    from helpers.running_example import ANSWER, QUERIES, RUNNING_EXAMPLE

    values = {**budgets("fast"), "policy": "base", "question": RUNNING_EXAMPLE, "max_tool_response_tokens": 32}
    policy = SimpleNamespace(sampler=None, tokenizer=None, label="base model")
    data = live_run_fn(load=lambda name: policy, teacher_forced=True)(values)
    sources = [leaf.get("source", "sampled") for leaf in data["leaves"]]
    if forced:
        assert given == [(RUNNING_EXAMPLE.id, list(QUERIES), ANSWER, 32, 2)]
        assert sources == ["sampled", "sampled", "teacher-forced"] and data["leaves"][2]["advantage"] == 0.0
        assert "τ2 is added, teacher-forced" in data["note"]
    else:  # a policy that searches (even a call the budget refuses) is shown as it is
        assert given == [] and sources == ["sampled", "sampled"] and "note" not in data
    assert "note" not in live_run_fn(load=lambda name: policy)(values)  # off unless asked for
    typed = live_run_fn(load=lambda name: policy, teacher_forced=True)({**values, "question": "who?"})
    assert len(typed["leaves"]) == 2 and (forced == ("typed question" in typed.get("note", "")))


def test_the_forced_path_of_a_recorded_question_is_what_a_trained_policy_did(tmp_path, monkeypatch):
    from helpers.widgets.live import forced_path

    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    folder = tmp_path / "run" / "eval"
    _write_eval(folder, "sft", [{**_row("a", 2), "queries": ["q1", "q2"], "answer": "sft answer"},
                                {**_row("b", 1), "queries": ["b1"], "answer": None}])
    _write_eval(folder, "sft_grpo", [{**_row("a", 1), "queries": ["q1"], "answer": "grpo answer"},
                                     {**_row("b", 1), "queries": ["b1"], "answer": "b answer"}])
    queries, answer_text, origin = forced_path(SearchExample("a", "question a", ["gold a"], "hotpotqa"), run="run")
    assert queries == ["q1", "q2"] and answer_text == "sft answer" and "recorded SFT policy" in origin
    assert forced_path(SearchExample("b", "question b", ["gold b"], "nq"), run="run")[:2] == (["b1"], "b answer")
    assert forced_path(SearchExample("typed", "my own", [], "typed"), run="run") is None


def test_teacher_forced_branches_are_labelled_in_the_tree_the_change_table_and_the_note():
    from helpers.widgets.tree import normalise_tree, tree_html

    data = tree(branch(0, [answer("Answer: x")], 0.0, 0.0),
                {**branch(1, [tool("q", 0, cut=True, fitted=False)], -0.1, 0.0, "observation_budget"),
                 "source": "teacher-forced"})
    assert [leaf["source"] for leaf in normalise_tree(data)["leaves"]] == ["sampled", "teacher-forced"]
    html = tree_html(data)
    assert html.count("teacher-forced") == 2 and 'data-source="teacher-forced"' in html and "(cut)" in html
    with pytest.raises(ValueError, match="source"):
        normalise_tree(tree({**branch(0, [], 0.0, 0.0), "source": EVIL}))
    table = changes_html(compare_runs(None, data))
    assert table.count("teacher-forced") == 1
    playground = RolloutPlayground(lambda values: {**data, "note": "τ1 is teacher-forced " + EVIL},
                                   values=budgets("fast"), background=False)
    assert "τ1 is teacher-forced" in playground.note.value and "<img" not in playground.note.value


@pytest.mark.slow
def test_in_the_fast_profile_a_tiny_observation_budget_cuts_a_search_of_the_tree(monkeypatch):
    """Notebook 05's playground on the fast profile's small model, which does not search on its own."""
    import torch

    from helpers.widgets.changes import run_summary

    monkeypatch.setenv("COURSE_PROFILE", "fast")
    torch.set_num_threads(2)
    question = budget_questions()[0].example
    run = live_run_fn(seed=1, teacher_forced=True)
    data = run({**budgets("fast"), "policy": "base", "question": question, "max_tool_response_tokens": 96})
    summaries = run_summary(data)
    assert any(row["cut"] for row in summaries), summaries  # the tree shows ✂ on some search
    sampled_searched = any(row["source"] == "sampled" and row["searches"] for row in summaries)
    assert sampled_searched or [row["source"] for row in summaries].count("teacher-forced") == 1
    forced = [row for row in summaries if row["source"] == "teacher-forced"]
    if forced:
        assert forced[0]["end_reason"] == "observation_budget" and "teacher-forced" in data["note"]


def _measured(qid, policy, setting, calls, right):
    return {"id": qid, "question": f"question {qid}", "answers": [f"gold {qid}"], "data_source": "hotpotqa",
            "policy": policy, "setting": setting, "search_calls": calls, "queries": [f"q{n}" for n in range(calls)],
            "exact_match": right, "answer": "", "end_reason": "answer"}


def test_the_twice_prompts_are_the_measured_second_searches_and_run_the_policy_that_searches_again(tmp_path, monkeypatch):
    from helpers.course.policies import SEARCHES_AGAIN

    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    # in the recorded evaluation "b" was searched twice; measured on a CPU, only "m" was
    _write_policy_eval(SEARCHES_AGAIN, [_row("a", 1), _row("b", 2), _row("d", 1)])
    _write_policy_eval("sft_grpo", [_row("a", 1, right=True), _row("b", 1), _row("d", 1, cut=1)])
    measured = [_measured("m", SEARCHES_AGAIN, "playground", 2, True), _measured("n", SEARCHES_AGAIN, "playground", 1, True),
                _measured("b", SEARCHES_AGAIN, "playground", 1, False)]
    monkeypatch.setattr("helpers.widgets.live.recorded_or_learner", lambda name, model=None: name)
    picked = budget_questions(measured=measured)
    twice = [q for q in picked if "searched 2 times" in q.why]
    assert [q.example.id for q in twice] == ["m"] and twice[0].policy == SEARCHES_AGAIN
    assert "on a CPU" in twice[0].why and "'q0' → 'q1'" in twice[0].why
    once = [q for q in picked if "after one search" in q.why]
    assert once[0].policy == "sft_grpo" and "−0.1" in once[0].why and "from memory" not in once[0].why
    # without a measurement the recorded evaluation's second searches are offered
    assert [q.example.id for q in budget_questions(measured=[]) if "searched 2" in q.why] == ["b"]
    # a policy that cannot run here is not named: the picked one stays
    monkeypatch.setattr("helpers.widgets.live.recorded_or_learner", lambda name, model=None: None)
    assert all(q.policy is None for q in budget_questions(measured=measured))


def test_the_twice_prompts_run_the_policy_that_searches_again_from_its_own_rows(tmp_path, monkeypatch):
    """The CPU rows of the policy that searches again pick the "twice" prompts; without them its own
    run's recorded rows do, whatever another policy did on a CPU or in another run."""
    from helpers.course.policies import POLICY_LABELS, SEARCHES_AGAIN, policy_run

    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr("helpers.widgets.live.recorded_or_learner", lambda name, model=None: name)
    _write_eval(tmp_path / "h200_search" / "eval", "sft", [_row("s", 2), _row("r", 1)])
    _write_eval(tmp_path / "h200_search" / "eval", "sft_grpo", [_row("s", 1), _row("r", 2)])
    _write_eval(tmp_path / "h200_agent" / "eval", "sft_grpo", [_row("a", 2), _row("s", 1), _row("r", 1)])
    _write_policy_eval(SEARCHES_AGAIN, [_row("g", 2), _row("s", 1), _row("r", 1)])

    def twice(measured):
        return [(q.example.id, q.policy) for q in budget_questions(measured=measured) if "searched 2 times" in q.why]

    sft_on_cpu = [_measured("s", "sft", "playground", 2, True), _measured("a", "agent", "playground", 2, True)]
    assert twice(sft_on_cpu + [_measured("m", SEARCHES_AGAIN, "playground", 2, True)]) == [("m", SEARCHES_AGAIN)]
    picked = [q for q in budget_questions(measured=sft_on_cpu) if "searched 2 times" in q.why]
    assert [(q.example.id, q.policy) for q in picked] == [("g", SEARCHES_AGAIN)]
    assert POLICY_LABELS[SEARCHES_AGAIN] in picked[0].why and policy_run(SEARCHES_AGAIN) in picked[0].why


def test_sweep_questions_are_those_whose_own_sweep_shows_the_recorded_shape():
    from helpers.course.policies import SEARCHES_AGAIN, TRAINED_POLICY, evaluation_path
    from helpers.runs import read_jsonl
    from helpers.widgets.live import sweep_questions

    rows = []
    for qid, again_1, again_3, trained_1 in [("flat", False, False, False), ("more", False, True, True),
                                             ("first", True, True, True), ("more2", False, True, False)]:
        rows += [_measured(qid, SEARCHES_AGAIN, "sweep b=1", 1, again_1), _measured(qid, SEARCHES_AGAIN, "sweep b=3", 2, again_3),
                 _measured(qid, TRAINED_POLICY, "sweep b=1", 1, trained_1)]
    picked = sweep_questions(4, rows)
    assert [q.id for q in picked] == ["more", "first", "more2", "flat"]
    assert picked[0].answers == ["gold more"] and [q.id for q in sweep_questions(2, rows)] == ["more", "first"]
    # no sweep measured (only the playground's): the recorded evaluations' questions where the policy
    # that searches again answered right after two searches and SFT + GRPO right after one
    playground_only = [_measured("m", SEARCHES_AGAIN, "playground", 2, True)]
    recorded = sweep_questions(4, playground_only)
    again = {r["id"]: r for r in read_jsonl(evaluation_path(SEARCHES_AGAIN))}
    grpo = {r["id"]: r for r in read_jsonl(config.RESULTS_DIR / "h200_search" / "eval" / "sft_grpo.jsonl")}
    assert len(recorded) == 4 and recorded[0].question == "Tysons Galleria is located in what county?"
    for q in recorded:
        assert again[q.id]["search_calls"] == 2 and again[q.id]["exact_match"] and grpo[q.id]["exact_match"]
        assert grpo[q.id]["search_calls"] == 1 and q.answers == again[q.id]["answers"]


def test_the_recorded_measurement_has_a_second_search_of_the_policy_that_searches_again():
    """The committed CPU measurement (results/cpu_measured) backs the playground's "twice" prompts."""
    from helpers.course.policies import SEARCHES_AGAIN
    from helpers.widgets.measured import measured_rows

    rows = [r for r in measured_rows() if r["policy"] == SEARCHES_AGAIN and r["setting"] == "playground"]
    assert rows, "record it: python -m helpers.widgets.measured record"
    assert any(r["search_calls"] >= 2 for r in rows)
    twice = [q for q in budget_questions() if "searched" in q.why and "times" in q.why]
    assert twice and {q.example.id for q in twice} <= {r["id"] for r in rows if r["search_calls"] >= 2}


@pytest.mark.slow
def test_a_twice_prompt_makes_its_policy_search_again_on_a_cpu(monkeypatch):
    """The playground's first "twice" prompt, run as the playground runs it (the full profile's
    budgets, greedy, one branch), with the policy it names: a second search happens."""
    import torch

    from helpers.course.policies import SEARCHES_AGAIN, unavailable_reason

    monkeypatch.setenv("COURSE_PROFILE", "full")
    twice = [q for q in budget_questions() if "searched" in q.why and "times" in q.why]
    assert twice and twice[0].policy is not None, unavailable_reason(SEARCHES_AGAIN)
    torch.set_num_threads(2)
    run = live_run_fn(seed=1)
    values = {**budgets("full"), "group_size": 1, "temperature": 0.0, "policy": twice[0].policy,
              "question": twice[0].example}
    data = run(values)
    from helpers.widgets.changes import run_summary

    searches = [row["searches"] for row in run_summary(data)]
    assert max(searches) >= 2, (twice[0].example.question, searches)
    lowered = run({**values, "max_search_calls": 1})  # the lesson: a budget of 1 refuses the second search
    assert lowered["leaves"][0]["end_reason"] == "search_budget" and lowered["leaves"][0]["reward"] == pytest.approx(-0.1)


def test_a_question_searched_twice_is_offered_as_a_twice_prompt_not_as_a_once_prompt(tmp_path, monkeypatch):
    from helpers.course.policies import SEARCHES_AGAIN

    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    folder = tmp_path / "run" / "eval"
    _write_eval(folder, "sft", [_row("a", 2), _row("b", 1)])
    _write_eval(folder, "sft_grpo", [_row("a", 1, right=True), _row("b", 1, right=True)])
    picked = budget_questions(run="run", measured=[_measured("a", SEARCHES_AGAIN, "playground", 2, True)])
    assert [(q.example.id, "searched 2 times" in q.why) for q in picked] == [("b", False), ("a", True)]
