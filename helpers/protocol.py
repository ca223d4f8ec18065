"""The tool protocol: how a question becomes a prompt and an assistant turn becomes an action.

The model sees one function, ``search(query)``, rendered by its *own* chat template
(``tools=[SEARCH_TOOL]``), so the call format is the one it was instruction-tuned on:

- ``json`` family (Qwen2.5, and SmolLM2 with the course's ChatML tool template)::

      <tool_call>
      {"name": "search", "arguments": {"query": "..."}}
      </tool_call>

- ``xml`` family (Qwen3.5, the remote model of Happy-LLM §8.3)::

      <tool_call><function=search><parameter=query>...</parameter></function></tool_call>

``parse_assistant`` turns one assistant turn into exactly one of three actions:
``tool`` (one complete call, nothing after it), ``answer`` (no call at all) or ``invalid``
(anything else). Everything here is pure text/token work: no model, no network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from helpers.search.http import clean_query, replace_lone_surrogates, valid_unicode

SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web for evidence.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "a short English search query"}},
            "required": ["query"],
        },
    },
}

Family = Literal["json", "xml"]
END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
_XML_BODY = re.compile(
    r"^\s*<function=([^>\s]+)>\s*<parameter=query>\n?(.*?)\n?</parameter>\s*</function>\s*$", re.DOTALL
)


@dataclass(frozen=True)
class ParsedAssistant:
    kind: Literal["tool", "answer", "invalid"]
    content: str
    query: str | None = None
    error: str | None = None  # why a turn is invalid, for the widgets and the notebooks


# --------------------------------------------------------------------------- prompts


def call_text(query: str, family: Family = "json") -> str:
    """A search call as the policy writes it, in the chat template's call format."""
    if family == "xml":
        return f"<tool_call><function=search><parameter=query>{query}</parameter></function></tool_call>"
    return "<tool_call>\n" + json.dumps({"name": "search", "arguments": {"query": query}}) + "\n</tool_call>"


def system_prompt(search_budget: int | None = None, family: Family = "json") -> str:
    """The rules of the game, with one worked example in the model's own call format.

    ``search_budget`` states a hard limit on calls (budget-forced evaluation); None states none.
    """
    if search_budget is not None and search_budget < 0:
        raise ValueError(f"search_budget must be >= 0, got {search_budget}")
    answer_rule = (
        "- When you are ready, end with exactly one line of the form `Answer: <short answer>` "
        "(a few words, no explanation on that line)."
    )
    if search_budget == 0:
        # No search rules and no search example: they would contradict the budget.
        return "\n".join(
            [
                "You answer factual questions.",
                "Rules:",
                "- Searching is switched off for this question: answer from what you know, "
                "without calling any tool.",
                answer_rule,
            ]
        )
    if search_budget is None:
        budget = "You may search several times, each time with a short English query."
    else:
        calls = "call" if search_budget == 1 else "calls"
        budget = (
            f"You have a budget of at most {search_budget} search {calls} for this question, "
            "each with a short English query; after that, answer with what you have."
        )
    return "\n".join(
        [
            "You answer factual questions and can use a search tool.",
            "Rules:",
            "- Search whenever you need evidence you are not sure of. " + budget,
            "- Make exactly one search call per assistant turn, then stop and wait for its result "
            "before you search again.",
            answer_rule,
            "- Never put a search call and the final answer in the same turn.",
            "",
            "Example. Question: What country was the author of The Little Prince born in?",
            "Turn 1 (you): " + call_text("The Little Prince author", family),
            "Tool result: Antoine de Saint-Exupery wrote The Little Prince ...",
            "Turn 2 (you): " + call_text("Antoine de Saint-Exupery birthplace", family),
            "Tool result: He was born in Lyon, France ...",
            "Turn 3 (you): Answer: France",
        ]
    )


def build_messages(question: str, search_budget: int | None = None, family: Family = "json") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system_prompt(search_budget, family)},
        {"role": "user", "content": f"Question: {question.strip()}"},
    ]


def template_family(tokenizer: Any) -> Family:
    """``xml`` when the chat template writes Qwen3.5-style ``<function=...>`` calls, else ``json``."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # several named templates
        template = " ".join(str(v) for v in template.values())
    if "<function=" in template:
        return "xml"
    if "tools" not in template:
        raise ValueError(
            "this tokenizer's chat template cannot render tools. Fix: load it with "
            "helpers.models.load_tokenizer(name), which installs the course's ChatML tool template."
        )
    return "json"


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    text = tokenizer.apply_chat_template(
        messages, tools=[SEARCH_TOOL], add_generation_prompt=add_generation_prompt, tokenize=False
    )
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not str")
    return text


def encode_rendered(tokenizer: Any, text: str) -> list[int]:
    """Token ids of rendered chat text: no BOS, the template already wrote every special token."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def render_tokens(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool) -> list[int]:
    return encode_rendered(tokenizer, render_chat(tokenizer, messages, add_generation_prompt))


