"""What changed between two runs of a live widget, branch by branch.

A run is TrajectoryTree data (`helpers.widgets.tree_data`). Each branch is summed up as the
numbers a budget can move — searches made, observation tokens kept, observations cut, how the
branch ended, its answer, reward and advantage — and two runs are compared branch by branch
(τ0 with τ0, …), so a learner who lowers a budget sees which branches it touched.

Only like is compared with like: runs on different questions are not compared at all (the caller
starts a new baseline), and a branch whose only difference is its advantage did the same thing —
the group's mean moved because another branch changed — so it is marked apart ("advantage only").
"""

from __future__ import annotations

from typing import Any

from helpers.reward import extract_answer
from helpers.widgets._html import esc, shorten

# The per-branch fields, in the order the table shows them.
SUMMARY_FIELDS = ("searches", "observation_tokens", "cut", "end_reason", "answer", "reward", "advantage")
FIELD_LABELS = {"searches": "searches", "observation_tokens": "obs tokens kept", "cut": "obs cut",
                "end_reason": "ended by", "answer": "answer", "reward": "reward", "advantage": "advantage"}
# What the branch did; the advantage also depends on the other branches of its group.
OWN_FIELDS = tuple(field for field in SUMMARY_FIELDS if field != "advantage")
STATUS_LABELS = {"advantage only": "same turns; only its advantage moved (another branch of the group changed)"}


def _answer_of(leaf: dict[str, Any]) -> str:
    if leaf.get("answer") is not None:
        return str(leaf["answer"])
    turns = leaf.get("turns") or []
    if turns and turns[-1].get("kind") == "answer" and (leaf.get("end_reason") in (None, "", "answer")):
        return extract_answer(str(turns[-1].get("text") or "")) or ""
    return ""


def branch_summary(leaf: dict[str, Any]) -> dict[str, Any]:
    """One branch (a tree leaf) as the numbers a budget moves."""
    turns = leaf.get("turns") or []
    tools = [t for t in turns if t.get("kind") == "tool"]
    given = [t for t in tools if t.get("observation_tokens") is not None]
    return {
        "index": int(leaf.get("index", 0)),
        "source": str(leaf.get("source") or "sampled"),
        "searches": len(given),
        "observation_tokens": sum(int(t["observation_tokens"]) for t in given),
        "cut": sum(bool(t.get("cut")) for t in tools),
        "end_reason": str(leaf.get("end_reason") or ""),
        "answer": _answer_of(leaf),
        "reward": round(float(leaf.get("reward", 0.0)), 4),
        "advantage": round(float(leaf.get("advantage", 0.0)), 4),
    }


def run_summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [branch_summary(leaf) for leaf in data.get("leaves") or []]


def setting_changes(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The settings that differ between two runs: name -> (before, after)."""
    if before is None:
        return {}
    return {key: (before.get(key), after.get(key)) for key in sorted(set(before) | set(after))
            if before.get(key) != after.get(key)}


def compare_runs(before: dict[str, Any] | None, after: dict[str, Any]) -> list[dict[str, Any]]:
    """Branch-by-branch comparison: rows with `index`, `status` (first/same/changed/advantage
    only/new/gone), `before`, `after` (summaries or None) and `changed` (the fields that differ).

    "changed": something the branch did differs; "advantage only": it did the same, and only its
    advantage moved with the rest of its group."""
    now = {row["index"]: row for row in run_summary(after)}
    was = {row["index"]: row for row in run_summary(before)} if before is not None else {}
    rows = []
    for index in sorted(set(now) | set(was)):
        old, new = was.get(index), now.get(index)
        if old is None:
            status, changed = ("new" if before is not None else "first"), []
        elif new is None:
            status, changed = "gone", []
        else:
            changed = [field for field in SUMMARY_FIELDS if old[field] != new[field]]
            own = [field for field in changed if field in OWN_FIELDS]
            status = "changed" if own else ("advantage only" if changed else "same")
        rows.append({"index": index, "status": status, "before": old, "after": new, "changed": changed})
    return rows


def _cell(field: str, value: Any) -> str:
    if value is None:
        return "—"
    if field in ("reward", "advantage"):
        return f"{float(value):+.2f}"
    if field == "answer":
        return esc(shorten(value, 40)) if value else "<i>none</i>"
    return esc(value)


def changes_html(rows: list[dict[str, Any]], settings: dict[str, tuple[Any, Any]] | None = None,
                 row_prefix: str = "τ", fields: tuple[str, ...] = SUMMARY_FIELDS, new_baseline: str = "") -> str:
    """The comparison as an HTML table (every string escaped); changed cells show before → after.

    fields: the columns (leave "advantage" out where every branch is its own group). new_baseline:
    why this run is not compared with the previous one (e.g. another question), shown as the head."""
    if not rows:
        return '<div class="srt-changes" data-testid="change-summary"><i>no branches</i></div>'
    if new_baseline:
        head = f'<p data-testid="change-baseline">{esc(new_baseline)}: a new baseline, move a slider to compare against it</p>'
    elif settings:
        moved = ", ".join(f"{esc(k)} {esc(a)} → {esc(b)}" for k, (a, b) in settings.items())
        head = f'<p data-testid="change-settings">changed: {moved}</p>'
    elif any(row["status"] == "first" for row in rows):
        head = "<p>first run: move a slider to compare against it</p>"
    else:
        head = "<p>same settings as the previous run</p>"
    unknown = [f for f in fields if f not in SUMMARY_FIELDS]
    if unknown:
        raise ValueError(f"unknown change-table fields {unknown}: pick from {SUMMARY_FIELDS}")
    header = "".join(f"<th>{esc(FIELD_LABELS[f])}</th>" for f in fields)
    body = []
    for row in rows:
        new, old = row["after"], row["before"]
        cells = []
        for field in fields:
            if new is None:
                cells.append(f"<td>{_cell(field, old[field])}</td>")
            elif field in row["changed"] and row["status"] == "advantage only":
                cells.append(f'<td class="srt-moved" style="background:#eef3fb">{_cell(field, old[field])} → '
                             f"{_cell(field, new[field])}</td>")
            elif field in row["changed"]:
                cells.append(f'<td class="srt-changed" style="background:#fff3c4">{_cell(field, old[field])} → '
                             f"{_cell(field, new[field])}</td>")
            else:
                cells.append(f"<td>{_cell(field, new[field])}</td>")
        forced = any(r is not None and r["source"] == "teacher-forced" for r in (new, old))
        label = " <small>teacher-forced</small>" if forced else ""
        explained = STATUS_LABELS.get(row["status"])
        status_title = f' title="{esc(explained)}"' if explained else ""
        searches = "" if new is None else f' data-searches="{new["searches"]}"'
        before = "" if old is None else f' data-searches-before="{old["searches"]}"'
        body.append(f'<tr data-testid="change-row" data-index="{row["index"]}" data-status="{esc(row["status"])}"'
                    f'{searches}{before}><td>{esc(row_prefix)}{row["index"]}{label} <small{status_title}>{esc(row["status"])}</small></td>'
                    f'{"".join(cells)}</tr>')
    return (f'<div class="srt-changes" data-testid="change-summary">{head}<table><tr><th>branch</th>{header}</tr>'
            f'{"".join(body)}</table></div>')
