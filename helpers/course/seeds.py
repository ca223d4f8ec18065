"""One recipe, several seeds: is a trained policy the recipe's, or one run's luck?

An RL run is one draw. The multi-search agent's recipe (`helpers.presets.AGAIN_STAGES`: exact match,
then `trim`) was run again from the same SFT adapter with seeds 1-3 and nothing else changed; each
stage's test evaluation is `results/h200_again/seeds/eval/seed<N>_<stage>.jsonl`. `SEARCH_AGAIN_RULE`
is the rule the recorded multi-search agent was chosen by, fixed before its runs were evaluated: a
second search where one search is rarely enough (HotpotQA's two-hop questions), hardly any where it is
(NQ's), and a second search that pays.

The rule reads "pays" as a higher EM where the policy searched again than where it stopped: that
compares different questions, since a policy searches again where its first search did not settle the
question, not on a random sample of them. `added_search_gain` asks it of the same questions: where
`trim` added a second search, was the policy after it right more often than the one before?

    from helpers.course.seeds import rule_failures, seed_gains, seed_spread_figure, seed_tables
    tables = seed_tables(search_client("local"))   # {seed: {"exact": table, "trim": table}}
    rule_failures(tables[1]["trim"])               # [] when the policy meets the rule
    seed_gains()[1]["hotpotqa"]                    # the questions `trim` added a second search on, right before/after
    trimmed_gains()["fullwiki"]["all"]["dropped"]  # the second searches `search_gain` dropped, from a policy that over-searched
"""

from __future__ import annotations

from typing import Any, Mapping

from helpers.analyse import (COLUMN_INCHES, OTHER_COLOURS, SECOND_SEARCH_COLUMNS, Table as Cells, format_search_learned,
                             search_learned_table)
from helpers.course.policies import AGAIN_RUN
from helpers.course.recorded import eval_rows

SEEDS_RUN = f"{AGAIN_RUN}/seeds"
SEEDS = (1, 2, 3)
# the recipe's two stages, in order: each seed's policy after exact match, then after `trim`
STAGES = ("exact", "trim")
STAGE_LABELS = {"exact": "exact match", "trim": "then trim"}
SEARCH_AGAIN_RULE = {"hotpotqa_min": 0.30, "nq_max": 0.15}
# a policy that searches again too readily (exact match at 2 passages a search), and `trim` with the
# counterfactual reward `search_gain` and no synthetic questions from it: a stage that drops second searches
TRIMMED_PAIR = ("h200_replicas/exact2_s2", "h200_replicas/gain5ns-k2_s1")
# the same stage trained on from the trimmed policy (26 more updates, 41 in all): past its first 15 the
# reward no longer trims
TRIMMED_ON = ("h200_replicas/gain5ns-k2_s1", "h200_replicas/gain5ns-k2_41")
TRIMMED_SPLITS = ("test", "validation", "fullwiki")

Table = Mapping[str, Mapping[str, Any]]


def rule_failures(table: Table, rule: Mapping[str, float] = SEARCH_AGAIN_RULE) -> list[str]:
    """What keeps a policy (its `search_learned_table`) from the search-again rule; [] when it meets it."""
    missing = [source for source in ("hotpotqa", "nq") if source not in table]
    if missing:  # an evaluation of one source only (a small or filtered split) cannot be read by the rule
        return [f"no {' or '.join(missing)} questions in the evaluation"]
    hotpot, nq = table["hotpotqa"], table["nq"]
    failures = []
    if hotpot["second_search_share"] < rule["hotpotqa_min"]:
        failures.append(f"HotpotQA: a second search on {hotpot['second_search_share']:.0%}, "
                        f"under {rule['hotpotqa_min']:.0%}")
    if nq["second_search_share"] > rule["nq_max"]:
        failures.append(f"NQ: a second search on {nq['second_search_share']:.0%}, over {rule['nq_max']:.0%}")
    again, stopped = hotpot["em_if_again"], hotpot["em_if_stopped"]
    if again is not None and stopped is not None and again < stopped:
        failures.append(f"HotpotQA: EM {again:.2f} where it searched again, below {stopped:.2f} where it stopped")
    return failures


