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
# # 10 · Evaluation and analysis
#
# **What you will build.** A fair comparison of the base model and your checkpoint in the *same*
# environment, two baselines that skip the agent loop, a look at the recorded GPU run, and finally
# the trained agent answering a question **you** type, shown as a tree.
#
# **What you need.** The checkpoint of notebook 09 (or the recorded run in `results/`), and the
# rollout of notebook 05 — evaluation is the same `rollout_batch`, with one trajectory per question
# (`group_size=1`): there is no group to compare against, only the answer to score.
#
# A fair comparison changes **only the weights**: same questions, same search backend and index,
# same budgets, same sampling parameters, same answer checker. A larger search budget alone can
# raise accuracy, so it must not differ between the two runs.

# %%
from helpers import config
from IPython.display import display

from helpers.analyse import compare, comparison_table, summarise, summary_table
from helpers.eval import EvalConfig, evaluate
from helpers.widgets import budgets
from helpers.widgets.course import recall, rollout_config

values = budgets()
trained = recall("training_09")
checkpoint = (trained or {}).get("summary", {}).get("sampler_path")
print("checkpoint from notebook 09:", checkpoint or "none — run notebook 09 first; the base model stands in for it")
# the profile's budgets, greedy: one deterministic answer per question, the same for every model
common = dict(split="test", limit=values["eval_questions"], rollout=rollout_config(values, temperature=0.0, group_size=1))
common

# %% [markdown]
# ## Base model vs checkpoint, same environment
#
# Each table shows first the columns a comparison reads (exact match, and which questions only one
# run gets right); open **all columns** under it for the rest (searches, failed and cut
# observations, token counts).

# %%
base_rows = evaluate(EvalConfig(label="base", **common))
checkpoint_rows = evaluate(EvalConfig(label="checkpoint", model_path=checkpoint, **common))
comparison_table(compare(base_rows, checkpoint_rows, labels=("base", "checkpoint")), ("base", "checkpoint"))

# %% [markdown]
# ## Baselines
#
# Two reference points from the base model with no agent loop: **closed book** (answer from memory)
# and **RAG** (the question is searched once, the evidence pasted into the prompt, one answer). Two
# exact-match numbers are reported: *strict* (the reward's rule: one well-formed `Answer:` line) and
# *lenient* (a reference appears anywhere in the final text), so a baseline is not scored zero only
# for ignoring the format.

# %%
closed_rows = evaluate(EvalConfig(mode="closed_book", label="closed book", **common))
rag_rows = evaluate(EvalConfig(mode="rag", label="rag", **common))
summary_table({"closed book": summarise(closed_rows), "rag": summarise(rag_rows),
               "agent (base)": summarise(base_rows), "agent (checkpoint)": summarise(checkpoint_rows)})

# %% [markdown]
# With a handful of questions these numbers are noise; they show the *method*. Record at least: exact
# match, format rate, mean search calls and the share of answers without any search, failed and cut
# observations, trajectory length, degenerate groups during training, and the time of each stage.
#
# ## The recorded GPU run
#
# A longer run of the same code on a GPU (Qwen2.5-0.5B, larger budgets) is kept in `results/` when
# available: its training metrics per step and its evaluation rows.

# %%
import json
from pathlib import Path

from helpers.analyse import read_jsonl
from helpers.widgets import TrainingDashboard

results = config.RESULTS_DIR
metric_files = sorted(results.glob("**/metrics.jsonl")) if results.exists() else []
main_run = results / "h200_balanced" / "grpo" / "metrics.jsonl"  # the run the README reports
grpo_metrics = [main_run] if main_run.exists() else [p for p in metric_files if "sft" not in p.parts[-2]]
eval_files = [p for p in sorted(results.glob("**/*.jsonl")) if p not in metric_files] if results.exists() else []
replay = TrainingDashboard("recorded run")
if grpo_metrics:
    source = grpo_metrics[-1]
    print("recorded training run:", source.relative_to(config.PROJECT_ROOT))
    for row in read_jsonl(source):
        replay.on_step(row)
