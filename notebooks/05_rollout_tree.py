# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · The rollout tree: one root, many branches
#
# **What you will build.** The multi-turn rollout: a state machine that repeats *sample a turn →
# parse it → run the search → append the observation* until every trajectory of a group has
# answered, broken the protocol or run out of budget. You will see a group as a tree and change its
# budgets with sliders.
#
# **What you need.** The prompt and parser (02), the reward (03) and the search client (04).
#
# A trajectory is τ = (x, a₁, o₁, a₂, o₂, …, a_T): the question, then assistant actions a_t and
# observations o_t from the environment. The second query usually depends on the first observation,
# so nothing can be planned before the rollout starts: the trainer has to keep every trajectory's
# state and parse each turn as it comes.
#
# The policy is the trained agent of the recorded GPU run (SFT then GRPO) when its adapter runs on
# this profile's model, so searches happen; otherwise the policy notebook 09 trained, or the base
# model (`helpers.course.policies.default_policy` decides). Every rollout in this notebook — and the one
# notebooks 06, 07, 08 and 13 take over from here — comes from it.

# %%
from helpers.course.policies import load_policy
from helpers.rollout import RolloutConfig, groups_of, rollout_batch
from helpers.running_example import ANSWER, HOPS, QUERIES, RUNNING_EXAMPLE
from helpers.widgets import TrajectoryTree, budgets, tree_data
from helpers.widgets.course import remember, rollout_config, rollout_examples, search_client

values = budgets()
policy = load_policy()  # the default policy: recorded SFT + GRPO adapter > notebook 09's checkpoint > base model
print("policy:", policy.label, "on", policy.model)
sampler, tokenizer = policy.sampler, policy.tokenizer
search = search_client("local")
examples = rollout_examples(values["questions"])  # the running example (its tree is shown), then training questions
config = rollout_config(values, seed=0)
config

# %% [markdown]
# ## One question by hand
#
# Before the batch machinery, step one question through the rollout's calls one at a time — build
# the request, sample, `consume_assistant`, search, `finish_search`, the next request — and look at
# the `Trajectory` after each call: its turns, its messages (**S**ystem, **U**ser, **A**ssistant,
# **T**ool), how many tokens the next prompt has (blank until a prompt is rendered), the search
# count and whether it is done.

# %%
import pytrio as trio
from IPython.display import display

from helpers.course.policies import load_policy
from helpers.protocol import build_messages, call_text, parse_assistant, stop_sequences, template_family
from helpers.reward import score_answer
from helpers.rollout import Trajectory, consume_assistant, finish_search, make_request, read_sequence
from helpers.widgets.course import forced_sequence
from helpers.widgets.state import state_table, trajectory_state

hand_config = rollout_config(values, seed=0, group_size=1)
question = examples[0]
trajectory = Trajectory(example=question, group_index=0,
                        messages=build_messages(question.question, hand_config.search_budget, template_family(policy.tokenizer)))
states = [trajectory_state(trajectory, "Trajectory(...)")]
state_table(states)

# %% [markdown]
# **1. Build the request.** `make_request` renders the messages into prompt tokens (the first time
# only; later the prompt is the previous one plus what was appended) and checks that room is left
# in the context for at least one sampled token.

# %%
request = make_request(policy.tokenizer, trajectory, 0, 1, hand_config.seed, hand_config)
states.append(trajectory_state(trajectory, "make_request"))
print(f"prompt of {len(request.prompt_tokens)} tokens, at most {request.max_tokens} to sample")
state_table(states)

# %% [markdown]
# **2. Sample one turn.** One PyTRIO `sample` call: the prompt tokens, the stop strings of the chat
# template, and the sampling parameters. The sequence comes back as tokens with one logprob each.

# %%
params = trio.SamplingParams(max_tokens=request.max_tokens, seed=request.seed, stop=stop_sequences(policy.tokenizer),
                             temperature=hand_config.temperature, top_p=hand_config.top_p)
response = policy.sampler.sample(prompt=trio.ModelInput.from_ints(request.prompt_tokens), num_samples=1,
                                 sampling_params=params).result()
sequence = response.sequences[0]
sampled_text = read_sequence(sequence, policy.tokenizer)[2]  # the turn's text, without its stop token
print(f"{len(sequence.tokens)} tokens:", repr(sampled_text))
if parse_assistant(sampled_text).kind != "tool":
    # The policy answered at once (an untrained model usually does): so that the steps below show a
    # search, we hand the state machine the call a trained policy writes, with the logprobs this
    # policy gives it.
    sequence = forced_sequence(policy.sampler, policy.tokenizer, request.prompt_tokens, call_text(question.question))
    print("not a search; the walk-through continues with the call", repr(call_text(question.question)))

