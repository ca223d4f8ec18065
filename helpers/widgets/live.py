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
from typing import Any, Callable, Sequence

from helpers.course.policies import POLICY_LABELS, RECORDED_RUN, load_policy, run_dir
from helpers.course.state import search_client
from helpers.data import SearchExample
from helpers.running_example import ANSWER, QUERIES, RUNNING_EXAMPLE
from helpers.runs import read_jsonl
from helpers.widgets.adapters import tree_data
from helpers.widgets.course import forced_trajectory, rollout_config


@dataclass
class BudgetQuestion:
    """A recorded test question where a budget visibly matters, and what the recorded run did."""

    example: SearchExample
    why: str


def _recorded_rows(run: str | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """The recorded evaluation's agent rows: policy name -> question id -> row."""
    folder = run_dir(run) / "eval"
    return {name: {row["id"]: row for row in read_jsonl(folder / f"{name}.jsonl") if row.get("mode", "agent") == "agent"}
            for name in ("sft", "sft_grpo")}


def budget_questions(limit: int = 8, run: str | None = None) -> list[BudgetQuestion]:
    """Questions from the recorded evaluation where moving a budget changes what the agent does.

    Taken in turn from three kinds, so the first few cover all of them: the SFT policy searched
    twice (max_search_calls 2 → 1 refuses the second search), the evidence was cut to the
    observation budget (max_tool_response_tokens), and the SFT + GRPO policy answered right after
    one search (max_search_calls 1 → 0 leaves it to what the model knows); within a kind, the
    shortest questions first. Empty when the run has no evaluation rows.
    """
    by_policy = _recorded_rows(run)
    ids = list(dict.fromkeys([*by_policy["sft_grpo"], *by_policy["sft"]]))

    def row_of(qid: str) -> dict[str, Any]:
        return by_policy["sft_grpo"].get(qid) or by_policy["sft"][qid]

    def calls(name: str, qid: str) -> int:
        return int(by_policy[name].get(qid, {}).get("search_calls", 0))

    twice = [(qid, f"in the recorded run the SFT policy searched {calls('sft', qid)} times "
                   f"(SFT + GRPO: {calls('sft_grpo', qid)}): lower max_search_calls to refuse the second search")
             for qid in ids if calls("sft", qid) >= 2 and row_of(qid).get("data_source") == "hotpotqa"]
    cut = [(qid, "in the recorded run the evidence was cut to the observation budget: lower "
                 "max_tool_response_tokens to cut more")
           for qid in ids if any(int(by_policy[n].get(qid, {}).get("truncated_observations", 0)) for n in by_policy)]
    once = [(qid, "the SFT + GRPO policy answered right after one search: with max_search_calls = 0 it "
                  "must answer from memory")
            for qid in ids if calls("sft_grpo", qid) == 1 and by_policy["sft_grpo"][qid].get("exact_match")]
    picked: dict[str, str] = {}
    # Shortest questions first: their tool calls fit small turn budgets and their trees fit on screen.
    queues = [sorted(kind, key=lambda item: len(row_of(item[0])["question"])) for kind in (once, twice, cut)]
    while len(picked) < limit and any(queues):
        for queue in queues:  # one of each kind per round, skipping questions already taken
            while queue and queue[0][0] in picked:
                queue.pop(0)
            if queue and len(picked) < limit:
                qid, why = queue.pop(0)
                picked[qid] = why
    out = []
    for qid, why in picked.items():
        row = row_of(qid)
        example = SearchExample(str(qid), str(row["question"]), [str(a) for a in row["answers"]],
                                str(row.get("data_source", "unknown")))
        out.append(BudgetQuestion(example, why))
    return out


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
    what a trained policy of the recorded run searched and answered there (the policy that searched
    more often, so that a search budget has something to refuse). None for any other question.
    """
    if example.id == RUNNING_EXAMPLE.id:
        return list(QUERIES), ANSWER, "the running example's two searches and its gold answer"
    rows = [(name, row.get(example.id)) for name, row in _recorded_rows(run).items()]
    rows = [(name, row) for name, row in rows if row and row.get("queries") and row.get("answer")]
    if not rows:
        return None
    name, row = max(rows, key=lambda item: (len(item[1]["queries"]), item[0] == "sft_grpo"))
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
            leaves.append(leaf)
        correct = sum(bool(t.exact_match) for t in batch)
        return {"question": f"{len(batch)} questions at budget b = {budget}: {correct} answered right",
                "answers": [], "leaves": leaves, "accuracy": correct / max(1, len(batch)), "budget": budget}

    return run


__all__ = ["BudgetQuestion", "RECORDED_RUN", "WatchedSampler", "add_forced_branch", "as_example", "budget_questions",
           "budget_run_fn", "forced_path", "live_run_fn", "search_client_for"]