else:
    print("No recorded GPU run in results/ yet: `bash results/run.sh` on a GPU machine makes one.")
    print("Showing this machine's CPU run from notebook 09 instead.")
    for row in (trained or {}).get("history", []):
        replay.on_step(row)
replay

# %%
recorded = {}
for path in eval_files:
    rows = read_jsonl(path)
    if rows and isinstance(rows[0], dict) and "exact_match" in rows[0]:
        recorded[str(path.relative_to(results))] = summarise(rows)
display(summary_table(recorded)) if recorded else print("No recorded evaluation rows in results/ yet.")

# %% [markdown]
# ## A second search where one is not enough?
#
# "Search again when the evidence lacks the answer" is the behaviour GRPO is supposed to add. To
# check it, re-run each agent's *first* query on the local index (it is deterministic) and ask
# whether those results held a gold answer. A good agent searches again mostly on the red bars.
# In the recorded runs, notice how often the first search already suffices, and compare the SFT
# teachers: `h200` (second query = question + top title), `h200_hints` (gold titles the policy
# never reads), `h200_reach` and `h200_balanced` (names the policy has read, two-search
# demonstrations trained once or four times), and each SFT policy with its SFT + GRPO policy.

# %%
import matplotlib.pyplot as plt

from helpers.analyse import first_search_hits, second_search_figure, second_search_table
from helpers.widgets.course import search_client

agent_runs = {}
for path in eval_files:
    rows = read_jsonl(path)
    searched = sum(bool(r.get("queries")) for r in rows) if rows and isinstance(rows[0], dict) else 0
    if searched and rows[0].get("mode") == "agent" and searched >= len(rows) / 2:
        agent_runs[str(path.relative_to(results).with_suffix(""))] = rows
if not agent_runs:  # no recorded run: this notebook's own evaluations
    agent_runs = {"base (here)": base_rows, "checkpoint (here)": checkpoint_rows}
hits = {label: first_search_hits(rows, search_client("local")) for label, rows in agent_runs.items() if rows}
search_tables = {label: second_search_table(rows) for label, rows in hits.items()}
if search_tables:
    second_search_figure(search_tables)
    plt.show()
else:
    print("No agent evaluation with searches to analyse yet.")

# %% [markdown]
# Now only the HotpotQA questions, the two-hop ones. The grey bars are yes/no comparison questions
# ("Are A and B both actors?"): "yes" or "no" never appears in the evidence, so whether one search
# was enough cannot be read off the text, but one search rarely shows both A and B. The `h200_reach`
# policy trained on its two-search demonstrations four times searches the second entity on every one
# of them, and searches again more often after a miss than after a hit. Every policy after GRPO
# stops at one search. The next plot shows why.

# %%
hotpot = {label: [r for r in rows if r.get("data_source") == "hotpotqa"] for label, rows in hits.items()}
hotpot_tables = {label: second_search_table(rows) for label, rows in hotpot.items()
                 if any(int(r.get("search_calls", 0)) >= 2 for r in rows)}
if hotpot_tables:
    second_search_figure(hotpot_tables, title="HotpotQA only (runs that ever searched twice)")
    plt.show()
else:
    print("No HotpotQA run searched twice yet.")

# %% [markdown]
# ## What a second search paid
#
# The reward only pays for the right answer, so GRPO keeps a second search only where it makes the
# right answer more likely. Compare, for one SFT policy, the strict EM of the questions where it
# stopped at one search with those where it searched again, split the same way. If searching again
# after a hit loses answers that the first evidence held, the group advantage of those trajectories is
# negative, and GRPO pushes the policy towards one search.

# %%
from helpers.analyse import COLUMN_INCHES, second_search_payoff_figure

sft_runs = [label for label in hits if label.endswith("/sft") and
            second_search_table(hits[label])["first search found it"]["em_strict_if_again"] is not None]