# %% [markdown]
# **3. `consume_assistant`.** It records the turn (prompt tokens, sampled tokens, logprobs, text,
# what the parser made of it), appends the assistant message and decides: an answer or an invalid
# turn ends the trajectory; a call within budget comes back as a pending search.

# %%
pending = consume_assistant(trajectory, request.prompt_tokens, sequence, policy.tokenizer, hand_config)
states.append(trajectory_state(trajectory, "consume_assistant"))
print("pending search:", None if pending is None else repr(pending.query))
state_table(states)

# %% [markdown]
# **4. Search**, then **5. `finish_search`**: it fits as many whole results as the observation
# budget allows, appends the tool message, and extends the next prompt by exactly the tokens the
# template adds (notebook 06) — the search count goes up only now.

# %%
if pending is not None:
    result = search.search(pending.query)
    print(f"search {pending.query!r}: {len(result.items)} results, ok={result.ok}")
    ended = finish_search(pending, result, policy.tokenizer, hand_config)
    print("ended on its call (not even one result fitted):", ended)
    states.append(trajectory_state(trajectory, "search + finish_search"))
state_table(states)

# %% [markdown]
# **6. The next request, and on until done.** The same calls again: request, sample, consume, search,
# finish — until the policy answers, breaks the protocol or runs out of budget. The reward of
# notebook 03 applies only when the trajectory ended on an answer; any other ending scores −0.1.

# %%
turn = 1
while not trajectory.done:
    request = make_request(policy.tokenizer, trajectory, 0, 1, hand_config.seed + turn * 10_000, hand_config)
    if request is None:  # no room left in the context: make_request ended the trajectory
        break
    params = trio.SamplingParams(max_tokens=request.max_tokens, seed=request.seed, stop=stop_sequences(policy.tokenizer),
                                 temperature=hand_config.temperature, top_p=hand_config.top_p)
    sequence = policy.sampler.sample(prompt=trio.ModelInput.from_ints(request.prompt_tokens), num_samples=1,
                                     sampling_params=params).result().sequences[0]
    pending = consume_assistant(trajectory, request.prompt_tokens, sequence, policy.tokenizer, hand_config)
    states.append(trajectory_state(trajectory, f"turn {turn + 1}: consume_assistant"))
    if pending is not None:
        finish_search(pending, search.search(pending.query), policy.tokenizer, hand_config)
        states.append(trajectory_state(trajectory, f"turn {turn + 1}: search + finish_search"))
    turn += 1
display(state_table(states))
print(f"ended: {trajectory.end_reason}; its last turn scored as a final answer:",
      score_answer(trajectory.final_text, question.answers), "| gold:", question.answers)

# %% [markdown]
# `rollout_batch` is this loop for many trajectories at once: the first request of each question
# asks for `num_samples = group_size` (one shared root), every returned sequence becomes its own
# branch, all requests of a turn are sent together, all searches of a turn run in a thread pool
# (`resolve_searches`), and the rewards and group advantages are computed once every branch is done.

# %% [markdown]
# ## Shared root, then branches
#
# For GRPO every question needs a *group* of G attempts that can be compared. The first turn of all G
# attempts has exactly the same prompt, so it is **one** sampling request with `num_samples=G`: the
# shared root. Each returned sequence is deep-copied into its own branch. From then on the branches
# see different observations, so each live branch gets its own request with `num_samples=1`.
#
# Within a turn, all sampling requests are sent at once (the engine decodes them together) and all
# searches run in a thread pool; results are matched back to their branches in order.
#
# `rollout_batch` is three stages in one call: `rollout_groups` (one `Group` of finished, unscored
# trajectories per question), `score(groups, reward_fn)` (exact match of notebook 03 by default) and
# `assign_advantages(groups)` (notebook 08). A training step calls the three itself, so that another
# reward function can take the place of exact match.

# %%
trajectories = rollout_batch(sampler, tokenizer, search, examples, config)
stats = trajectories.stats
print(f"{stats.trajectories} trajectories from {stats.questions} question(s) in {stats.total_seconds:.1f} s "
      f"({stats.sampling_seconds:.1f} s sampling, {stats.search_seconds:.2f} s searching)")
