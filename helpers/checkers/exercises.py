"""Self-checking exercises for the notebooks (the checkers of a whole function are the sibling modules).

Every `check_*` prints "correct" or "not yet: <hint>" and returns True/False; it never raises
on a wrong answer, so a learner can try again. The expected answers are stated here from the
rules of Happy-LLM §8.3 and Perplexity's post, independently of the code under `helpers`, so a
solution cell that computes its answer with `helpers` also checks that code against the rules.
"""

from __future__ import annotations

import math
import urllib.parse
from typing import Any, Iterable, Sequence

from helpers.advantages import group_advantages, no_signal
from helpers.protocol import call_text

CORRECT = "correct"


class Verdict:
    """True/False for code and tests; shows nothing as a cell's last value (the line is printed)."""

    def __init__(self, ok: bool) -> None:
        self.ok = bool(ok)

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return f"Verdict({self.ok})"

    def _ipython_display_(self) -> None:
        pass


def report(ok: bool, hint: str) -> Verdict:
    print(CORRECT if ok else f"not yet: {hint}")
    return Verdict(ok)


def _blank(value: Any) -> bool:
    return value is None or value is Ellipsis


def _close(a: float, b: float, tol: float = 1e-6) -> bool:
    return math.isclose(float(a), float(b), rel_tol=0, abs_tol=tol)


# --------------------------------------------------------------------------- 00 set-up


def check_token_count(tokenizer: Any, text: str, guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "call tokenizer.encode(text, add_special_tokens=False) and count the ids")
    true = len(tokenizer.encode(text, add_special_tokens=False))
    return report(int(guess) == true, f"you said {guess}; encode the text without special tokens and take len()")


# --------------------------------------------------------------------------- 01 data


def keeps_row(row: dict[str, Any]) -> bool:
    """The data boundary: a row survives only with a question and at least one non-empty answer."""
    question = str(row.get("question") or "").strip()
    answers = row.get("answers") or []
    if isinstance(answers, str):
        answers = [answers]
    return bool(question) and any(str(answer or "").strip() for answer in answers)


RAW_ROWS = [
    {"id": "a", "question": "who wrote the little prince", "answers": ["Antoine de Saint-Exupéry"]},
    {"id": "b", "question": "   ", "answers": ["Paris"]},
    {"id": "c", "question": "capital of france", "answers": []},
    {"id": "d", "question": "first man on the moon", "answers": ["", "Neil Armstrong"]},
    {"id": "e", "question": "largest planet", "answers": [" ", None]},
    {"id": "f", "question": "what band was john lennon in", "answers": "The Beatles"},
]


def check_kept_rows(guess: Any) -> Verdict:
    """`guess`: the ids of RAW_ROWS that survive normalisation."""
    if _blank(guess):
        return report(False, "list the ids of the rows that keep a non-empty question and at least one non-empty answer")
    expected = {row["id"] for row in RAW_ROWS if keeps_row(row)}
    got = set(guess)
    if got == expected:
        return report(True, "")
    missing, extra = expected - got, got - expected
    return report(False, f"missing {sorted(missing)}; should be dropped {sorted(extra)} (blank strings and None are not answers)")


def check_source_counts(examples: Iterable[Any], guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "count examples per example.data_source (collections.Counter helps)")
    counts: dict[str, int] = {}
    for example in examples:
        counts[example.data_source] = counts.get(example.data_source, 0) + 1
    return report(dict(guess) == counts, f"you said {dict(guess)}; count every example's data_source")


# --------------------------------------------------------------------------- 02 protocol


# Ten assistant turns and the action each must parse to, by the rules of Happy-LLM §8.3.4: exactly one
# complete search call and nothing after it is a tool action; no call at all is an answer
# (the reward decides later whether it is well-formed); anything else is invalid.
PARSER_CASES: list[tuple[str, str]] = [
    ("I need the author first." + call_text("The Little Prince author"), "tool"),
    ("Answer: France", "answer"),
    (call_text("Little Prince author") + call_text("Saint-Exupery birthplace"), "invalid"),
    (call_text("Saint-Exupery birthplace") + "\nAnswer: France", "invalid"),
    ('<tool_call>\n{"name": "search", "arguments": {"query": "Lyon', "invalid"),
    ("Answer: The Beatles", "answer"),
    (call_text("   "), "invalid"),
    (call_text("<b>Lyon</b> France"), "invalid"),
    ("I believe it is France, but I am not sure.", "answer"),
    ("  " + call_text("tallest mountain in Africa") + "  \n", "tool"),
]