payoff_run = sft_runs[0] if sft_runs else next(iter(hits), None)
if payoff_run:
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_INCHES, 3.4))
    for ax, source in zip(axes, ("hotpotqa", "nq")):
        rows = [r for r in hits[payoff_run] if r.get("data_source") == source]
        second_search_payoff_figure(second_search_table(rows), f"{payoff_run}: {source}", ax=ax)
    plt.show()
    cost = second_search_table(hits[payoff_run])["first search found it"]
    if cost["em_strict_if_again"] is not None and cost["em_strict_if_once"] is not None:
        print(f"after a hit: EM {cost['em_strict_if_once']:.3f} when it stopped, "
              f"{cost['em_strict_if_again']:.3f} when it searched again")
else:
    print("No agent evaluation to analyse yet.")

# %% [markdown]
# In `results/h200_balanced` the SFT policy answered from the *latest* evidence: after a hit, its
# second query (often a name from the first results) displaced the evidence that held the answer.
# Its teacher had taught exactly that, because the teacher only searched again when the first
# evidence lacked the answer, so in every two-search demonstration the answer sits in the second one.
#
# What GRPO did to second searches: the share of *sampled* trajectories (temperature 1) with two or
# more searches, per step, in every recorded GRPO run. Each run started from an SFT policy; the
# group-relative advantage decides which way the share moves. An x marks a step whose gradient was
# not finite: in `h200_reach` that step turned every weight into NaN, which is why the engine now
# drops such a step.

# %%
from helpers.analyse import multi_search_curves

grpo_runs = {str(p.parent.relative_to(results)): read_jsonl(p) for p in metric_files
             if p.parent.name.startswith("grpo")}
if grpo_runs:
    multi_search_curves(grpo_runs)
    plt.show()
    mixed = {label: rows for label, rows in grpo_runs.items()
             if any(m.get("multi_search_share/hotpotqa") is not None for m in rows)}
    if mixed:  # runs whose batches mixed sources logged each source apart
        multi_search_curves(mixed, key="multi_search_share/hotpotqa").axes[0].set_title(
            "HotpotQA questions of mixed batches", fontsize=9)
        plt.show()
else:
    print("No recorded GRPO run in results/ yet.")

# %% [markdown]
# ## Was search learned?
#
# A higher exact match does not say *why*. An agent may answer better because it reads the same
# evidence better, or because it found better evidence. Separate the two by scoring the searches
# themselves, per data source, against the simplest search there is: **the question as the query**
# (BM25 top 3 of the raw question, what one RAG retrieval reads), on the same questions.
#
# - **evidence recall**: a gold answer appears in the union of the observations the agent read;
#   the black tick is the same test on the raw question's top 3;
# - **gold passages retrieved per question**: the data rows name the passages that support each
#   answer (one for NQ, two for HotpotQA); how many of them did the agent read?
# - **first query ≠ question**, and on those questions the first search's recall against the raw
#   question's: a rewrite that pays sits above its tick;
# - **second searches**, and the strict EM of the questions where the agent searched again against
#   those where it stopped.
#
# Search was learned where the bars clear their ticks. An agent that always searches the question
# verbatim, once, sits exactly on them: everything it gained is reading.

# %%
from IPython.display import Markdown

from helpers.analyse import format_search_learned, search_learned_figure, search_learned_table

# the recorded run's two policies (and runs of the search preset, once recorded), else every agent run here
learned_runs = {label: rows for label, rows in agent_runs.items()
                if label.startswith(("h200_balanced/", "h200_search")) and label.rsplit("/", 1)[-1] in ("sft", "sft_grpo")}
learned_runs = learned_runs or agent_runs
learned = {label: search_learned_table(rows, search_client("local")) for label, rows in learned_runs.items()}
display(Markdown(format_search_learned(learned)))
search_learned_figure(learned)
plt.show()