print(f"{stats.sample_requests} sampling requests over {stats.turns} turns, {stats.search_calls} searches")
print("how trajectories ended:", stats.end_reasons)
_ = remember("rollout_05", list(trajectories))
_ = remember("rollout_05_policy", policy.name)  # what load_policy takes: notebook 13 scores these tokens with it

# %% [markdown]
# ## The tree
#
# The root is the question. Each row is one branch (τ0, τ1, …): its turns in order — a search with
# its query and the size of the observation the model got back (✂ when the evidence was cut to the
# budget), ✎ a final answer (amber and dashed when its format is invalid), ⚠ an invalid turn — then its
# reward and advantage. **Click a row** to open its turns: the full assistant text and the full
# observation.

# %%
group = groups_of(trajectories)[0]
tree = TrajectoryTree(tree_data(group))
tree

# %% [markdown]
# `helpers.widgets.adapters.trajectory_tree` also nests the branches by their sampled tokens, so branches that
# produced exactly the same turn share a node — that is where you can see the group diverge.

# %%
from helpers.widgets.adapters import trajectory_tree


def show(node, depth=0):
    for child in node["children"]:
        turn = child["turn"]
        label = f"search {turn['query']!r}" if turn["kind"] == "tool" else f"{turn['kind']}: {turn['text'][:50]!r}"
        print("  " * depth + f"└ {label}  (branches {child['branches']})")
        show(child, depth + 1)


nested = trajectory_tree(group)
print(f"root: {nested['question']!r}  prompt {nested['prompt_tokens']} tokens, mean reward {nested['mean_reward']:+.2f}")
show(nested["root"])

# %% [markdown]
# ## Budgets are sliders
#
# The state machine has hard limits: `max_search_calls` per trajectory, `max_assistant_turns`,
# `max_assistant_tokens` per turn, `max_tool_response_tokens` per observation and
# `max_trajectory_tokens` for the whole context. They bound the cost of a training step *and* decide
# how much of the environment the agent can reach — so evaluation must use the same ones.
#
# A budget binds only where the policy makes what it limits, and the recorded policies differ:
#
# - **SFT + GRPO** (the default) searches once before nearly every answer and almost never
#   searches twice (in the recorded evaluation: never, on any test question), so for it every
#   `max_search_calls` above 1 reads "same";
# - the **multi-search agent** (SFT, then GRPO in two stages: exact match, then `trim`) searches again
#   on four in five HotpotQA test questions and one in ten NQ ones, bridge questions and comparisons
#   ("Are X and Y both …?"): first the question itself, then a name from what that search returned
#   ("Tysons Galleria is located in what county?" → "McLean") — so a budget of 1 refuses its second
#   search;
# - the **search agent** (SFT, then GRPO stages `habit` and `trim`) does so on about a quarter of the
#   HotpotQA questions;
# - **SFT** searches again too, on about half of the HotpotQA test questions;
# - the **base model** almost never writes a valid search at all.
#
# The questions offered first come from the recorded evaluations, where a budget visibly matters, and
# each names the policy it runs: picking a question marked "searched 2 times" picks the multi-search agent,
# on a question where it searched twice on a CPU with these budgets (measured greedily, in
# `results/cpu_measured`: set `temperature` to 0 to replay that run; at 1.0 the branches vary).
# Pick any other policy (or your own checkpoint from notebook 09) and
# question; you can also type your own (it has no reference answer, so its reward only checks the
# format).
#
# **Which case you are in.** In the full profile with the recorded adapter, every branch is sampled
# from the trained policy. Where that adapter cannot run (the fast profile's SmolLM2-135M) or when
# you pick the base model, the policy almost never writes a valid search, and a budget on searches
# has nothing to act on. Then the playground adds one **teacher-forced** branch, the last τ, striped
# and labelled "teacher-forced": its searches and answer are *given* (for an offered question, what
# the recorded run's trained policy searched and answered; for the running example, its two hops),
# but they run through the same state machine and the same budgets, with this policy's logprobs,
# so ✂ and the ends by budget show on it. It is scored on its own, outside the group's advantages.
# The line printed under the playground says which case this run is.
#
# Move any slider: the group runs again and the table under the buttons says, branch by branch, what
# changed against the previous run: searches made, observation tokens kept, observations cut, how the
# branch ended, its answer and reward ("changed"), and apart from those a branch that did the same
# but whose advantage moved because another branch of its group changed ("advantage only"). After
# you pick another question the run is a new baseline: branches are compared on one question only.
# Try:
#
# - a question the multi-search agent searched twice on, `max_search_calls` 3 → 1: the branches that searched
#   twice now end on their second call (`search_budget`) with −0.1 instead of their answer;
# - `max_search_calls = 0`: the first search is refused, the branch ends on its call
#   (`search_budget`) and its reward drops to −0.1 — a trained policy does not answer from memory
#   instead, it calls and is stopped;
# - a small `max_tool_response_tokens` (e.g. 160): passages are dropped from the evidence (✂) and the
#   answer may change; at the smallest values nothing fits and the branch ends (`observation_budget`);
# - `search_topk = 1` against 5: less or more evidence per search for the same query; with the
#   multi-search agent on a two-hop question, 2 against 3: with fewer passages the first search
#   settles less, and measured over the test split the same weights search again more often (notebook 10);
# - `max_assistant_tokens` below the length of a tool call (~30 tokens): calls are cut and invalid;
# - `group_size` and `temperature`: how alike the branches are, and so how large the advantages.
#
# A run takes a few seconds to a minute on a laptop CPU; the status line shows its progress. Moving
# another slider while it runs does not queue runs: the one in flight stops at its next step and only
# the latest settings run.

