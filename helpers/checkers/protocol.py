"""Checks for `parse_assistant` (notebook 02): the parser's unit examples and two properties.

The learner's parser reads the JSON call format (`<tool_call>{"name": "search", "arguments":
{"query": ...}}</tool_call>`) and returns a ParsedAssistant(kind, content, query, error).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from hypothesis import strategies as st

from helpers.checkers._runner import Case, Mismatch, Property, run_checks
from helpers.search.http import clean_query


def call(query: Any, name: str = "search", **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"query": query, **arguments}}) + "\n</tool_call>"


def _view(parsed: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(parsed, name, "<missing>") for name in fields}


def _case(name: str, text: str, kind: str, query: str | None = None, content: str | None = None) -> Case:
    expected: dict[str, Any] = {"kind": kind}
    if kind == "tool":
        expected["query"] = query
    if content is not None:
        expected["content"] = content
    fields = tuple(expected)
    return Case(name, repr(text), expected, lambda fn: _view(fn(text), fields))


PARSE_CASES = [
    _case("thinking, then one call", "I need the author first.\n" + call("Little Prince author") + "\n",
          "tool", "Little Prince author", content="I need the author first."),
    _case("a call wrapped in spaces", "  " + call("tallest mountain in Africa") + "  \n", "tool", "tallest mountain in Africa"),
    _case("the query is stripped", call("  Lyon  "), "tool", "Lyon"),
    _case("extra arguments are ignored", call("Lyon", top_k=3), "tool", "Lyon"),
    _case("no call at all", "  The author was French.\nAnswer: France  ", "answer",
          content="The author was French.\nAnswer: France"),
    _case("an answer without the Answer: line", "I believe it is France.", "answer"),
    _case("two calls", call("Little Prince author") + call("Saint-Exupery birthplace"), "invalid"),
    _case("text after the call", call("Lyon") + "\nAnswer: France", "invalid"),
    _case("an unfinished call", '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}', "invalid"),
    _case("a closing tag alone", "</tool_call> Answer: x", "invalid"),
    _case("an empty query", call("   "), "invalid"),
    _case("a query with < or >", call("<b>Lyon</b> France"), "invalid"),
    _case("another tool's name", call("x", name="lookup"), "invalid"),
    _case("no query argument", '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', "invalid"),
    _case("broken JSON", '<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>', "invalid"),
]

_fragments = st.sampled_from([
    "<tool_call>", "</tool_call>", "\n", " ", "Answer:", "answer: x", '{"name": "search", ',
    '"arguments": {"query": ', '"Paris"', "}}", "}", "{", "<", ">", '"', "\\", "null", "[", "]", "Lyon", "é",
])
_texts = st.one_of(st.text(max_size=60), st.lists(st.one_of(_fragments, st.text(max_size=6)), max_size=12).map("".join))


def _consistent(fn: Callable, text: str) -> None:
    parsed = fn(text)
    kind = getattr(parsed, "kind", None)
    if kind not in {"tool", "answer", "invalid"}:
        raise Mismatch("kind 'tool', 'answer' or 'invalid'", kind)
    if kind == "tool":
        query = getattr(parsed, "query", None)
        if not query or query != query.strip() or "<" in query or ">" in query:
            raise Mismatch("a tool action has a non-empty, stripped query without < or >", query)
        if text.count("<tool_call>") != 1 or not text.rstrip().endswith("</tool_call>"):
            raise Mismatch("tool only for exactly one call with nothing after it", kind)
    if kind == "answer" and ("<tool_call>" in text or "</tool_call>" in text):
        raise Mismatch("a turn with call markup is never an answer", kind)


def _round_trip(fn: Callable, query: str) -> None:
    parsed = fn(call(query))
    clean = query.strip()
    if not clean or "<" in clean or ">" in clean:
        expected = {"kind": "invalid"}
        got = {"kind": getattr(parsed, "kind", None)}
    else:
        expected = {"kind": "tool", "query": clean}
        got = {"kind": getattr(parsed, "kind", None), "query": getattr(parsed, "query", None)}
    if got != expected:
        raise Mismatch(expected, got)


PARSE_PROPERTIES = [
    Property("any text gets one of three verdicts, consistent with the markup", _texts, _consistent),
    Property("any query written in a call comes back stripped (or invalid when empty or with < >)",
             # queries whose edges are plain whitespace: the course's parser also trims zero-width
             # characters (helpers.search.http.clean_query), which a learner's strip() need not
             st.text(min_size=1, max_size=40).filter(lambda q: clean_query(q) == q.strip()), _round_trip),
]


def check_parse_assistant(fn: Any):
    """Run the parser's cases and properties against `fn(text) -> ParsedAssistant`."""
    return run_checks("parse_assistant", fn, PARSE_CASES, PARSE_PROPERTIES,
                      hint="one complete call and nothing after it is 'tool'; no call markup at all is "
                           "'answer'; everything else is 'invalid'")