# %% [markdown]
# In `results/h200_balanced` the SFT policy (whose teacher searched the question first, every time)
# reads more than the question's top 3 on HotpotQA only because it searches a second time on most
# questions; after GRPO the policy searches the question once, and its evidence recall is that of
# the question itself (NQ 0.782 against 0.782). None of its first queries is a rewrite. Its gain in
# exact match is reading, not searching.
#
# Two things would move these bars. The teacher can demonstrate what a search agent does: search
# the entity that links the two hops even when the first evidence already holds the answer (and
# answer from wherever the answer is, not from the last observation), and search keywords instead
# of the question where they retrieve the supporting passage the question misses
# (`SFTConfig.decompose`, `SFTConfig.rewrite_first_query`). And the reward can pay for the evidence
# itself: `helpers.evidence` adds, to exact match, a small gain for every gold passage a search
# retrieves for the first time and a small charge for a search that shows nothing new (the
# per-search reward of StepSearch), only on trajectories that end with a valid answer.

# %% [markdown]
# ## The recorded runs in a tracker
#
# To compare runs side by side in TensorBoard, their committed JSONL becomes event files (nothing
# is re-run): one TensorBoard run per run folder, the `headline` section holding reward, exact
# match, format, searches, second-search share, degenerate share, KL and step time of every run on
# one chart each. In a terminal, one command writes them and opens TensorBoard:
# `python -m helpers.tracking tensorboard` (`pip install -e ".[tracking]"` first). Your own runs get the
# same with `--tracker tensorboard` or `--tracker swanlab` on `helpers.train`, `helpers.sft`,
# `helpers.eval`, `helpers.experiment` and `helpers.efficiency`; the JSONL is written either way.

# %%
from helpers.tracking import export_recorded, tracking_dir

try:
    boards = export_recorded(results, progress=False)
    print(f"{len(boards)} runs, e.g. {', '.join(list(boards)[:3])}")
    print(f"open them:  tensorboard --logdir {tracking_dir() / 'recorded'}")
except ImportError:
    print('TensorBoard is not installed here: pip install -e ".[tracking]"')

# %% [markdown]
# ## Ask the agent
#
# Type a question (or pick one: the course's running example first, whose reference answer is
# known, then recorded test questions where the budgets matter) and press Enter: the agent answers it on this machine, with the local search index, and you
# see its trajectory as a tree. The default agent is the trained policy — the SFT + GRPO adapter of the
# recorded GPU run when it was trained on this profile's model, else your checkpoint from notebook
# 09 — and the picker switches to the SFT policy, the base model or your own checkpoint. Evaluation
# samples one trajectory per question at temperature 0, so the group size starts at 1; raise it (and
# the temperature) to see other attempts. A typed question has no reference answer, so its reward
# only checks the format. The sliders are the evaluation's budgets; the table says what each change
# did.

# %%
from helpers.course.policies import TRAINED_POLICY, default_policy, policy_options, unavailable_reason
from helpers.running_example import RUNNING_EXAMPLE
from helpers.widgets import RolloutPlayground
from helpers.widgets.live import budget_questions, live_run_fn

ask_values = {**values, "group_size": 1, "temperature": 0.0}
ask = RolloutPlayground(live_run_fn(seed=0), values=ask_values, policies=policy_options(), policy=default_policy(),
                        questions=[RUNNING_EXAMPLE, *budget_questions()], run_label="ask the agent")
ask.tree.selected = 0
if unavailable_reason(TRAINED_POLICY):  # e.g. the fast profile's small model
    print("not the recorded SFT + GRPO policy:", unavailable_reason(TRAINED_POLICY))
ask

# %% [markdown]
# ## Exercises
#
# 1. Which of the statements in `EVAL_STATEMENTS` must hold for a fair base-vs-checkpoint comparison?
# 2. Compute the strict exact match of `checkpoint_rows` yourself from the rows.
# 3. Pick one run from `hits` (the rows with `first_search_hit`). Among its questions whose first
#    search missed, what share did the agent search again?
# 4. For `payoff_run`: among the questions whose first search found the answer, how many points of
#    strict EM (as a fraction) did searching again cost? (EM when it stopped minus EM when it searched again.)

