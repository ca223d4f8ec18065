"""Notebooks 05 and 10 and the widget views in a real browser: JupyterLab + Debian's Chromium via Playwright.

Needs the Debian package `chromium` (/usr/bin/chromium); no browser is downloaded. The notebook
runs with COURSE_PROFILE=fast. A screenshot is kept under artifacts/ (git-ignored).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.browser import (ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, EVALUATION, NOTEBOOK, ROOT, RUN_TIMEOUT_MS,
                              _free_port, _open_and_run_all, _wait_for_output, _wait_until_serving, serve_lab)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    yield from serve_lab(tmp_path_factory, "lab", [NOTEBOOK, EVALUATION])


def test_rollout_tree_notebook_in_chromium(lab):
    from playwright.sync_api import expect, sync_playwright

    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        try:
            _open_and_run_all(page, f"{lab}/lab/tree/{NOTEBOOK.name}")

            trees = page.locator("[data-testid=tree-widget]")
            playground = page.locator(".srt-playground")
            # three trees: the rollout's group, the playground's, the untrusted example
            _wait_for_output(page, trees.nth(2))
            expect(trees).to_have_count(3)
            status = playground.locator(".srt-playground-status")
            expect(status).to_contain_text("run 1:", timeout=RUN_TIMEOUT_MS)

            # the group's tree: a root and one leaf per trajectory; clicking a leaf opens its turns
            group_tree = trees.nth(0)
            expect(group_tree.locator("[data-testid=tree-root]")).to_be_visible()
            leaves = group_tree.locator("[data-testid=tree-leaf]")
            assert leaves.count() >= 2
            expect(group_tree.locator("[data-testid=tree-details]")).to_have_count(0)
            leaves.nth(1).click()
            details = group_tree.locator("[data-testid=tree-details]")
            expect(details).to_be_visible()
            expect(details).to_contain_text("τ1")
            assert details.locator("[data-testid=tree-detail-turn]").count() >= 1
            ARTIFACTS.mkdir(exist_ok=True)
            group_tree.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "browser_05_leaf_opened.png"))

            # a budget slider re-runs the rollout: group_size + 1 adds a branch to the playground tree
            play_leaves = playground.locator("[data-testid=tree-leaf]")
            before = play_leaves.count()
            slider = playground.locator(".srt-slider-group_size")
            readout = slider.locator(".widget-readout")
            target = str(int(readout.inner_text().strip()) + 1)
            handle = slider.locator(".noUi-handle")
            handle.focus()
            handle.press("ArrowRight")
            try:
                expect(readout).to_have_text(target, timeout=5_000)
            except AssertionError:  # keyboard not honoured by this slider build: type into the readout
                readout.click()
                page.keyboard.press("Control+A")
                page.keyboard.type(target)
                page.keyboard.press("Enter")
                expect(readout).to_have_text(target, timeout=5_000)
            expect(status).to_contain_text("run 2:", timeout=RUN_TIMEOUT_MS)
            expect(play_leaves).to_have_count(before + 1, timeout=60_000)

            # untrusted text renders as text: the tag is visible and no element or dialog appears
            evil_tree = trees.nth(2)
            observation = evil_tree.locator(".srt-observation-text")
            expect(observation).to_contain_text("<img src=x onerror=alert(1)>")
            assert page.locator("img[src='x']").count() == 0
            page.wait_for_timeout(500)
            assert dialogs == []
        finally:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser_05_rollout_tree.png"), full_page=False)
            browser.close()


def test_evaluation_notebook_shows_its_tables_as_html_tables(lab):
    """Notebook 10: the evaluation tables are tables (not Markdown text), the compared columns
    first and the rest under a disclosure that opens."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            _open_and_run_all(page, f"{lab}/lab/tree/{EVALUATION.name}")
            # the solution cell is the last one: once it has printed, every table is drawn
            outputs = page.locator(".jp-OutputArea-output")
            _wait_for_output(page, outputs.filter(has_text="correct").last)
            expect(page.locator("[data-testid=tree-widget] [data-testid=tree-leaf]").first).to_be_attached()
            tables = outputs.locator("table.srt-table")
            # base vs checkpoint, the baselines, the recorded runs: each a compared-columns table plus its full one
            assert tables.count() >= 6
            assert outputs.filter(has_text="|---|").count() == 0, "a table was printed as Markdown"
            first = tables.nth(0)
            first.scroll_into_view_if_needed()
            head = [h.strip() for h in first.locator("th").all_inner_texts()]
            assert head[:4] == ["source", "EM strict start", "EM strict trained", "Δ strict"]
            details = outputs.locator("details").first
            full = details.locator("table.srt-table")
            expect(full).to_be_hidden()
            details.locator("summary").click()
            expect(full).to_be_visible()
            assert full.locator("th").count() > first.locator("th").count()
            baselines = tables.nth(2)
            assert baselines.locator("tbody tr").count() >= 4  # four runs, at least one source each
            assert "closed book" in baselines.inner_text() and "EM lenient" in baselines.inner_text()
            # the box starts on the running example, whose reference answer is known
            root = page.locator("[data-testid=tree-root]").last
            root.scroll_into_view_if_needed()
            expect(root).to_contain_text("Corliss Archer")
            expect(root).to_contain_text("gold: Chief of Protocol")
        finally:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser_10_tables.png"), full_page=False)
            browser.close()