def seed_tables(search, seeds=SEEDS, run: str = SEEDS_RUN) -> dict[int, dict[str, Table]]:
    """Per seed and stage, the `search_learned_table` of its recorded test evaluation."""
    return {seed: {stage: search_learned_table(eval_rows(f"seed{seed}_{stage}", run), search) for stage in STAGES}
            for seed in seeds}


def seed_spread_figure(tables: Mapping[int, Mapping[str, Table]], reference: Table | None = None,
                       reference_label: str = "recorded policy", rule: Mapping[str, float] = SEARCH_AGAIN_RULE):
    """Where each seed's policy searches again: NQ's share of second searches across, HotpotQA's up.
    An arrow per seed goes from its exact-match policy (hollow) to its policy after `trim` (filled);
    the shaded box is the rule's region (enough second searches on HotpotQA, few on NQ)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    def point(table: Table) -> tuple[float, float]:
        return table["nq"]["second_search_share"], table["hotpotqa"]["second_search_share"]

    fig, ax = plt.subplots(figsize=(COLUMN_INCHES * 0.7, 4.6))
    ax.add_patch(Rectangle((0, rule["hotpotqa_min"]), rule["nq_max"], 1 - rule["hotpotqa_min"],
                           color="#2ca02c", alpha=0.12, lw=0))
    ax.text(rule["nq_max"] / 2, 0.98, "the rule's region", ha="center", va="top", fontsize=9, color="#1b6e1b")
    widest = rule["nq_max"] * 2
    for (seed, stages), colour in zip(tables.items(), OTHER_COLOURS):
        (x0, y0), (x1, y1) = point(stages[STAGES[0]]), point(stages[STAGES[-1]])
        widest = max(widest, x0, x1)
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", color=colour, lw=1.5))
        ax.plot([x0], [y0], "o", mfc="white", color=colour)
        verdict = "fails the rule" if rule_failures(stages[STAGES[-1]], rule) else "meets the rule"
        ax.plot([x1], [y1], "o", color=colour, label=f"seed {seed}: {verdict}")
    if reference is not None:
        x, y = point(reference)
        ax.plot([x], [y], "*", ms=14, color="black", label=reference_label)
    ax.set_xlim(-0.01, min(1.0, widest * 1.15 + 0.02))
    ax.set_ylim(0, 1.0)
    ax.set_xlabel("NQ: share of questions with ≥ 2 searches (one search is enough)")
    ax.set_ylabel("HotpotQA: share with ≥ 2 searches (two hops)")
    ax.set_title(f"One recipe, {len(tables)} seeds: {STAGE_LABELS[STAGES[0]]} (○) → {STAGE_LABELS[STAGES[-1]]} (●)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def verdict_table(tables: Mapping[str, Table]) -> Cells:
    """Per policy its second-search shares, EM where it searched again / stopped, EM, and what keeps
    it from the rule ("meets the rule" when nothing does); HTML in a notebook, Markdown printed."""

    def shown(value, fmt: str) -> str:  # – for a source the evaluation lacks, or an empty group
        return "–" if value is None else format(value, fmt)

    def em_of(value, count) -> str:  # with its question count: on 50 validation questions one answer moves EM a lot
        return shown(value, ".3f") + ("" if value is None or count is None else f" ({count})")

    rows = []
    for label, t in tables.items():
        hotpot, nq = t.get("hotpotqa", {}), t.get("nq", {})
        share, n = hotpot.get("second_search_share"), hotpot.get("n")
        again = None if share is None or n is None else round(share * n)
        rows.append([label, shown(share, ".0%"), shown(nq.get("second_search_share"), ".0%"),
                     f"{em_of(hotpot.get('em_if_again'), again)} / "
                     f"{em_of(hotpot.get('em_if_stopped'), None if again is None else n - again)}",
                     shown(t["all"]["em_strict"], ".3f"), "; ".join(rule_failures(t)) or "meets the rule"])
    return Cells(["policy", "≥ 2 searches HotpotQA", "≥ 2 searches NQ",
                  "EM searched again / stopped (HotpotQA; questions)", "EM", "rule"], rows)


def added_search_gain(before_rows, after_rows) -> dict[str, dict[str, Any]]:
    """Per data source (and "all"): where the policy after a stage searched again and the one before
    it did not, how many of those questions each got right (strict EM). Same questions, before and
    after, so unlike the rule's EM comparison no difference between groups of questions enters.

    Rows pair by "id" (an unpaired row is ignored). `questions`: the paired questions; `added`: those
    with ≥ 2 searches after and < 2 before; `right_before` / `right_after`: of the added, how many each
    policy got right; `dropped`, `dropped_right_before`, `dropped_right_after`: the same for the questions
    the policy after stopped searching again on (a stage that trims searches shows itself there);
    `em_change`: strict EM after minus before over all the paired questions."""
    before, after = _by_id(before_rows, "before"), _by_id(after_rows, "after")
    pairs = [(before[key], row) for key, row in after.items() if key in before]
    if not pairs:
        raise ValueError(f"no question is in both evaluations ({len(before)} rows before, {len(after)} after): "
                         "compare two evaluations of the same questions")
    groups: dict[str, list] = {}
    for pair in pairs:
        groups.setdefault(str(pair[1].get("data_source")), []).append(pair)

    def searched(row) -> int:
        return int(row.get("search_calls") or 0)

    def right(row) -> int:
        return int(bool(row.get("exact_match")))

    gains = {}
    for source, group in [*sorted(groups.items()), ("all", pairs)]:
        added = [(b, a) for b, a in group if searched(a) >= 2 > searched(b)]
        dropped = [(b, a) for b, a in group if searched(b) >= 2 > searched(a)]
        gains[source] = {"questions": len(group), "added": len(added),
                         "right_before": sum(right(b) for b, _ in added), "right_after": sum(right(a) for _, a in added),
                         "dropped": len(dropped), "dropped_right_before": sum(right(b) for b, _ in dropped),
                         "dropped_right_after": sum(right(a) for _, a in dropped),
                         "em_change": sum(right(a) - right(b) for b, a in group) / len(group)}
    return gains


def _by_id(rows, which: str) -> dict[str, Mapping[str, Any]]:
    by_id: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if row["id"] in by_id:  # one evaluation holds one row per question; a repeat means two were mixed
            raise ValueError(f"question {row['id']!r} appears twice in the rows {which}")
        by_id[row["id"]] = row
    return by_id


def seed_gains(seeds=SEEDS, run: str = SEEDS_RUN) -> dict[int, dict[str, dict[str, Any]]]:
    """Per seed, `added_search_gain` from its policy after exact match to its policy after `trim`."""
    return {seed: added_search_gain(eval_rows(f"seed{seed}_{STAGES[0]}", run), eval_rows(f"seed{seed}_{STAGES[-1]}", run))
            for seed in seeds}


def trimmed_gains(splits=TRIMMED_SPLITS, pair=TRIMMED_PAIR) -> dict[str, dict[str, dict[str, Any]]]:
    """Per split, `added_search_gain` from the policy that searched again too readily to the one after
    `search_gain` trimmed it (both evaluated with 2 passages a search)."""
    return {split: added_search_gain(eval_rows(split, pair[0]), eval_rows(split, pair[1])) for split in splits}


def added_search_table(gains: Mapping[Any, Mapping[str, Mapping[str, Any]]], sources=("hotpotqa", "nq"),
                       key: str = "seed", before: str = STAGE_LABELS[STAGES[0]],
                       after: str = STAGE_LABELS[STAGES[-1]], summed: str = "seeds summed") -> Cells:
    """Per seed (or any `key`: a policy's label) and source, the questions the later policy added a
    second search on and the right answers among them before and after, the same for the questions it
    dropped one on, and the EM change; all summed last. HTML in a notebook, Markdown printed."""
    counts = ("questions", "added", "right_before", "right_after", "dropped", "dropped_right_before",
              "dropped_right_after")
    rows = []
    for source in sources:
        seen = [(str(name), per[source]) for name, per in gains.items() if source in per]
        total = {k: sum(g[k] for _, g in seen) for k in counts}
        total["em_change"] = sum(g["em_change"] * g["questions"] for _, g in seen) / max(total["questions"], 1)
        for name, g in [*seen, (summed, total)]:
            rows.append([name, source, f"{g['added']} of {g['questions']}", str(g["right_before"]),
                         str(g["right_after"]), str(g["dropped"]), str(g["dropped_right_before"]),
                         str(g["dropped_right_after"]), f"{100 * g['em_change']:+.1f}"])
    return Cells([key, "source", "second search added", f"right before ({before})", f"right after ({after})",
                  "second search dropped", f"right before ({before})", f"right after ({after})",
                  "EM change over the source's questions (points)"], rows)


def added_search_gain_figure(gains: Mapping[int, Mapping[str, Mapping[str, Any]]], sources=("hotpotqa", "nq")):
    """One panel per source, a pair of bars per seed: of the questions `trim` added a second search on,
    how many the policy got right before (hollow, exact match) and after (filled, then trim). The
    second search paid where the filled bar is the taller."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    empty = {"added": 0, "right_before": 0, "right_after": 0}
    seeds = list(gains)
    colours = [OTHER_COLOURS[i % len(OTHER_COLOURS)] for i in range(len(seeds))]
    fig, axes = plt.subplots(1, len(sources), figsize=(COLUMN_INCHES, 3.8), squeeze=False, layout="constrained")
    for ax, source in zip(axes[0], sources):
        per = [gains[seed].get(source, empty) for seed in seeds]
        xs = range(len(seeds))
        ax.bar([x - 0.2 for x in xs], [g["right_before"] for g in per], 0.38, color="white", edgecolor=colours, lw=1.5)
        ax.bar([x + 0.2 for x in xs], [g["right_after"] for g in per], 0.38, color=colours)
        for x, g in zip(xs, per):
            ax.text(x, max(g["right_before"], g["right_after"]) + 0.5, f"{g['right_before']} → {g['right_after']}",
                    ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), [f"seed {seed}\n{g['added']} added" for seed, g in zip(seeds, per)], fontsize=8)
        ax.set_ylim(0, max([g["right_before"] for g in per] + [g["right_after"] for g in per] + [1]) * 1.2 + 1)
        ax.set_ylabel("right answers (strict EM)")
        ax.set_title(f"{source}: {sum(g['added'] for g in per)} questions newly searched again", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    # the legend shows the two kinds of bar in grey: the colours only tell the seeds apart
    fig.legend([Patch(facecolor="white", edgecolor="#555", lw=1.5), Patch(color="#555")],
               [f"before: {STAGE_LABELS[STAGES[0]]}", f"after: {STAGE_LABELS[STAGES[-1]]}"],
               loc="outside lower center", fontsize=8, ncol=2, frameon=False)
    fig.suptitle("Where trim added a second search: right answers on the same questions, before and after",
                 fontsize=10)
    return fig


def main(argv=None) -> None:
    """python -m helpers.course.seeds LABEL=ROWS.jsonl ...: each policy's evaluation rows against the rule;
    with --paired-with LABEL, also each other policy's added second searches against LABEL's on the same
    questions (`added_search_gain`: the measure of "pays" that compares no two groups of questions)."""
    import argparse

    from helpers.runs import read_jsonl
    from helpers.search import create_search_client

    parser = argparse.ArgumentParser(prog="python -m helpers.course.seeds", description=main.__doc__)
    parser.add_argument("runs", nargs="+", metavar="LABEL=ROWS.jsonl")
    parser.add_argument("--paired-with", metavar="LABEL", help="the policy the others' second searches are paired with")
    args = parser.parse_args(argv)
    rows = {}
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep or not label:
            parser.error(f"expected LABEL=ROWS.jsonl, got {item!r}")
        rows[label] = read_jsonl(path)
    if args.paired_with is not None and (args.paired_with not in rows or len(rows) < 2):
        parser.error(f"--paired-with names one of the runs and needs another beside it: got {args.paired_with!r} "
                     f"with runs {sorted(rows)}")
    search = create_search_client("local")
    tables = {label: search_learned_table(r, search) for label, r in rows.items()}
    sources = {str(row.get("data_source")) for r in rows.values() for row in r}
    rule_sources = ("hotpotqa", "nq")
    if set(rule_sources) <= sources:
        print(verdict_table(tables))
    else:  # the rule sets HotpotQA's questions against NQ's; another split (fullwiki) gets its second-search columns
        print(format_search_learned(tables, SECOND_SEARCH_COLUMNS))
    if args.paired_with is not None:
        reference = rows[args.paired_with]
        gains = {label: added_search_gain(reference, r) for label, r in rows.items() if label != args.paired_with}
        print()
        print(added_search_table(gains, sources=[s for s in rule_sources if s in sources] + sorted(sources - set(rule_sources)),
                                 key="policy", before=args.paired_with, after="the policy", summed="policies summed"))


if __name__ == "__main__":
    main()