# %%
from helpers.checkers.exercises import EVAL_STATEMENTS, check_em_from_rows, check_eval_fixed

for letter, statement in EVAL_STATEMENTS.items():
    print(letter, statement)
my_letters = None  # e.g. "ab"
my_em = None
check_eval_fixed(my_letters)
check_em_from_rows(checkpoint_rows, my_em)
from helpers.checkers.exercises import check_searched_again_when_missed

my_run = next(iter(hits), None)  # a label from hits
my_share = None
check_searched_again_when_missed(hits.get(my_run, []), my_share)
from helpers.checkers.exercises import check_second_search_cost

my_cost = None
check_second_search_cost(hits.get(payoff_run, []), my_cost)

# %% [markdown]
# ---
#
# ### Solution
#
# Try the exercises first; the solution cell is collapsed (click the dots).

# %% tags=["solution"] jupyter={"source_hidden": true}
check_eval_fixed("abcd")
check_em_from_rows(checkpoint_rows, summarise(checkpoint_rows)["all"]["em_strict"])
check_searched_again_when_missed(hits.get(my_run, []),
                                 second_search_table(hits.get(my_run, []))["first search missed"]["searched_again"])
found = second_search_table(hits.get(payoff_run, []))["first search found it"]
check_second_search_cost(hits.get(payoff_run, []), (found["em_strict_if_once"] or 0.0) - (found["em_strict_if_again"] or 0.0))

# %% [markdown]
# ## What we observed and why
#
# From the recorded GPU run (`results/h200_balanced`: SFT, then 38 GRPO steps on batches with as
# many HotpotQA as NQ questions; 600 test questions, greedy):
#
# - **GRPO helped**: strict exact match 0.307 → 0.382 (+7.5 points; NQ +7.6, HotpotQA +7.0).
# - **The gain sits where the first search already held the answer**: on those 446 questions EM went
#   0.379 → 0.480; where the first search missed, EM stayed at 0.043. The policy got better at
#   *reading* its evidence, not at finding more of it.
# - **GRPO removed the second search** (the SFT policy searched again on 63 % of HotpotQA and 23 % of
#   NQ questions; after GRPO on 0 of 600). Why: the SFT policy answers from the *latest* evidence
#   (every two-search demonstration of its teacher had the answer in the second result). After a
#   first search that found the answer, searching again dropped its EM from 0.453 to 0.135; after a
#   miss, the second query rescued almost nothing (0.034). The exact-match reward pays only for the
#   right answer, so the group advantages of two-search trajectories were negative from the first
#   steps, and GRPO did what the reward asked.
# - **The queries did not change**: SFT and SFT + GRPO wrote the same first query on 598 of 600
#   questions, nearly always the question itself.
#
# ## Questionnaire
#
# 1. What must be the same in two evaluations for their difference to measure the training?
# 2. Why does evaluation sample greedily with one trajectory per question?
# 3. What do the closed-book and RAG baselines tell you that the agent's score alone does not?
# 4. Why did GRPO remove the second search instead of making it useful?
# 5. The training reward rose on HotpotQA only, the test EM on both sources. How can that be?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. The questions, the search backend and index, every budget and the sampling parameters: only the
#    weights may differ.
# 2. The goal is the policy's best single answer, measured reproducibly; a group serves training,
#    where the comparison between attempts is the signal.
# 3. How much the model knows without searching, and how much one fixed retrieval gives: the agent's
#    gain over them is what its search decisions add.
# 4. For this policy with this index a second search made the right answer less likely (it answered
#    from the later, less relevant evidence), so its trajectories got negative advantages. The
#    outcome reward cannot tell a useful second search from a useless one unless useful ones win.
# 5. Training reward is measured at temperature 1 on the training batches, test EM greedily on other
#    questions; the NQ half of the batches was noisy and flat, while better reading of the first
#    evidence helped greedy answers on both sources.
#
# </details>