# %%
from helpers.course.policies import TRAINED_POLICY, default_policy, policy_options, unavailable_reason
from helpers.widgets import RolloutPlayground
from helpers.widgets.live import budget_questions, live_run_fn

playground = RolloutPlayground(live_run_fn(seed=1, teacher_forced=True), values=values, policies=policy_options(),
                               policy=default_policy(), questions=budget_questions())
if unavailable_reason(TRAINED_POLICY):  # e.g. the fast profile's small model
    print("not the recorded SFT + GRPO policy:", unavailable_reason(TRAINED_POLICY))
forced = [leaf["index"] for leaf in playground.tree.data["leaves"] if leaf["source"] == "teacher-forced"]
print(f"this run: policy {playground.current()['policy']};",
      f"no sampled branch searched, so τ{forced[0]} is teacher-forced" if forced else "every branch is sampled")
playground

# %% [markdown]
# ## Search text is untrusted
#
# Observations come from the web (or a snapshot of it) and model turns are free text: either can
# contain HTML. Every widget in this course shows such text as text. Here is a group whose evidence
# contains an HTML image tag with a script handler; open τ0 — you should *see* the tag, and nothing
# should run.

# %%
untrusted = {
    "question": RUNNING_EXAMPLE.question,
    "answers": RUNNING_EXAMPLE.answers,
    "leaves": [{
        "index": 0, "reward": 1.0, "advantage": 0.5, "exact_match": True, "valid_format": True,
        "turns": [
            {"kind": "tool", "text": "<tool_call>…</tool_call>", "query": HOPS[1].query, "tokens": 20,
             "observation": f"[1] Title: {HOPS[1].title}\n    Content: … served as {ANSWER} <img src=x onerror=alert(1)>",
             "observation_tokens": 30, "cut": False},
            {"kind": "answer", "text": f"Answer: {ANSWER}", "tokens": 4},
        ],
    }, {
        "index": 1, "reward": 0.0, "advantage": -0.5, "exact_match": False, "valid_format": True,
        "turns": [{"kind": "answer", "text": "Answer: Ambassador to Ghana", "tokens": 4}],
    }],
}
TrajectoryTree(untrusted, selected=0)

# %% [markdown]
# ## Exercises
#
# 1. The default training step of Happy-LLM §8.3.3 uses 8 questions, a group of 8 and at most 4 searches per
#    trajectory. How many trajectories per step, and at most how many search calls?

# %%
from helpers.checkers.exercises import check_rollout_counts

my_trajectories, my_searches = None, None
check_rollout_counts(8, 8, 4, my_trajectories, my_searches)

# %% [markdown]
# 2. In the rollout above, how many sampling requests did the *first* turn need, and why is that not
#    `questions × group_size`?
# 3. Find a branch that ended by a budget rather than by an answer (`end_reason` in the details).
#    Which reward did it get, and why?
# 4. **Write `consume_assistant` yourself** — the decision at the heart of the state machine (step 3
#    of "One question by hand"). The checker hands your function real sampled-looking sequences on
#    this profile's chat template — a search call, a call the sampler cut before its stop token, an
#    answer, an invalid turn, a call beyond the search budget, a call on the last allowed turn, and
#    a sequence with a logprob missing — and compares the trajectory and the returned search request
#    with what the rules say.