def check_parser_labels(guess: Any) -> Verdict:
    """`guess`: ten labels ('tool', 'answer' or 'invalid'), one per PARSER_CASES string."""
    if _blank(guess):
        return report(False, "write one label per string: 'tool', 'answer' or 'invalid'")
    guess = [str(label).strip().lower() for label in guess]
    if len(guess) != len(PARSER_CASES):
        return report(False, f"there are {len(PARSER_CASES)} strings, you gave {len(guess)} labels")
    wrong = [i for i, (label, (_, kind)) in enumerate(zip(guess, PARSER_CASES)) if label != kind]
    return report(not wrong, f"look again at strings {wrong}: one complete call and nothing after it is 'tool'; "
                  "no call at all is 'answer'; two calls, text after a call, a broken call or a bad query is 'invalid'")


# --------------------------------------------------------------------------- 03 reward

# (final text, references, reward) by the three-level rule: 1 valid and exact, 0 valid but
# wrong, -0.1 when there is not exactly one `Answer:` line.
REWARD_CASES: list[tuple[str, list[str], float]] = [
    ("Answer: The Beatles", ["beatles"], 1.0),
    ("Answer: The Eiffel Tower.", ["eiffel tower"], 1.0),
    ("answer:   paris ", ["Paris"], 1.0),
    ("Answer: London", ["Paris"], 0.0),
    ("It is Paris.", ["Paris"], -0.1),
    ("Answer: Paris\nAnswer: Lyon", ["Paris"], -0.1),
    ("Let me think.\nAnswer: Neil Armstrong", ["Neil Armstrong", "Armstrong"], 1.0),
    ("Answer:", ["Paris"], -0.1),
]


def check_reward_guesses(guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "give one reward per REWARD_CASES row: 1, 0 or -0.1")
    guess = list(guess)
    if len(guess) != len(REWARD_CASES):
        return report(False, f"there are {len(REWARD_CASES)} cases, you gave {len(guess)} rewards")
    wrong = [i for i, (value, (_, _, reward)) in enumerate(zip(guess, REWARD_CASES)) if not _close(value, reward)]
    return report(not wrong, f"look again at cases {wrong}: case, punctuation and a/an/the do not matter; "
                  "exactly one non-empty Answer: line is needed for a valid format")


# --------------------------------------------------------------------------- 04 search

WIKIPEDIA_ENDPOINT = "https://en.wikipedia.org/w/api.php"
# The MediaWiki Action API parameters of Happy-LLM §8.3.2's Wikipedia backend.
WIKIPEDIA_PARAMS = {
    "action": "query", "format": "json", "formatversion": "2", "generator": "search",
    "gsrlimit": "3", "prop": "extracts|info", "explaintext": "1", "exintro": "1",
    "exchars": "1200", "inprop": "url", "redirects": "1", "utf8": "1",
}
WIKIPEDIA_QUERY = "Antoine de Saint-Exupéry birthplace"


def check_wikipedia_url(url: Any, query: str = WIKIPEDIA_QUERY) -> Verdict:
    if _blank(url):
        return report(False, "build the URL: endpoint + '?' + urllib.parse.urlencode(params with gsrsearch=query)")
    parts = urllib.parse.urlsplit(str(url))
    endpoint = f"{parts.scheme}://{parts.netloc}{parts.path}"
    if endpoint != WIKIPEDIA_ENDPOINT:
        return report(False, f"the endpoint is {WIKIPEDIA_ENDPOINT}, you have {endpoint}")
    got = {key: values[-1] for key, values in urllib.parse.parse_qs(parts.query, keep_blank_values=True).items()}
    expected = dict(WIKIPEDIA_PARAMS, gsrsearch=query)
    missing = sorted(set(expected) - set(got))
    wrong = sorted(key for key in expected if key in got and got[key] != expected[key])
    extra = sorted(set(got) - set(expected))
    return report(not (missing or wrong or extra),
                  f"missing {missing}, different {wrong}, unexpected {extra} (gsrsearch carries the query)")


