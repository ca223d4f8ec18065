"""Live widgets on a policy that searches: the run functions behind the playground (notebooks 05
and 10) and the live budget slider (notebook 12), and the questions where a budget matters.

A run function takes the widget's values — every budget, "policy" (what
`helpers.course.policies.load_policy` takes), "question" (an example) and "search_topk" (passages per
search) — and returns TrajectoryTree data. It reports progress and stops at the next sampling
request once the learner has moved a slider again (see `RunControl`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import zip_longest
from typing import Any, Callable, Sequence

from helpers.course.policies import (POLICY_LABELS, RECORDED_POLICIES, RECORDED_RUN, SEARCHES_AGAIN, TRAINED_POLICY,
                                     evaluation_path, load_policy, policy_run, recorded_or_learner)
from helpers.course.state import search_client
from helpers.data import SearchExample, load_examples
from helpers.running_example import ANSWER, QUERIES, RUNNING_EXAMPLE
from helpers.runs import read_jsonl
from helpers.widgets.adapters import tree_data
from helpers.widgets.course import forced_trajectory, rollout_config
from helpers.widgets.measured import SWEEP_BUDGETS, measured_rows


@dataclass
class BudgetQuestion:
    """A test question where a budget visibly matters, what a policy did there, and the policy the
    prompt runs (what `load_policy` takes; None: keep the one picked)."""

    example: SearchExample
    why: str
    policy: str | None = None


def _recorded_rows(run: str | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """Each recorded policy's evaluation rows in the agent loop, read from the policy's own run (or
    from `run` when given): policy name -> question id -> row ({} where a run has none)."""
    out = {}
    for name in RECORDED_POLICIES:
        path = evaluation_path(name, run)
        if path is not None:
            out[name] = {row["id"]: row for row in read_jsonl(path) if row.get("mode", "agent") == "agent"}
    return out


def _second_searches(run: str | None, measured: Sequence[dict[str, Any]] | None) -> list[tuple[dict[str, Any], str]]:
    """(row, why) for the questions where the policy that searches again (`SEARCHES_AGAIN`) made a
    second search: measured on a CPU with the playground's budgets where that policy was measured,
    else in its recorded GPU evaluation (HotpotQA)."""
    label = POLICY_LABELS.get(SEARCHES_AGAIN, SEARCHES_AGAIN)
    measured = [row for row in (measured if measured is not None else measured_rows())
                if row["policy"] == SEARCHES_AGAIN and row["setting"] == "playground"]
    rows = [row for row in measured if int(row["search_calls"]) >= 2]
    where = "on a CPU, greedy, with these budgets,"
    if not measured:  # a CPU measurement of another policy says nothing about this one
        rows = [row for row in _recorded_rows(run).get(SEARCHES_AGAIN, {}).values()
                if int(row.get("search_calls", 0)) >= 2 and row.get("data_source") == "hotpotqa"]
        where = f"in its recorded evaluation ({policy_run(SEARCHES_AGAIN, run)})"
    trained = POLICY_LABELS[TRAINED_POLICY]
    return [(row, f"{where} the {label} searched {row['search_calls']} times here ("
                  + " → ".join(repr(str(q)) for q in row.get("queries") or []) + "): lower max_search_calls to 1 "
                  f"to refuse the second search (the branch then ends on that call, −0.1); {trained} almost never "
                  "searches twice, so a budget above 1 changes nothing for it") for row in rows]


def budget_questions(limit: int = 8, run: str | None = None,
                     measured: Sequence[dict[str, Any]] | None = None) -> list[BudgetQuestion]:
    """Questions where moving a budget changes what the agent does, and the policy each one runs.

    Taken in turn from three kinds, so the first few cover all of them: the trained policy
    (`TRAINED_POLICY`, SFT + GRPO) answered right after one search in the recorded run
    (max_search_calls 1 → 0 refuses that search: the branch ends on its call with −0.1, since the
    policy never learned to answer without searching); the policy that searches again
    (`SEARCHES_AGAIN`) made a second search — measured on a CPU with the
    playground's budgets (`helpers.widgets.measured`), else in its recorded evaluation — and
    max_search_calls 2 → 1 refuses it; the evidence was cut to the observation budget
    (max_tool_response_tokens) in a recorded evaluation. Within a kind, the shortest questions
    first. Empty when the recorded runs have no evaluation rows. A prompt names its policy only
    where that policy runs here.
    """
    by_policy = _recorded_rows(run)
    ids = list(dict.fromkeys(qid for name in (TRAINED_POLICY, *by_policy) for qid in by_policy.get(name, {})))
    if not ids:
        return []
    rows: dict[str, dict[str, Any]] = {qid: next(by_policy[name][qid] for name in (TRAINED_POLICY, *by_policy)
                                                 if qid in by_policy.get(name, {})) for qid in ids}

    def calls(name: str, qid: str) -> int:
        return int(by_policy.get(name, {}).get(qid, {}).get("search_calls", 0))

    twice = []
    for row, why in _second_searches(run, measured):
        rows.setdefault(str(row["id"]), row)
        twice.append((str(row["id"]), why, recorded_or_learner(SEARCHES_AGAIN)))
    cut = [(qid, "in the recorded run the evidence was cut to the observation budget: lower "
                 "max_tool_response_tokens to cut more", None)
           for qid in ids if any(int(by_policy[n].get(qid, {}).get("truncated_observations", 0)) for n in by_policy)]
    once = [(qid, f"the {POLICY_LABELS[TRAINED_POLICY]} policy answered right after one search: with max_search_calls "
                  "= 0 that search is refused, and the branch ends on its call (search_budget) with −0.1 — this "
                  "policy never learned to answer without searching", recorded_or_learner(TRAINED_POLICY))
            for qid in ids if calls(TRAINED_POLICY, qid) == 1 and by_policy[TRAINED_POLICY][qid].get("exact_match")
            and qid not in {item[0] for item in twice}]  # a question searched twice on teaches that
    picked: dict[str, tuple[str, str | None]] = {}
    # Shortest questions first: their tool calls fit small turn budgets and their trees fit on screen.
    queues = [sorted(kind, key=lambda item: len(rows[item[0]]["question"])) for kind in (once, twice, cut)]
    while len(picked) < limit and any(queues):
        for queue in queues:  # one of each kind per round, skipping questions already taken
            while queue and queue[0][0] in picked:
                queue.pop(0)
            if queue and len(picked) < limit:
                qid, why, policy = queue.pop(0)
                picked[qid] = (why, policy)
    out = []
    for qid, (why, policy) in picked.items():
        row = rows[qid]
        example = SearchExample(str(qid), str(row["question"]), [str(a) for a in row["answers"]],
                                str(row.get("data_source", "unknown")))
        out.append(BudgetQuestion(example, why, policy))
    return out


def _by_setting(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    out: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        out.setdefault((row["policy"], row["setting"]), {})[str(row["id"])] = row
    return out


def sweep_questions(limit: int, rows: Sequence[dict[str, Any]] | None = None,
                    run: str | None = None) -> list[SearchExample]:
    """Test questions where notebook 12's own sweep can show the shape of the recorded curve.

    Measured on a CPU (`helpers.widgets.measured`, "sweep b=…" rows): taken in turn from two kinds,
    the policy that searches again was wrong at b = 1 and right at b = 3 (a larger budget helps a
    policy that searches again), and the trained policy was right at b = 1 (b = 0 → 1 rises: at
    b = 0 its call is refused); measured questions that show neither follow. Without such rows:
    the recorded evaluations' HotpotQA questions where the policy that searches again answered
    right after two searches and the trained policy right after one, shortest first; without
    those, the first test questions.
    """
    rows = [row for row in (rows if rows is not None else measured_rows()) if row["setting"].startswith("sweep")]
    if not rows:
        return _recorded_sweep_questions(limit, run) or load_examples("test", limit=limit)
    table = _by_setting(rows)
    low, high = (f"sweep b={b}" for b in SWEEP_BUDGETS)  # b = 1 and b = 3

    def right(policy: str, setting: str, qid: str) -> bool:
        return bool(table.get((policy, setting), {}).get(qid, {}).get("exact_match"))

    ids = list(dict.fromkeys(str(row["id"]) for row in rows))
    more = [qid for qid in ids if not right(SEARCHES_AGAIN, low, qid) and right(SEARCHES_AGAIN, high, qid)]
    first = [qid for qid in ids if right(TRAINED_POLICY, low, qid) and qid not in more]
    picked: list[str] = []
    for pair in zip_longest(more, first):  # one of each kind in turn
        picked += [qid for qid in pair if qid is not None and qid not in picked]
    picked += [qid for qid in ids if qid not in picked]
    by_id = {str(row["id"]): row for row in rows}
    return [SearchExample(qid, by_id[qid]["question"], list(by_id[qid]["answers"]), by_id[qid]["data_source"])
            for qid in picked[:limit]]


def _recorded_sweep_questions(limit: int, run: str | None = None) -> list[SearchExample]:
    by_policy = _recorded_rows(run)
    again, trained = by_policy.get(SEARCHES_AGAIN, {}), by_policy.get(TRAINED_POLICY, {})
    ids = [qid for qid, row in again.items() if row.get("data_source") == "hotpotqa" and row.get("exact_match")
           and int(row.get("search_calls", 0)) >= 2 and trained.get(qid, {}).get("exact_match")
           and int(trained[qid].get("search_calls", 0)) == 1]
    ids.sort(key=lambda qid: len(again[qid]["question"]))
    return [SearchExample(qid, str(again[qid]["question"]), [str(a) for a in again[qid]["answers"]], "hotpotqa")
            for qid in ids[:limit]]


@lru_cache(maxsize=16)
def search_client_for(topk: int, backend: str = "local") -> Any:
    """A search client returning `topk` passages per query (the local one shares the loaded index)."""
    from helpers.search import create_search_client

    if backend == "local":
        from helpers.search.local import LocalSearchClient

        shared = search_client("local")
        return LocalSearchClient(index=shared.index, topk=int(topk), max_chars=shared.max_chars)
    return create_search_client(backend, topk=int(topk))


class WatchedSampler:
    """A sampling client that reports each request and stops when its run has been overtaken."""

    def __init__(self, inner: Any, control: Any = None) -> None:
        self._inner, self._control, self.requests = inner, control, 0

    def _before(self) -> None:
        if self._control is not None:
            self._control.check()
            self.requests += 1
            self._control.progress(f"sampling request {self.requests}")

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        self._before()
        return self._inner.sample(*args, **kwargs)

    async def sample_async(self, *args: Any, **kwargs: Any) -> Any:
        self._before()
        return await self._inner.sample_async(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def as_example(question: Any) -> SearchExample:
    if isinstance(question, SearchExample):
        return question
    text = " ".join(str(question or "").split())
    if not text:
        raise ValueError("type a question (or pick one) before running the agent")
    return SearchExample("typed", text, [], "typed")


def _with_answers(data: dict[str, Any], batch: Sequence[Any]) -> dict[str, Any]:
    answers = {t.group_index: t.answer for t in batch}
    for leaf in data["leaves"]:
        leaf["answer"] = answers.get(leaf["index"]) or ""
    return data


def forced_path(example: Any, run: str | None = None) -> tuple[list[str], str, str] | None:
    """The searches and the answer a teacher-forced branch gives for `example`, and their origin.

    The running example: its two hops and its gold answer. A question of the recorded evaluation:
    what a trained recorded policy searched and answered there (the one that searched most often, so
    that a search budget has something to refuse). None for any other question.
    """
    if example.id == RUNNING_EXAMPLE.id:
        return list(QUERIES), ANSWER, "the running example's two searches and its gold answer"
    rows = [(name, rows.get(example.id)) for name, rows in _recorded_rows(run).items()]
    rows = [(name, row) for name, row in rows if row and row.get("queries") and row.get("answer")]
    if not rows:
        return None
    name, row = max(rows, key=lambda item: (len(item[1]["queries"]), item[0] == TRAINED_POLICY))
    return ([str(q) for q in row["queries"]], str(row["answer"]),
            f"the searches and the answer of the recorded {POLICY_LABELS[name]} policy on this question")


def add_forced_branch(data: dict[str, Any], batch: Sequence[Any], example: Any, policy: Any, search: Any,
                      values: dict[str, Any], control: Any = None) -> dict[str, Any]:
    """When no sampled branch of `batch` even tried to search, add one teacher-forced branch.

    A policy that never calls the tool (an untrained or very small model) leaves every search
    budget idle. The added branch's turns are given (`forced_path`), but they run through the same
    state machine and the same budgets, so a tiny observation budget cuts its evidence (✂) and
    max_search_calls refuses its calls. It is labelled `source: "teacher-forced"`, scored on its
    own (its advantage is not part of the sampled group's) and explained in `data["note"]`.
    """
    if any(turn.kind == "tool" for trajectory in batch for turn in trajectory.turns):
        return data
    path = forced_path(example)
    if path is None:
        data["note"] = ("no sampled branch tried to search, so no budget on searches binds here; a typed question "
                        "has no search path to teacher-force: pick one of the offered questions to see them bind")
        return data
    queries, answer, origin = path
    if control is not None:
        control.check()
        control.progress("teacher-forced branch")
    forced = forced_trajectory(example, queries, answer, sampler=policy.sampler, tokenizer=policy.tokenizer,
                               search=search, values=values, group_index=len(batch))
    leaf = tree_data([forced])["leaves"][0]
    leaf.update(index=len(batch), answer=forced.answer or "", source="teacher-forced", advantage=0.0)
    data["leaves"].append(leaf)
    data["note"] = (f"no sampled branch tried to search, so τ{leaf['index']} is added, teacher-forced: its turns are "
                    f"{origin}, not sampled; they run through the same state machine and budgets (its logprobs are "
                    "this policy's), and it is scored on its own, outside the group's advantages")
    return data


def live_run_fn(*, seed: int = 1, backend: str = "local", load: Callable[[Any], Any] = load_policy,
                teacher_forced: bool = False) -> Callable[..., dict[str, Any]]:
    """The playground's run function: one question, a group, the picked policy and budgets.

    teacher_forced: when no sampled branch tried to search, add a teacher-forced one
    (`add_forced_branch`), so that the budgets on searches still have something to act on.
    """
    from helpers.rollout import rollout_batch

    def run(values: dict[str, Any], control: Any = None) -> dict[str, Any]:
        if control is not None:
            control.progress(f"loading policy {values.get('policy')}")
        policy = load(values.get("policy"))
        search = search_client_for(int(values.get("search_topk", 3)), backend)
        example = as_example(values.get("question"))
        batch = list(rollout_batch(WatchedSampler(policy.sampler, control), policy.tokenizer, search, [example],
                                   rollout_config(values, seed=seed), progress=False))
        data = _with_answers(tree_data(batch), batch)
        if teacher_forced:
            data = add_forced_branch(data, batch, example, policy, search, values, control)
        return data

    return run


def budget_run_fn(examples: Sequence[Any], *, seed: int = 0, temperature: float = 0.6, backend: str = "local",
                  load: Callable[[Any], Any] = load_policy) -> Callable[..., dict[str, Any]]:
    """The live budget slider's run function: every example once under budget b (stated in the
    system prompt and enforced), as tree data whose branches are the questions."""
    from helpers.efficiency import budget_config
    from helpers.rollout import rollout_batch

    examples = [as_example(example) for example in examples]

    def run(values: dict[str, Any], control: Any = None) -> dict[str, Any]:
        if control is not None:
            control.progress(f"loading policy {values.get('policy')}")
        policy = load(values.get("policy"))
        search = search_client_for(int(values.get("search_topk", 3)), backend)
        budget = int(values["budget"])
        config = budget_config(budget, rollout_config(values, seed=seed, temperature=temperature))
        batch = list(rollout_batch(WatchedSampler(policy.sampler, control), policy.tokenizer, search, examples,
                                   config, progress=False))
        leaves = []
        for trajectory in batch:
            leaf = tree_data([trajectory])["leaves"][0]
            leaf["index"] = trajectory.question_index
            leaf["answer"] = trajectory.answer or ""
            # each row is its own question, scored against its own gold answer
            leaf["question"], leaf["answers"] = trajectory.example.question, list(trajectory.example.answers)
            leaves.append(leaf)
        correct = sum(bool(t.exact_match) for t in batch)
        # One trajectory per question is a group of one: its advantage is always 0, so none is shown.
        return {"question": f"{len(batch)} questions at budget b = {budget}: {correct} answered right",
                "answers": [], "leaves": leaves, "row_prefix": "q", "advantages": False,
                "accuracy": correct / max(1, len(batch)), "budget": budget}

    return run


__all__ = ["BudgetQuestion", "RECORDED_RUN", "WatchedSampler", "add_forced_branch", "as_example", "budget_questions",
           "budget_run_fn", "forced_path", "live_run_fn", "search_client_for", "sweep_questions"]