# %% tags=["exercise"]
from helpers.checkers import check_consume_assistant
from helpers.protocol import parse_assistant
from helpers.rollout import AssistantTurn, PendingSearch, read_sequence


def consume_assistant(trajectory, prompt_tokens, sequence, tokenizer, config):
    """Record one sampled turn; return the search it asks for (a PendingSearch), or None when the
    trajectory ends.

    1. tokens, logprobs, text = read_sequence(sequence, tokenizer)  (raises on missing logprobs)
    2. parsed = parse_assistant(text); append AssistantTurn(list(prompt_tokens), tokens, logprobs,
       text, kind=parsed.kind, query=parsed.query, stop_reason=sequence.stop_reason,
       error=parsed.error) to trajectory.turns.
    3. Keep a copy of the messages so far, then append {"role": "assistant", "content": text}.
    4. Ending: set trajectory.final_text = text, trajectory.done = True and trajectory.end_reason:
       - parsed.kind is not "tool": end_reason = parsed.kind ("answer" or "invalid");
       - trajectory.search_calls >= config.max_search_calls: "search_budget";
       - len(trajectory.turns) >= config.max_assistant_turns: "turn_budget".
    5. Otherwise return PendingSearch(trajectory, the messages copy, text, list(prompt_tokens),
       tokens, call_id (any unique string, e.g. f"search-{trajectory.search_calls + 1}"), query).
       Do not count the search here: finish_search does, once its observation is in.
    """
    raise NotImplementedError("write consume_assistant")  # your code here


check_consume_assistant(consume_assistant)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots).
#
# <details><summary><b>Answers to 2 and 3</b></summary>
#
# 2. One request per question: the first turn of every branch has the same prompt, so it is a single
#    request with `num_samples = group_size` (the shared root). `questions × group_size` requests
#    would each re-read the same prompt.
# 3. Look for `search_budget`, `turn_budget`, `observation_budget` or `context_budget`. Such a branch
#    gets −0.1: only a trajectory that ended on an `answer` turn is scored on its answer, any other
#    ending is a broken format (it never wrote its final `Answer:` line).
#
# </details>
#
# Exercise 4 is the course's `consume_assistant` (`helpers/rollout/turns.py`) run through the same checker.

# %% tags=["solution"] jupyter={"source_hidden": true}
from helpers.rollout import consume_assistant

check_rollout_counts(8, 8, 4, 8 * 8, 8 * 8 * 4)
check_rollout_counts(len(examples), config.group_size, config.max_search_calls, len(trajectories),
                     len(examples) * config.group_size * config.max_search_calls)
check_consume_assistant(consume_assistant)

# %% [markdown]
# ## Questionnaire
#
# 1. Why can the second query of a trajectory not be planned before the rollout starts?
# 2. What does `consume_assistant` return, and in which cases does the trajectory end there?
# 3. Why is the search counted in `finish_search` and not when the call is parsed?
# 4. What makes the first turn of a group one sampling request, and later turns one request per branch?
# 5. Which budgets bound a trajectory, and why must evaluation use the same ones as training?
# 6. Search results are untrusted text. What does that mean for every widget that shows them?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. It usually depends on the first observation (the author's name found by the first search), which
#    exists only once that search has run: the trainer keeps each trajectory's state and parses each
#    turn as it arrives.
# 2. A `PendingSearch` (the query, the call id and everything needed to append the observation) or
#    `None`. It ends the trajectory on an `answer` or `invalid` turn, and on a call when the search
#    budget or the turn budget is spent.
# 3. A call whose observation does not fit the budget ends the trajectory on that call; counting only
#    searches whose result reached the model keeps `search_calls` equal to the observations the policy
#    actually read.
# 4. Before the first turn all G branches share the same prompt (one request, `num_samples=G`); after
#    it each branch has seen its own observations, so each live branch needs its own request.
# 5. `max_search_calls`, `max_assistant_turns`, `max_assistant_tokens`, `max_tool_response_tokens`
#    and `max_trajectory_tokens`. They bound the cost of a step and decide how much of the environment
#    the agent can reach: a larger budget at evaluation alone can change accuracy.
# 6. Any of it may contain HTML or script; widgets show it as text (escaped or set as `textContent`)
#    and never render it.
#
# </details>