def check_observation_size(text: str, tokenizer: Any, chars: Any, tokens: Any) -> Verdict:
    if _blank(chars) or _blank(tokens):
        return report(False, "len(observation) for characters; len(tokenizer.encode(observation, add_special_tokens=False)) for tokens")
    ok = int(chars) == len(text) and int(tokens) == len(tokenizer.encode(text, add_special_tokens=False))
    return report(ok, "count characters of the formatted observation, and tokens without special tokens")


# --------------------------------------------------------------------------- 05 rollout


def check_rollout_counts(questions: int, group_size: int, max_search_calls: int, trajectories: Any, searches: Any) -> Verdict:
    if _blank(trajectories) or _blank(searches):
        return report(False, "each question is a group of group_size trajectories; each can search up to max_search_calls times")
    ok = int(trajectories) == questions * group_size and int(searches) == questions * group_size * max_search_calls
    return report(ok, f"trajectories = questions × group_size; searches at most = trajectories × max_search_calls")


# --------------------------------------------------------------------------- 06 continuity


def suffix_prefix_overlap(completion: Sequence[Any], closing: Sequence[Any]) -> int:
    """Longest k such that the last k completion tokens equal the first k closing tokens."""
    for k in range(min(len(completion), len(closing)), 0, -1):
        if list(completion[-k:]) == list(closing[:k]):
            return k
    return 0


def check_overlap(completion: Sequence[Any], closing: Sequence[Any], guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "find the longest tail of the completion that is also the start of the closing tokens")
    expected = suffix_prefix_overlap(completion, closing)
    return report(int(guess) == expected, f"you said {guess}; compare the completion's last tokens with the closing tokens' first ones")


def check_glued(completion: Sequence[Any], closing: Sequence[Any], guess: Any) -> Verdict:
    """`guess`: the closing tokens actually appended after the sampled completion."""
    if _blank(guess):
        return report(False, "append only the closing tokens the sampler did not already return")
    expected = list(closing[suffix_prefix_overlap(completion, closing):])
    return report(list(guess) == expected, f"skip the first overlap tokens of the closing sequence")


# --------------------------------------------------------------------------- 07 mask


def datum_positions(prompt: int, segments: Sequence[tuple[str, int]]) -> tuple[int, int]:
    """(positions, positions with advantage) of a Datum: the sequence shifted by one."""
    total = prompt + sum(length for _, length in segments)
    trained = sum(length for role, length in segments if role == "assistant")
    return total - 1, trained


def check_mask_on_paper(positions: Any, with_advantage: Any) -> Verdict:
    """prompt 50 → turn 1 (20) → observation (300) → turn 2 (8)."""
    if _blank(positions) or _blank(with_advantage):
        return report(False, "add every token, remove one for the shift; only assistant tokens carry the advantage")
    expected = datum_positions(50, [("assistant", 20), ("observation", 300), ("assistant", 8)])
    if int(positions) != expected[0]:
        hint = "the Datum is the full sequence shifted by one: input = full[:-1]" if int(positions) == expected[0] + 1 else "add prompt, both turns and the observation"
        return report(False, hint)
    return report(int(with_advantage) == expected[1], "only the tokens the policy sampled (both assistant turns) carry A")


# --------------------------------------------------------------------------- 08 advantages


def check_group_advantages(rewards: Sequence[float], guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "A_i = r_i − mean(r of the group)")
    mean = sum(rewards) / len(rewards)
    expected = group_advantages(rewards)
    ok = len(list(guess)) == len(expected) and all(_close(g, e) for g, e in zip(guess, expected))
    return report(ok, f"the group mean is {mean:g}; subtract it from each reward")


