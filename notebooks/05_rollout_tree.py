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

# %%
from helpers.data import load_examples
from helpers.rollout import RolloutConfig, groups_of, rollout_batch
from helpers.widgets import TrajectoryTree, budgets, tree_data
from helpers.widgets.course import engine, remember, rollout_config, search_client

values = budgets()
current = engine()
sampler, tokenizer = current.sampler, current.tokenizer
search = search_client("local")
examples = load_examples("train", limit=values["questions"])
config = rollout_config(values, seed=0)
config

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

# %% [markdown]
# ## The tree
#
# The root is the question. Each row is one branch (τ0, τ1, …): its turns in order — a search with
# its query and the size of the observation the model got back (✂ when the evidence was cut to the
# budget), ✎ a final answer, ⚠ an invalid turn — then its reward and advantage. **Click a row** to
# open its turns: the full assistant text and the full observation.

# %%
group = groups_of(trajectories)[0]
tree = TrajectoryTree(tree_data(group, tokenizer))
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
# Move a slider: the rollout for the first question runs again and the tree is redrawn.
# Try `max_search_calls = 0` (a search turn then ends the trajectory), a tiny
# `max_tool_response_tokens` (watch for ✂ and for trajectories that end on their call) or a larger
# `group_size`.

# %%
from helpers.widgets import RolloutPlayground


def rerun(slider_values):
    batch = rollout_batch(sampler, tokenizer, search, examples[:1], rollout_config(slider_values, seed=1), progress=False)
    return tree_data(batch, tokenizer)


playground = RolloutPlayground(rerun, values=values)
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
    "question": "Where was the author of The Little Prince born?",
    "answers": ["Lyon"],
    "leaves": [{
        "index": 0, "reward": 1.0, "advantage": 0.5, "exact_match": True, "valid_format": True,
        "turns": [
            {"kind": "tool", "text": "<tool_call>…</tool_call>", "query": "Saint-Exupery birthplace", "tokens": 20,
             "observation": "[1] Title: Antoine de Saint-Exupéry\n    Content: born in Lyon <img src=x onerror=alert(1)>",
             "observation_tokens": 30, "cut": False},
            {"kind": "answer", "text": "Answer: Lyon", "tokens": 4},
        ],
    }, {
        "index": 1, "reward": 0.0, "advantage": -0.5, "exact_match": False, "valid_format": True,
        "turns": [{"kind": "answer", "text": "Answer: Paris", "tokens": 4}],
    }],
}
TrajectoryTree(untrusted, selected=0)

# %% [markdown]
# ## Exercises
#
# 1. The seed's default training step uses 8 questions, a group of 8 and at most 4 searches per
#    trajectory. How many trajectories per step, and at most how many search calls?

# %%
from helpers.widgets.exercises import check_rollout_counts

my_trajectories, my_searches = None, None
check_rollout_counts(8, 8, 4, my_trajectories, my_searches)

# %% [markdown]
# 2. In the rollout above, how many sampling requests did the *first* turn need, and why is that not
#    `questions × group_size`?
# 3. Find a branch that ended by a budget rather than by an answer (`end_reason` in the details).
#    Which reward did it get, and why?
#
# ### Solution

# %% tags=["solution"]
check_rollout_counts(8, 8, 4, 8 * 8, 8 * 8 * 4)
check_rollout_counts(len(examples), config.group_size, config.max_search_calls, len(trajectories),
                     len(examples) * config.group_size * config.max_search_calls)
