"""The tokens a request is expected to use, estimated locally before it leaves.

The estimate is reserved at admission and settled to the answer's ``usageMetadata`` when
the request ends, so it only has to be in the right range: text counts one token per
four characters, except CJK characters (Chinese, Japanese kana, Korean), which count one
each, as Gemini's tokenizer roughly does; each inline or file part (an image, a PDF page)
counts 258 tokens, Gemini's figure for an image. The output is the request's
``generationConfig.maxOutputTokens`` or the tenant's ``default_output_tokens``.
"""

from __future__ import annotations

import re
from typing import Any

from localgate.gemini.routes import GeminiMethod

__all__ = ["estimate_tokens", "text_tokens"]

# CJK ideographs, kana, Hangul, and the CJK punctuation and full-width forms around them.
_CJK = re.compile(
    "[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)
_MEDIA_PART_TOKENS = 258
_MEDIA_KEYS = ("inlineData", "inline_data", "fileData", "file_data")
# The routes whose answers are generated text (and so cost output tokens).
_GENERATING = (GeminiMethod.GENERATE_CONTENT, GeminiMethod.STREAM_GENERATE_CONTENT)


def text_tokens(text: str) -> int:
    """Estimated tokens of ``text``: CJK characters one each, the rest four to a token."""
    if text.isascii():
        return (len(text) + 3) // 4
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


def estimate_tokens(method: GeminiMethod, body: Any, default_output_tokens: int) -> int:
    """The prompt's estimated tokens plus the output the request may generate."""
    prompt = _tokens(body)
    if method not in _GENERATING:
        return prompt
    output = default_output_tokens
    if isinstance(body, dict):
        config = body.get("generationConfig") or body.get("generation_config")
        if isinstance(config, dict):
            declared = config.get("maxOutputTokens", config.get("max_output_tokens"))
            if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0:
                output = declared
    return prompt + output


def _tokens(value: Any) -> int:
    """Every string in the request counts (texts, function declarations, schemas);
    media parts count a fixed amount, whatever their encoded size. Walked with a stack
    rather than recursion: it runs for every limited request."""
    total = 0
    stack = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        item = pop()
        if isinstance(item, str):
            if item.isascii():
                total += (len(item) + 3) // 4
            else:
                total += text_tokens(item)
        elif isinstance(item, dict):
            for key, inner in item.items():
                if key in _MEDIA_KEYS:
                    total += _MEDIA_PART_TOKENS
                else:
                    push(inner)
        elif isinstance(item, list):
            extend(item)
    return total
