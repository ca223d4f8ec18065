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
# # 03 · The reward: one number for the whole trajectory
#
# **What you will build.** The outcome reward: it reads only the final turn and gives
#
# | final turn | reward |
# | --- | --- |
# | exactly one `Answer: …` line and the answer matches a reference | **1** |
# | exactly one `Answer: …` line, wrong answer | **0** |
# | no `Answer:` line, several, or an empty one | **−0.1** |
#
# **What you need.** The answers of notebook 01 and the parser of notebook 02 (a trajectory ends on an
# `answer` or `invalid` turn; that turn's text is what gets scored).
#
# Nothing rewards *how* the model searched: no bonus for a nice query, no penalty per search. Good
# searching is rewarded only because it leads to right answers more often; GRPO (notebook 08) turns
# that into a learning signal for every token of the trajectory.

# %%
from helpers.reward import extract_answer, normalize_answer, score_answer
from helpers.running_example import RUNNING_EXAMPLE

final_turn = "Shirley Temple was Chief of Protocol of the United States.\nAnswer: The Chief of Protocol."
print(extract_answer(final_turn))
print(normalize_answer("The Chief of Protocol."), "==", normalize_answer(RUNNING_EXAMPLE.answers[0]))
score_answer(final_turn, RUNNING_EXAMPLE.answers)  # the running example's last turn

# %% [markdown]
# ## Exact match after normalisation
#
# Both the model's answer and every reference are lower-cased, stripped of punctuation and of the
# articles *a, an, the*, and whitespace is collapsed. Then the answer must equal one of the references
# exactly. It is a strict metric: "Paris, France" does not match "Paris". It is also cheap, exact and
# impossible to flatter, which matters when a policy is optimised against it.

# %%
import ipywidgets as widgets
from IPython.display import display

from helpers.widgets._html import esc

final = widgets.Textarea(value="I found it.\nAnswer: the Beatles!", layout=widgets.Layout(width="520px", height="70px"))
refs = widgets.Text(value="Beatles | The Beatles", description="references")
out = widgets.HTML()


def rescore(_=None):
    result = score_answer(final.value, [r.strip() for r in refs.value.split("|") if r.strip()])
    out.value = (f"reward <b>{result.reward:+.1f}</b> · valid format {result.valid_format} · exact match {result.exact_match}"
                 f" · extracted {esc(repr(result.answer))} → normalised {esc(repr(normalize_answer(result.answer or '')))}")


final.observe(rescore, names="value")
refs.observe(rescore, names="value")
rescore()
display(widgets.VBox([final, refs, out]))

# %% [markdown]
# ## Why −0.1 and not 0?
#
# A wrong answer in the right format is still useful behaviour: the model followed the protocol.
# A broken format is worse, so it scores below every well-formed answer. With rewards 1 / 0 / −0.1 a
# group of attempts that are all wrong but differ in format still produces a (small) signal towards
# the well-formed ones.
#
# ## Exercises
#
# ### 1. Predict the rewards
#
# Predict the reward of each case in `REWARD_CASES` by hand (1, 0 or −0.1).

# %%
from helpers.checkers.exercises import REWARD_CASES, check_reward_guesses

for number, (text, references, _) in enumerate(REWARD_CASES):
    print(f"[{number}] {text!r:45} references={references}")
my_rewards = None  # eight numbers
check_reward_guesses(my_rewards)

# %% [markdown]
# ### 2. Write the reward yourself
#
# Write `normalize_answer` and `score_answer` below (your `score_answer` should use your
# `normalize_answer`). Each checker runs the reward's unit-test examples and property tests on your
# function (hypothesis generates the inputs) and prints which hold and the first failing input.
# `unicodedata.category(ch).startswith("P")` tells whether a character is punctuation; a regular
# expression with `re.MULTILINE` finds the lines that start with `Answer:`.

# %% tags=["exercise"]
import re
import unicodedata

from helpers.checkers import check_normalize_answer, check_score_answer
from helpers.reward import RewardResult


def normalize_answer(text: str) -> str:
    """Lower-case; drop every Unicode punctuation character; drop the words a, an, the; collapse
    runs of whitespace to one space and strip the ends."""
    raise NotImplementedError("write normalize_answer")  # your code here


def score_answer(text: str, references: list[str]) -> RewardResult:
    """The reward of a final turn: RewardResult(reward, valid_format, exact_match, answer).

    - Any "<tool_call>" or "</tool_call>" in the text: reward -0.1, not a valid format.
    - Exactly one line of the form `Answer: <answer>` ("Answer:" at the start of the line, any
      case, spaces allowed around it, the answer non-empty and on that same line) is a valid
      format; none, several, or an empty one gives -0.1, valid_format False, answer None.
    - Valid: answer = the stripped text after "Answer:"; exact_match when the normalised answer is
      non-empty and equals a normalised reference; reward 1.0 if so, else 0.0.
    """
    raise NotImplementedError("write score_answer")  # your code here


check_normalize_answer(normalize_answer)
check_score_answer(score_answer)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots). The course's reward is
# in `helpers/reward.py`; the cell runs the same checkers on it.

# %% tags=["solution"] jupyter={"source_hidden": true}
from helpers.reward import normalize_answer, score_answer

check_reward_guesses([score_answer(text, references).reward for text, references, _ in REWARD_CASES])
check_normalize_answer(normalize_answer)
check_score_answer(score_answer)

# %% [markdown]
# ## Questionnaire
#
# 1. Which part of a trajectory does the outcome reward read?
# 2. Why is a broken format worth −0.1 and not 0?
# 3. "Paris, France" against the reference "Paris": what is the reward, and why is such a strict
#    metric still a good choice for RL?
# 4. Why must an answer that normalises to the empty string match nothing?
# 5. Nothing in the reward pays for searching. How can the policy still learn to search?
# 6. Why does a final turn that still holds `<tool_call>` markup score −0.1 even if it also has a
#    correct `Answer:` line?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. Only the final assistant turn: its one `Answer:` line against the references. The searches and
#    observations before it are not scored.
# 2. A wrong answer in the right format is still protocol-following behaviour; a broken format is
#    worse. Scoring it below every well-formed answer means a group that is all wrong but differs in
#    format still gives a (small) signal towards the well-formed turns.
# 3. 0: after normalisation "paris france" ≠ "paris". Exact match is cheap, deterministic and cannot be
#    flattered, which matters when a policy is optimised against it (a lenient judge can be gamed).
# 4. Otherwise "Answer: the" or "Answer: ..." would match any reference that also normalises to
#    nothing (an empty or article-only reference), a free reward for saying nothing.
# 5. Trajectories that searched reach right answers more often, so they get higher rewards than their
#    siblings; the group advantage of notebook 08 then reinforces every token of those trajectories,
#    the search calls included.
# 6. A turn that calls the tool is not a final answer: rewarding it would let the policy hedge (call
#    and answer at once), the same reason the parser calls it invalid.
#
# </details>