def build_prompt(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """Token ids of the conversation so far, ending with the template's assistant header."""
    return render_tokens(tokenizer, messages, add_generation_prompt=True)


def stop_sequences(tokenizer: Any) -> list[str]:
    """End-of-turn strings the sampler stops on (only those that are one token in this vocabulary).

    The sampler may return the stop token or stop just before it; ``build_next_prompt``
    accepts both.
    """
    found = []
    for candidate in [getattr(tokenizer, "eos_token", None), *END_OF_TURN_TOKENS]:
        if not candidate or candidate in found:
            continue
        ids = tokenizer.encode(candidate, add_special_tokens=False)
        if len(ids) == 1 and tokenizer.decode(ids) == candidate:
            found.append(candidate)
    if not found:
        raise ValueError("the tokenizer has no single-token end-of-turn marker; cannot stop turns")
    return found


def stop_token_ids(tokenizer: Any) -> list[int]:
    return [tokenizer.encode(s, add_special_tokens=False)[0] for s in stop_sequences(tokenizer)]


def tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "search", "content": content}


# --------------------------------------------------------------------------- parsing


def _query_from_json(body: str) -> tuple[str | None, str | None]:
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return None, "tool call is not valid JSON"
    if not isinstance(call, dict):
        return None, "tool call JSON is not an object"
    if call.get("name") != "search":
        return None, f"unknown tool {str(call.get('name'))[:40]!r}"
    arguments = call.get("arguments")
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None, "tool arguments are not valid JSON"
    if not isinstance(arguments, dict) or not isinstance(arguments.get("query"), str):
        return None, "tool call has no string argument 'query'"
    return arguments["query"], None


def _query_from_xml(body: str) -> tuple[str | None, str | None]:
    match = _XML_BODY.match(body)
    if match is None:
        return None, "tool call is not <function=search><parameter=query>…"
    if match.group(1) != "search":
        return None, f"unknown tool {match.group(1)[:40]!r}"
    return match.group(2), None


def _blocks(text: str) -> tuple[int, int] | None | str:
    """Where the first complete ``<tool_call>…</tool_call>`` block is, found with plain scans.

    Returns (start, end) of the first block, None when there is none, or "several" when a second
    complete block follows it. Each ``find`` scans forward from the last hit, so the cost is
    linear in the text however many tags it holds (a regex retried at every opening tag is not).
    """
    start = text.find(OPEN_TAG)
    if start < 0:
        return None
    close = text.find(CLOSE_TAG, start + len(OPEN_TAG))
    if close < 0:
        return None
    end = close + len(CLOSE_TAG)
    again = text.find(OPEN_TAG, end)
    if again >= 0 and text.find(CLOSE_TAG, again + len(OPEN_TAG)) >= 0:
        return "several"
    return start, end


def parse_assistant(text: str, family: Family | None = None) -> ParsedAssistant:
    """One assistant turn -> ``tool`` / ``answer`` / ``invalid``. Never raises; linear time.

    ``family`` None accepts either call format (the tag names are shared). Text that is not
    valid Unicode (lone surrogates) never leaves the parser: such a query makes the turn invalid,
    and elsewhere in the turn they become U+FFFD, so every later writer can encode the turn.
    """
    text = text if isinstance(text, str) else str(text)
    text = replace_lone_surrogates(text)
    stripped = text.strip()
    found = _blocks(text)
    if found is None:
        if OPEN_TAG in text or CLOSE_TAG in text:
            return ParsedAssistant("invalid", stripped, error="broken or unfinished <tool_call>")
        return ParsedAssistant("answer", stripped)
    if found == "several":
        return ParsedAssistant("invalid", stripped, error="more than one tool call in one turn")
    start, end = found
    if text[end:].strip():
        return ParsedAssistant("invalid", stripped, error="text after the tool call")
    before = text[:start]
    body = text[start + len(OPEN_TAG): end - len(CLOSE_TAG)]
    if CLOSE_TAG in before or OPEN_TAG in body:
        return ParsedAssistant("invalid", stripped, error="broken or nested <tool_call>")
    xml = family == "xml" or (family != "json" and body.lstrip().startswith("<function="))
    query, error = (_query_from_xml if xml else _query_from_json)(body)
    if query is None:
        return ParsedAssistant("invalid", stripped, error=error)
    if not valid_unicode(query):
        return ParsedAssistant("invalid", stripped, error="query holds a lone surrogate (not valid Unicode)")
    query = clean_query(query)
    if not query:
        return ParsedAssistant("invalid", stripped, error="empty query")
    if "<" in query or ">" in query:
        return ParsedAssistant("invalid", stripped, error="query holds '<' or '>'")
    return ParsedAssistant("tool", before.strip(), query=query)
