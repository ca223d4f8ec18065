"""The tool protocol: prompts through the real chat templates, and the three-way parser."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.models import load_tokenizer
from helpers.search.http import clean_query
from helpers.protocol import (
    SEARCH_TOOL,
    build_messages,
    build_prompt,
    parse_assistant,
    stop_sequences,
    system_prompt,
    template_family,
    tool_message,
)

JSON_CALL = '<tool_call>\n{"name": "search", "arguments": {"query": "Little Prince author"}}\n</tool_call>'
XML_CALL = "<tool_call><function=search><parameter=query>Little Prince author</parameter></function></tool_call>"


@pytest.fixture(scope="module", params=["qwen2.5-0.5b", "smollm2-135m"])
def tokenizer(request):
    return load_tokenizer(request.param)


# --------------------------------------------------------------------------- parser


@pytest.mark.parametrize("call", [JSON_CALL, XML_CALL])
def test_one_complete_call_is_a_tool_action(call):
    parsed = parse_assistant("I need the author first.\n" + call + "\n")
    assert parsed.kind == "tool"
    assert parsed.query == "Little Prince author"
    assert parsed.content == "I need the author first."


@pytest.mark.parametrize(
    "text, reason",
    [
        ("<tool_call><function=search>", "unfinished"),
        ('<tool_call>\n{"name": "search", "arguments": {"query": "x"}}', "unfinished"),
        (JSON_CALL + JSON_CALL, "more than one"),
        (JSON_CALL + "\nAnswer: Paris", "text after"),
        ('<tool_call>{"name": "search", "arguments": {"query": "  "}}</tool_call>', "empty"),
        ('<tool_call>{"name": "search", "arguments": {"query": "<b>x</b>"}}</tool_call>', "<"),
        ('<tool_call>{"name": "lookup", "arguments": {"query": "x"}}</tool_call>', "unknown tool"),
        ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', "query"),
        ('<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>', "JSON"),
        ("<tool_call><function=search><parameter=query>a > b</parameter></function></tool_call>", "<"),
        ("<tool_call><function=fetch><parameter=query>x</parameter></function></tool_call>", "unknown tool"),
        ("</tool_call> Answer: x", "unfinished"),
    ],
)
def test_broken_calls_are_invalid_with_a_reason(text, reason):
    parsed = parse_assistant(text)
    assert parsed.kind == "invalid"
    assert parsed.query is None
    assert reason in parsed.error


def test_text_without_a_call_is_an_answer():
    parsed = parse_assistant("  The author was French.\nAnswer: France  ")
    assert parsed == parse_assistant("The author was French.\nAnswer: France")
    assert parsed.kind == "answer" and parsed.content.endswith("Answer: France")


def test_family_restricts_the_accepted_format():
    assert parse_assistant(JSON_CALL, family="json").kind == "tool"
    assert parse_assistant(JSON_CALL, family="xml").kind == "invalid"
    assert parse_assistant(XML_CALL, family="xml").kind == "tool"
    assert parse_assistant(XML_CALL, family="json").kind == "invalid"


def test_double_encoded_or_extra_arguments_are_accepted():
    body = json.dumps({"name": "search", "arguments": json.dumps({"query": "Lyon"})})
    assert parse_assistant(f"<tool_call>{body}</tool_call>").query == "Lyon"
    body = json.dumps({"name": "search", "arguments": {"query": "Lyon", "top_k": 3}})
    assert parse_assistant(f"<tool_call>{body}</tool_call>").query == "Lyon"


fragments = st.sampled_from(
    [
        "<tool_call>", "</tool_call>", "\n", " ", "Answer:", "answer: x", '{"name": "search", ',
        '"arguments": {"query": ', '"Paris"', "}}", "}", "{", "<function=search>", "<parameter=query>",
        "</parameter>", "</function>", "<", ">", '"', "\\", "null", "[", "]", "Lyon", "é", "\x00",
    ]
)
texts = st.one_of(st.text(max_size=80), st.lists(st.one_of(fragments, st.text(max_size=6)), max_size=14).map("".join))


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, st.sampled_from([None, "json", "xml"]))
def test_parser_never_raises_and_its_verdict_is_consistent(text, family):
    parsed = parse_assistant(text, family=family)
    assert parsed.kind in {"tool", "answer", "invalid"}
    if parsed.kind == "tool":
        assert parsed.query and parsed.query == parsed.query.strip()
        assert "<" not in parsed.query and ">" not in parsed.query
        assert text.count("<tool_call>") == 1 and text.rstrip().endswith("</tool_call>")
    if parsed.kind == "answer":
        assert "<tool_call>" not in text and "</tool_call>" not in text


@settings(max_examples=1500, deadline=None)
@given(st.text(min_size=1, max_size=60))
def test_any_clean_query_round_trips_through_both_formats(query):
    clean = clean_query(query)
    json_call = "<tool_call>\n" + json.dumps({"name": "search", "arguments": {"query": query}}) + "\n</tool_call>"
    parsed = parse_assistant(json_call)
    if not clean or "<" in clean or ">" in clean:
        assert parsed.kind == "invalid"
    else:
        assert parsed.kind == "tool" and parsed.query == clean
        if "\n" not in query and "</" not in query:
            xml = f"<tool_call><function=search><parameter=query>{query}</parameter></function></tool_call>"
            assert parse_assistant(xml).query == clean


# --------------------------------------------------------------------------- prompts


def test_system_prompt_states_the_rules_and_the_budget():
    free = system_prompt()
    assert "exactly one search call per assistant turn" in free and "Answer: <short answer>" in free
    assert "budget" not in free
    assert "at most 2 search calls" in system_prompt(2)
    assert "at most 1 search call " in system_prompt(1)
    off = system_prompt(0)
    assert "switched off" in off and "Answer: <short answer>" in off
    # no search rules or search example that would contradict a zero budget
    assert "tool_call" not in off and "search call" not in off
    assert "<function=search>" in system_prompt(family="xml") and "<function=" not in free
    with pytest.raises(ValueError):
        system_prompt(-1)


def test_worked_example_calls_parse_as_tool_calls():
    for family in ("json", "xml"):
        blocks = re.findall(r"<tool_call>.*?</tool_call>", system_prompt(family=family), re.DOTALL)
        assert [parse_assistant(block, family=family).query for block in blocks] == [
            "The Little Prince author", "Antoine de Saint-Exupery birthplace"
        ]


def test_build_prompt_renders_the_tool_and_ends_on_the_assistant_header(tokenizer):
    messages = build_messages("Where was Saint-Exupery born?", search_budget=3)
    tokens = build_prompt(tokenizer, messages)
    text = tokenizer.decode(tokens)
    assert text.startswith("<|im_start|>system\n")
    assert '"name": "search"' in text and "<tools>" in text
    assert "at most 3 search calls" in text and "Question: Where was Saint-Exupery born?" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert tokens == tokenizer.encode(text, add_special_tokens=False)


def test_template_family_and_stop_sequences(tokenizer):
    assert template_family(tokenizer) == "json"
    assert "<|im_end|>" in stop_sequences(tokenizer)


def test_template_family_detects_the_xml_form_and_refuses_toolless_templates():
    class Fake:
        chat_template = "{% for t in tools %}<tool_call><function={{ t.name }}>{% endfor %}"

    assert template_family(Fake()) == "xml"
    Fake.chat_template = "{{ messages }}"
    with pytest.raises(ValueError, match="cannot render tools"):
        template_family(Fake())


def test_tool_message_renders_as_a_tool_response(tokenizer):
    messages = [*build_messages("q"), {"role": "assistant", "content": JSON_CALL},
                tool_message("search-0-0-1", "[1] Title: Lyon")]
    text = tokenizer.decode(build_prompt(tokenizer, messages))
    assert "<tool_response>\n[1] Title: Lyon\n</tool_response>" in text
    assert SEARCH_TOOL["function"]["name"] == "search"


# --------------------------------------------------------------------------- hostile turns


def json_call(query_json: str) -> str:
    return '<tool_call>\n{"name": "search", "arguments": {"query": ' + query_json + '}}\n</tool_call>'


@pytest.mark.parametrize("query_json", ['"\\ud83d x"', '"x \\udc00"', '"\\udfff"'])
def test_a_lone_surrogate_in_a_query_makes_the_turn_invalid(query_json):
    parsed = parse_assistant(json_call(query_json))
    assert parsed.kind == "invalid" and "surrogate" in parsed.error
    json.dumps(parsed.content, ensure_ascii=False).encode("utf-8")  # a writer can store the turn


def test_a_lone_surrogate_elsewhere_in_a_turn_is_replaced():
    parsed = parse_assistant("Answer: Par\ud83dis")
    assert parsed.kind == "answer" and parsed.content == "Answer: Par\ufffdis"
    parsed = parse_assistant("thinking \udc00 " + json_call('"paris"'))
    assert parsed.kind == "tool" and parsed.content == "thinking \ufffd" and parsed.query == "paris"


@pytest.mark.parametrize("query", ["\u200b", "\u200b\u200b \u200d", "\ufeff\u2060", " \u00ad "])
def test_a_query_of_zero_width_characters_is_empty(query):
    parsed = parse_assistant(json_call(json.dumps(query)))
    assert parsed.kind == "invalid" and parsed.error == "empty query"
    xml = f"<tool_call><function=search><parameter=query>{query}</parameter></function></tool_call>"
    assert parse_assistant(xml).error == "empty query"


def test_zero_width_characters_around_a_query_are_dropped():
    assert parse_assistant(json_call(json.dumps("\u200bLyon\u200b"))).query == "Lyon"


@pytest.mark.parametrize("text", ["<tool_call>" * 20_000, "</tool_call>" * 20_000,
                                  "<tool_call>x</tool_call>" * 10_000, "<tool_call>" * 10_000 + "</tool_call>"])
def test_the_parser_is_linear_in_the_number_of_tags(text):
    import time

    started = time.perf_counter()
    parsed = parse_assistant(text)
    took = time.perf_counter() - started
    assert parsed.kind == "invalid"
    # a parser that rescans from every tag needs tens of seconds here; a linear one milliseconds
    assert took < 3.0, f"{len(text):,} characters took {took:.1f}s"
