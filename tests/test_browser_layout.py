"""The playgrounds fit the width JupyterLab gives a notebook with its file browser open.

A 1400 × 1200 window with the file browser open leaves the notebook's output area well under the
width of two fixed 520 px slider columns. The page shows notebook 05's playground (every budget,
the policy and question pickers) and notebook 12's (one slider), on a run function that needs no
model, and checks what a learner would see: every slider readout shows its whole value, no label
is clipped (also after typing into a readout), and nothing scrolls sideways.
"""

from __future__ import annotations

import json

import nbformat
import pytest

from fixtures.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, _open_and_run_all, _wait_for_output, serve_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTH, HEIGHT = 1400, 1200

SETUP = '''
from helpers.data import SearchExample
from helpers.widgets import RolloutPlayground, budgets

values = budgets("full")  # the widest readouts: max_trajectory_tokens 3072, max_tool_response_tokens 384
question = SearchExample("q0", "Are Ian Brown and Dee Snider both actors?", ["no"], "hotpotqa")


def run(values):
    """Two branches, one of which searched twice (no model needed)."""
    search = {"kind": "tool", "text": "<tool_call>…</tool_call>", "query": "Ian Brown actor", "tokens": 31,
              "observation": "[1] Title: Ian Brown", "observation_tokens": 120, "cut": False}
    answer = {"kind": "answer", "text": "Answer: no", "tokens": 4}
    return {"question": question.question, "answers": question.answers, "leaves": [
        {"index": 0, "reward": 1.0, "advantage": 0.5, "exact_match": True, "valid_format": True,
         "end_reason": "answer", "turns": [search, dict(search, query="Dee Snider actor"), answer]},
        {"index": 1, "reward": -0.1, "advantage": -0.5, "valid_format": False, "end_reason": "invalid",
         "turns": [{"kind": "invalid", "text": "<tool_call>{", "tokens": 3, "error": "<unclosed> tool call"}]}]}
'''
PLAYGROUND_05 = '''
RolloutPlayground(run, values=values, background=False, questions=[question],
                  policies=[("SFT + GRPO (recorded run h200_search)", "sft_grpo"), ("SFT (recorded run h200_search)", "sft"),
                            ("base model", "base")])
'''
PLAYGROUND_12 = '''
RolloutPlayground(lambda values: dict(run(values), row_prefix="q", advantages=False), values={**values, "budget": 1},
                  background=False, sliders={"budget": (0, 5, 1)}, row_prefix="q",
                  policies=[("SFT + GRPO (recorded run h200_search)", "sft_grpo")])
'''

# Reads the layout as the learner sees it: every box that could overflow, and every readout.
MEASURE = """() => {
  const area = document.querySelector('.jp-NotebookPanel .jp-Notebook');
  const over = (el) => el.scrollWidth - el.clientWidth;
  const boxes = [...document.querySelectorAll('.srt-playground, .srt-playground .widget-box, .jp-OutputArea-output')]
    .filter((el) => el.querySelector('.srt-playground') || el.closest('.srt-playground'));
  const sliders = [...document.querySelectorAll('.srt-playground .widget-slider')].map((slider) => {
    const readout = slider.querySelector('.widget-readout');
    const label = slider.querySelector('.widget-label');
    const box = slider.getBoundingClientRect();
    return {name: label.textContent, labelOver: over(label), labelScroll: label.scrollLeft,
            readout: readout.textContent, readoutOver: over(readout), readoutWidth: readout.clientWidth,
            readoutRight: readout.getBoundingClientRect().right, sliderRight: box.right, width: box.width};
  });
  const output = document.querySelector('.srt-playground').closest('.jp-OutputArea-output').getBoundingClientRect();
  return {notebookOver: over(area), outputRight: output.right, outputWidth: output.width,
          boxesOver: boxes.map(over), sliders,
          fileBrowser: !!document.querySelector('#filebrowser:not(.lm-mod-hidden)')};
}"""


def _notebook(path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(PLAYGROUND_05),
                      nbformat.v4.new_code_cell(PLAYGROUND_12)]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)
    return path


@pytest.fixture(scope="module")
def lab_with_playgrounds(tmp_path_factory):
    path = _notebook(tmp_path_factory.mktemp("layout") / "playground_layout.ipynb")
    yield from serve_lab(tmp_path_factory, "lab-layout", [path])


def _check(layout: dict, when: str) -> None:
    assert layout["fileBrowser"], "the file browser should be open beside the notebook"
    assert layout["notebookOver"] <= 1, f"{when}: the notebook scrolls sideways by {layout['notebookOver']} px"
    assert max(layout["boxesOver"]) <= 1, f"{when}: a playground box scrolls sideways: {layout['boxesOver']}"
    names = [slider["name"] for slider in layout["sliders"]]
    assert "max_trajectory_tokens" in names and "budget" in names, names
    for slider in layout["sliders"]:
        where = f"{when}: slider {slider['name']!r}"
        assert slider["readoutOver"] <= 0, f"{where}: its readout {slider['readout']!r} is clipped"
        assert slider["labelOver"] <= 0 and slider["labelScroll"] == 0, f"{where}: its label is clipped or scrolled"
        assert slider["readoutRight"] <= layout["outputRight"] + 1, f"{where}: its readout lies past the output area"
        assert slider["sliderRight"] <= layout["outputRight"] + 1, f"{where}: it is wider than the output area"
    readouts = {slider["name"]: slider["readout"] for slider in layout["sliders"]}
    assert readouts["max_trajectory_tokens"] == "3072" and readouts["max_tool_response_tokens"] in ("384", "160")


def test_the_playgrounds_fit_beside_the_file_browser(lab_with_playgrounds):
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        try:
            _open_and_run_all(page, f"{lab_with_playgrounds}/lab/tree/playground_layout.ipynb")
            if not page.locator("#filebrowser:not(.lm-mod-hidden)").count():
                page.locator('.jp-SideBar [data-id="filebrowser"]').click()
            expect(page.locator("#filebrowser")).to_be_visible()
            playgrounds = page.locator(".srt-playground")
            _wait_for_output(page, playgrounds.nth(1).locator(".srt-playground-status", has_text="run 1:"))
            page.wait_for_timeout(500)  # let JupyterLab settle the panel widths
            layout = page.evaluate(MEASURE)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser_playground_layout.png"), full_page=True)
            (ARTIFACTS / "browser_playground_layout.json").write_text(json.dumps(layout, indent=1))
            _check(layout, "as drawn")
            # an invalid turn's chip says why, in the parser's words (set as text, never as HTML)
            expect(playgrounds.first.locator(".srt-invalid .srt-invalid-reason")).to_have_text("<unclosed> tool call:")
            # notebook 12's rows are questions: named q0…, no advantage on their score
            expect(playgrounds.nth(1).locator("[data-testid=tree-leaf] .srt-leaf-name").first).to_have_text("q0")
            expect(playgrounds.nth(1).locator(".srt-score").first).to_have_text("r +1.00")

            # type into a readout, as a learner does: the row must not scroll its label away
            slider = playgrounds.first.locator(".srt-slider-max_tool_response_tokens")
            readout = slider.locator(".widget-readout")
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("160")
            page.keyboard.press("Enter")
            expect(readout).to_have_text("160")
            _wait_for_output(page, playgrounds.first.locator(".srt-playground-status", has_text="run 2:"))
            _check(page.evaluate(MEASURE), "after typing 160 into max_tool_response_tokens")
        finally:
            browser.close()
