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
# Predict the reward of each case in `REWARD_CASES` by hand (1, 0 or −0.1).

# %%
from helpers.widgets.exercises import REWARD_CASES, check_reward_guesses

for number, (text, references, _) in enumerate(REWARD_CASES):
    print(f"[{number}] {text!r:45} references={references}")
my_rewards = None  # eight numbers
check_reward_guesses(my_rewards)

# %% [markdown]
# ### Solution

# %% tags=["solution"]
check_reward_guesses([score_answer(text, references).reward for text, references, _ in REWARD_CASES])