def check_degenerate(groups: Sequence[Sequence[float]], guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "a group is degenerate when every reward is the same (all advantages 0)")
    expected = sum(1 for rewards in groups if no_signal(rewards))
    return report(int(guess) == expected, "count groups whose rewards are all equal, whatever the value")


def check_micro_batch_weights(sizes: Sequence[int], guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "micro-batch k gets weight n_k / N, N = all trajectories of the step")
    total = sum(sizes)
    expected = [n / total for n in sizes]
    ok = len(list(guess)) == len(expected) and all(_close(g, e) for g, e in zip(guess, expected))
    return report(ok, f"N = {total}; weights must sum to 1 and be proportional to the micro-batch sizes")


# --------------------------------------------------------------------------- 09 training

STEP_ORDER = ["save_weights_and_get_sampling_client", "rollout_groups", "build_training_datums",
              "pack_micro_batches", "forward_backward", "optim_step"]


def check_step_order(guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, f"put these in order: {sorted(STEP_ORDER)}")
    guess = [str(name).strip() for name in guess]
    if sorted(guess) != sorted(STEP_ORDER):
        return report(False, f"use exactly these names once each: {sorted(STEP_ORDER)}")
    first_wrong = next(i for i, (g, e) in enumerate(zip(guess + [None], STEP_ORDER + [None])) if g != e) if guess != STEP_ORDER else None
    return report(guess == STEP_ORDER, f"position {first_wrong} is off: old logprobs come from the current policy, "
                  "advantages need whole groups, and there is one optimiser step after all micro-batches")


# --------------------------------------------------------------------------- 10 evaluation

EVAL_STATEMENTS = {
    "a": "the same questions for base model and checkpoint",
    "b": "the same search backend and index",
    "c": "the same search budget (max_search_calls, token limits)",
    "d": "the same sampling parameters (temperature, top_p, seed)",
    "e": "a bigger group_size for the checkpoint, to give it more chances",
    "f": "a larger max_search_calls for the checkpoint, since it learned to search",
}
EVAL_MUST_MATCH = {"a", "b", "c", "d"}


def check_eval_fixed(guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "pick the letters of EVAL_STATEMENTS that must be equal in both evaluations")
    got = {str(letter).strip().lower() for letter in guess}
    return report(got == EVAL_MUST_MATCH, "a fair comparison changes only the weights; a larger budget alone can raise accuracy, "
                  "and evaluation uses one trajectory per question")


def check_em_from_rows(rows: Sequence[dict[str, Any]], guess: Any) -> Verdict:
    if _blank(guess):
        return report(False, "exact match = share of rows whose exact_match is true")
    expected = sum(bool(row.get("exact_match")) for row in rows) / len(rows) if rows else 0.0
    return report(_close(guess, expected, 1e-3), f"count rows with exact_match true and divide by {len(rows)}")


def check_searched_again_when_missed(rows: Sequence[dict[str, Any]], guess: Any) -> Verdict:
    """Rows carry `first_search_hit` (helpers.analyse.first_search_hits)."""
    if _blank(guess):
        return report(False, "keep the rows whose first_search_hit is False, then the share with search_calls >= 2")
    from helpers.analyse import second_search_table

    missed = second_search_table(rows)["first search missed"]
    return report(_close(guess, missed["searched_again"], 1e-3),
                  f"{missed['n']} rows have first_search_hit False; what share of them has search_calls >= 2?")


def check_second_search_cost(rows: Sequence[dict[str, Any]], guess: Any) -> Verdict:
    """Strict EM after a first-search hit: stopped at one search minus searched again (rows with `first_search_hit`)."""
    if _blank(guess):
        return report(False, "among rows with first_search_hit True: EM of search_calls < 2 minus EM of search_calls >= 2")
    from helpers.analyse import second_search_table

    found = second_search_table(rows)["first search found it"]
    if found["em_strict_if_once"] is None or found["em_strict_if_again"] is None:
        return report(False, "this run has no second search after a hit (or none without one): pick another run")
    expected = found["em_strict_if_once"] - found["em_strict_if_again"]
    return report(_close(guess, expected, 1e-3),
                  "a positive number means searching again after a hit lost answers the first evidence held")

