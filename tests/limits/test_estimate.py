"""The local token estimate reserved at admission."""

from __future__ import annotations

from localgate.gemini.routes import GeminiMethod
from localgate.limits import estimate_tokens, text_tokens


def test_latin_text_counts_four_characters_a_token_and_cjk_one_each() -> None:
    assert text_tokens("a" * 40) == 10
    assert text_tokens("你好世界") == 4
    assert text_tokens("身份证 ok") == 3 + 1  # three ideographs; " ok" is three characters


def test_the_output_reserved_is_max_output_tokens_or_the_default() -> None:
    body = {"contents": [{"parts": [{"text": "a" * 40}]}]}
    capped = {**body, "generationConfig": {"maxOutputTokens": 100}}

    assert estimate_tokens(GeminiMethod.GENERATE_CONTENT, body, 2048) == 10 + 2048
    assert estimate_tokens(GeminiMethod.STREAM_GENERATE_CONTENT, capped, 2048) == 10 + 100
    assert estimate_tokens(GeminiMethod.COUNT_TOKENS, capped, 2048) == 10  # no output


def test_a_media_part_counts_a_fixed_amount_whatever_its_size() -> None:
    image = {"inlineData": {"mimeType": "image/png", "data": "A" * 1_000_000}}
    body = {"contents": [{"parts": [image]}]}

    assert estimate_tokens(GeminiMethod.GENERATE_CONTENT, body, 0) == 258
