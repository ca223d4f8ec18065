"""A recorded efficiency run as a folder a reader can open: plots and a README with tables.

    python -m helpers.efficiency report --dir results/efficiency

Reads `<dir>/<reward>/metrics.jsonl` (from `compare`) and `<dir>/budget_sweep.json` (from
`budget`); writes `reward_comparison.png`, `mismatch.png`, `budget_curve.png` and `README.md`.
A hand-written `NOTES.md` in the folder (what the run shows, caveats) is appended to the README.
"""

from __future__ import annotations

from pathlib import Path

from helpers.analyse import first_last_quarter
from helpers.efficiency.budget import load_budget_points, plot_tool_efficiency
from helpers.efficiency.training import REWARDS, load_metrics, plot_reward_comparison
from helpers.mismatch import MismatchHistory

COMPARED = ("search_calls_mean", "multi_search_share", "assistant_tokens_mean", "trajectory_tokens_mean",
            "exact_match", "reward_mean", "eff/pen_tool_mean", "eff/pen_len_mean",
            "degenerate_group_share", "mismatch/kl_k3", "time_step")


def write_report(folder: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def save(name: str) -> None:
        plt.tight_layout()
        plt.savefig(folder / name, dpi=110)
        plt.close("all")

    folder = Path(folder)
    runs = {name: load_metrics(folder / name) for name in REWARDS if (folder / name / "metrics.jsonl").exists()}
    runs = {name: rows for name, rows in runs.items() if rows}
    points = load_budget_points(folder / "budget_sweep.json")
    if not runs and not points:
        raise FileNotFoundError(f"{folder} has neither <reward>/metrics.jsonl nor budget_sweep.json: "
                                "run `python -m helpers.efficiency compare` or `... budget` first")
    lines = [f"# Efficiency run `{folder.name}`", ""]
    if runs:
        plot_reward_comparison(runs)
        save("reward_comparison.png")
        names = list(runs)
        lines += ["## Plain exact-match reward vs gated reward", "",
                  "Same start (the SFT checkpoint), same questions in the same order; first quarter of "
                  "steps -> last quarter.", "",
                  "| metric | " + " | ".join(f"{n} ({len(runs[n])} steps)" for n in names) + " |",
                  "|---|" + "---|" * len(names)]
        for key in COMPARED:
            cells = ["{:.4g} -> {:.4g}".format(*first_last_quarter(runs[name], key)) for name in names]
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
        lines += ["", "![reward comparison](reward_comparison.png)", ""]
        mismatch_run = next((n for n in ("gated", *names) if n in runs and
                             any("mismatch/kl_k3" in r for r in runs[n])), None)
        if mismatch_run:
            history = MismatchHistory.from_metrics(runs[mismatch_run])
            history.plot()
            save("mismatch.png")
            kls = [s.kl_k3 for s in history.steps]
            lows = [s.ratio_quantiles.get("p1", 1.0) for s in history.steps]
            highs = [s.ratio_quantiles.get("p99", 1.0) for s in history.steps]
            lines += ["## Train/inference mismatch", "",
                      f"Run `{mismatch_run}`, {len(kls)} steps: sampler-vs-trainer KL (k3) per step "
                      f"{min(kls):.2e} to {max(kls):.2e}; token ratio pi_train/mu_infer 1st-99th percentile "
                      f"within [{min(lows):.3f}, {max(highs):.3f}].", "", "![mismatch](mismatch.png)", ""]
    if points:
        plot_tool_efficiency(points)
        save("budget_curve.png")
        policies = list(dict.fromkeys(p.policy for p in points))
        budgets = sorted({p.budget for p in points})
        by = {(p.policy, p.budget): p for p in points}
        lines += ["## Budget-forced evaluation", "",
                  f"{points[0].questions} test questions per point; the budget is stated in the system "
                  "prompt and enforced (a call over it ends the trajectory). Cells: exact match / mean "
                  "search calls / tokens per question.", "",
                  "| b | " + " | ".join(policies) + " |", "|---|" + "---|" * len(policies)]

        def cell(p) -> str:
            return "" if p is None else f"{p.accuracy:.2f} / {p.search_calls_mean:.2f} / {p.tokens_per_question:.0f}"

        for b in budgets:
            lines.append(f"| {b} | " + " | ".join(cell(by.get((name, b))) for name in policies) + " |")
        lines += ["", "![tool-efficiency curve](budget_curve.png)", ""]
    if (folder / "NOTES.md").exists():
        lines += ["## Reading this run", "", (folder / "NOTES.md").read_text().strip(), ""]
    (folder / "README.md").write_text("\n".join(lines) + "\n")
    return folder / "README.md"