FAKE_MODEL = """
export function fakeModel(state) {
  const handlers = {};
  return {
    get: (key) => state[key],
    set: (key, value) => { state[key] = value; (handlers["change:" + key] || []).forEach((f) => f()); },
    save_changes: () => {},
    on: (name, f) => { (handlers[name] = handlers[name] || []).push(f); },
    off: (name, f) => { handlers[name] = (handlers[name] || []).filter((g) => g !== f); },
  };
}
"""


def test_widget_views_standalone_escape_and_respond_to_clicks(tmp_path):
    """tree.js and tokens.js on a fake anywidget model, no Jupyter: fast feedback on the views."""
    from playwright.sync_api import sync_playwright

    from helpers.widgets.tree import normalise_tree
    from helpers.widgets.tokens import normalise_rows

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: `apt-get install -y chromium`")
    import json

    widgets_dir = ROOT / "helpers" / "widgets"
    for name in ("tree.js", "tokens.js", "widgets.css"):
        shutil.copy(widgets_dir / name, tmp_path / name)
    (tmp_path / "fake.js").write_text(FAKE_MODEL)
    evil = "<img src=x onerror=alert(1)>"
    tree = normalise_tree({"question": "Q " + evil, "answers": ["Lyon"], "leaves": [
        {"index": 0, "reward": 1.0, "advantage": 0.5, "valid_format": True, "turns": [
            {"kind": "tool", "text": "call", "query": "q " + evil, "tokens": 5, "observation": "obs " + evil,
             "observation_tokens": 9, "cut": True},
            {"kind": "answer", "text": "Answer: Lyon", "tokens": 3}]},
        {"index": 1, "reward": 0.0, "advantage": -0.5, "turns": [{"kind": "answer", "text": "Answer: " + evil, "tokens": 3}]},
    ]})
    rows = normalise_rows([{"id": 1, "text": evil, "role": "observation"}, {"id": 2, "text": "Lyon", "role": "assistant",
                           "logprob": -0.25, "advantage": 0.5, "mask": 1}])
    (tmp_path / "index.html").write_text(f"""<!doctype html><html><head><link rel="stylesheet" href="widgets.css"></head>
<body><div id="tree"></div><div id="strip"></div><script type="module">
import tree from "./tree.js"; import strip from "./tokens.js"; import {{ fakeModel }} from "./fake.js";
window.treeModel = fakeModel({{data: {json.dumps(tree)}, selected: -1}});
tree.render({{model: window.treeModel, el: document.getElementById("tree")}});
window.stripModel = fakeModel({{rows: {json.dumps(rows)}, active: -1}});
strip.render({{model: window.stripModel, el: document.getElementById("strip")}});
window.ready = true;
</script></body></html>""")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dialogs: list[str] = []
    try:
        _wait_until_serving(f"http://127.0.0.1:{port}/index.html", 30, pause=0.2)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.goto(f"http://127.0.0.1:{port}/index.html")
            page.wait_for_function("window.ready === true", timeout=10_000)
            assert page.locator("[data-testid=tree-leaf]").count() == 2
            assert page.locator("[data-testid=tree-details]").count() == 0
            page.locator("[data-testid=tree-leaf]").nth(0).click()
            assert page.evaluate("window.treeModel.get('selected')") == 0
            details = page.locator("[data-testid=tree-details]")
            assert "obs " + evil in details.inner_text()
            assert "cut" in page.locator("[data-testid=tree-leaf]").nth(0).inner_text()
            # an answer is marked as a good one only when its trajectory's format is valid
            answers = page.locator(".srt-answer")
            assert answers.count() == 2
            assert "srt-answer-bad-format" not in answers.nth(0).get_attribute("class")
            assert "srt-answer-bad-format" in answers.nth(1).get_attribute("class")
            assert "gold: Lyon" in page.locator("[data-testid=tree-root]").inner_text()
            # a question typed by the learner has no reference: no empty gold, no exact match claimed
            page.evaluate("window.treeModel.set('data', {...window.treeModel.get('data'), answers: [], gold: null})")
            assert "no reference answer" in page.locator("[data-testid=tree-root]").inner_text()
            assert "exact match" not in page.locator("[data-testid=tree-details]").inner_text()
            page.locator("[data-testid=token]").nth(1).click()
            info = page.locator("[data-testid=token-info]").inner_text()
            assert "id 2" in info and "-0.250" in info and "advantage +0.50" in info and "mask 1" in info
            assert evil in page.locator("[data-testid=token]").nth(0).inner_text()
            assert page.locator("img").count() == 0
            page.wait_for_timeout(300)
            assert dialogs == []
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser_widgets_standalone.png"), full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)


