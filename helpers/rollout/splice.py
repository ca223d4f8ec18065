"""Encoding the text a turn adds to a conversation without encoding the conversation again.

A tokenizer backed by HuggingFace ``tokenizers`` first cuts its input at every added token
(``<|im_start|>``, ``<|im_end|>``, ...) that it matches on the raw text, then normalises,
pre-tokenises and merges each piece between those tokens on its own. So when the new text starts
with such a token, the tokens of ``before + after`` are the tokens of ``before`` followed by the
tokens of ``after``: the new turn's tokens cost what the turn costs to encode, however long the
conversation before it. The ChatML templates (Qwen2.5's, the course's for SmolLM2) start every
turn with ``<|im_start|>`` and end it with ``<|im_end|>``, so every seam the rollout needs is one.

`encode_after` gives those tokens only when the tokenizer's own settings make the cut certain,
and None otherwise; the caller then encodes the whole text, which is always right.
"""

from __future__ import annotations

from typing import Any


def _encodes_in_the_backend(tokenizer: Any) -> bool:
    """The Python side hands the text to ``tokenizers`` unchanged: the stock fast tokenizer classes,
    with nothing overriding or wrapping their encoding (a proxy or a patched ``encode`` is refused)."""
    try:
        from transformers import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend as Fast
    except ImportError:  # an older transformers: the same class under its old name
        from transformers import PreTrainedTokenizerBase
        from transformers import PreTrainedTokenizerFast as Fast
    kind = type(tokenizer)
    return (isinstance(tokenizer, Fast) and kind.encode is PreTrainedTokenizerBase.encode
            and kind._encode_plus is Fast._encode_plus and "encode" not in vars(tokenizer)
            and not getattr(tokenizer, "split_special_tokens", True))


def _crosses(before: str, after: str, contents: list[str]) -> bool:
    """Whether some added token's text starts in ``before`` and ends in ``after``: the matcher
    would take it whole in ``before + after``, and the cut between them would not exist."""
    longest = max(map(len, contents))
    if longest < 2:
        return False
    left = before[-(longest - 1):]
    window, seam = left + after[: longest - 1], len(left)
    for content in contents:
        start = window.find(content)
        while start != -1:
            if start < seam < start + len(content):
                return True
            start = window.find(content, start + 1)
    return False


def encode_after(tokenizer: Any, before: str, after: str) -> list[int] | None:
    """``encode(before + after)[len(encode(before)):]`` by encoding ``after`` alone, or None when
    the tokenizer might not cut the text at the seam (then encode the whole text instead).

    The cut is certain when ``after`` opens with an added token matched on the raw text (not
    normalised) that takes no whitespace from its left and is not limited to whole words, no added
    token's text spans the seam, no added token looks at its neighbours' word boundaries, and the
    pre-tokeniser treats every piece alike (a Metaspace ``prepend_scheme`` of ``first`` marks only
    the piece at the start of the text, so it is refused).
    """
    if not _encodes_in_the_backend(tokenizer):
        return None
    backend = tokenizer.backend_tokenizer
    if getattr(backend, "encode_special_tokens", True):
        return None  # special tokens are encoded as text: nothing cuts at them
    pre_tokenizer = backend.pre_tokenizer
    if pre_tokenizer is not None and b'"first"' in pre_tokenizer.__getstate__():
        return None
    added = list(backend.get_added_tokens_decoder().values())
    if not added or any(token.single_word for token in added):
        return None
    opener = max((token for token in added if after.startswith(token.content)), key=lambda t: len(t.content),
                 default=None)
    if opener is None or opener.normalized or opener.lstrip or opener.content[:1].isspace():
        return None
    if _crosses(before, after, [token.content for token in added]):
        return None
    return list(tokenizer.encode(after, add_special_tokens=False))