def _serve_page(tmp_path: Path, body_script: str):
    """Copy the widget sources next to an index.html running `body_script`; return (url, server)."""
    widgets_dir = ROOT / "helpers" / "widgets"
    for name in ("tree.js", "tokens.js", "widgets.css"):
        shutil.copy(widgets_dir / name, tmp_path / name)
    (tmp_path / "fake.js").write_text(FAKE_MODEL)
    (tmp_path / "index.html").write_text(f"""<!doctype html><html><head><link rel="stylesheet" href="widgets.css"></head>
<body><div id="strip"></div><script type="module">{body_script}
window.ready = true;
</script></body></html>""")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_until_serving(f"http://127.0.0.1:{port}/index.html", 30, pause=0.2)
    return f"http://127.0.0.1:{port}/index.html", server


def test_token_strip_click_keeps_scroll_position_and_selection(tmp_path):
    """A long trajectory: clicking a token far down highlights it where it is and keeps the info line."""
    import json

    from playwright.sync_api import sync_playwright

    from helpers.widgets.tokens import normalise_rows

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: `apt-get install -y chromium`")
    roles = ["prompt"] * 400 + ["assistant"] * 200 + ["observation"] * 300 + ["assistant"] * 100
    rows = normalise_rows([{"id": 1000 + i, "text": f"tok{i} " + ("\n" if i % 12 == 0 else ""), "role": role,
                            "advantage": 0.5 if role == "assistant" else 0.0} for i, role in enumerate(roles)])
    url, server = _serve_page(tmp_path, f"""
import strip from "./tokens.js"; import {{ fakeModel }} from "./fake.js";
window.stripModel = fakeModel({{rows: {json.dumps(rows)}, active: -1}});
strip.render({{model: window.stripModel, el: document.getElementById("strip")}});""")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 900, "height": 900})
            page.goto(url)
            page.wait_for_function("window.ready === true", timeout=10_000)
            scroller = page.locator(".srt-strip-tokens")
            assert scroller.evaluate("e => e.scrollHeight > e.clientHeight"), "the strip should scroll"
            target = 950  # an assistant token after the observation, far below the first screen
            tokens = page.locator("[data-testid=token]")
            tokens.nth(target).scroll_into_view_if_needed()
            before = scroller.evaluate("e => e.scrollTop")
            assert before > 300
            tokens.nth(target).click()
            assert page.evaluate("window.stripModel.get('active')") == target
            assert scroller.evaluate("e => e.scrollTop") == before
            active = page.locator(".srt-tok-active")
            assert active.count() == 1 and active.inner_text().startswith(f"tok{target}")
            assert active.is_visible()
            info = page.locator("[data-testid=token-info]")
            assert info.inner_text().startswith(f"#{target} ") and "assistant" in info.inner_text()
            # hovering another token shows it; leaving it brings the selected token back
            tokens.nth(target - 3).hover()
            assert info.inner_text().startswith(f"#{target - 3} ")
            page.mouse.move(5, 5)
            assert info.inner_text().startswith(f"#{target} ")
            # a second click moves the one highlight
            tokens.nth(target + 2).click()
            assert page.locator(".srt-tok-active").count() == 1
            assert page.locator(".srt-tok-active").inner_text().startswith(f"tok{target + 2}")
            assert scroller.evaluate("e => e.scrollTop") == before
            # the kernel side changing `active` (a new selection) is shown too
            page.evaluate("window.stripModel.set('active', 5)")
            assert page.locator(".srt-tok-active").inner_text().startswith("tok5")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser_token_strip_scroll.png"))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
