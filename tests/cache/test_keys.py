"""What the cache keys see in a request, and how a stream becomes one stored answer."""

from __future__ import annotations

from typing import Any

from localgate.cache.keys import cache_key
from localgate.config import CacheSettings
from localgate.gemini.streams import merge_stream

SETTINGS = CacheSettings.model_validate({"semantic": {"enabled": True}})


def ask(text: str, **rest: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **rest}


def test_numbers_placeholders_and_allowed_values_must_match_in_order() -> None:
    def fingerprint(text: str, kept: tuple[str, ...] = ()) -> str:
        return cache_key(ask(text), "models/m", SETTINGS, kept).fingerprint

    base = fingerprint("Move 5 from [PERSON_1] to [PERSON_2]")

    assert fingerprint("move 5 from [PERSON_1] to [PERSON_2]!") == base  # wording only
    assert fingerprint("Move 5 from [PERSON_2] to [PERSON_1]") != base
    assert fingerprint("Move 6 from [PERSON_1] to [PERSON_2]") != base
    assert fingerprint("mail a@x.cn", ("a@x.cn",)) != fingerprint("mail b@x.cn", ("b@x.cn",))


def test_only_deterministic_requests_without_tools_are_replayed() -> None:
    cold = {"generationConfig": {"temperature": 0}}

    assert cache_key(ask("hi", **cold), "models/m", SETTINGS).semantic
    assert not cache_key(ask("hi"), "models/m", SETTINGS).semantic
    assert not cache_key(ask("hi", generationConfig={"temperature": 0.2}), "m", SETTINGS).semantic
    assert not cache_key(ask("hi", **cold, tools=[{"x": 1}]), "models/m", SETTINGS).semantic


def test_the_exact_key_covers_the_model_and_every_setting() -> None:
    body = ask("hi", generationConfig={"temperature": 0})

    keys = {
        cache_key(body, "models/a", SETTINGS).exact,
        cache_key(body, "models/b", SETTINGS).exact,
        cache_key({**body, "safetySettings": [{"category": "x"}]}, "models/a", SETTINGS).exact,
        cache_key(
            {**body, "systemInstruction": {"parts": [{"text": "s"}]}}, "models/a", SETTINGS
        ).exact,
    }

    assert len(keys) == 4


def test_a_stream_merges_into_one_answer_per_candidate() -> None:
    events = [
        {"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": "Hel"}]}}]},
        {
            "candidates": [
                {"index": 0, "content": {"parts": [{"text": "lo", "thought": True}]}},
                {"index": 1, "content": {"parts": [{"text": "Other"}]}},
            ]
        },
        {
            "candidates": [
                {"index": 0, "content": {"parts": [{"text": " more", "thought": True}]}},
                {"index": 0, "content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]}},
            ]
        },
        {
            "candidates": [
                {"index": 0, "finishReason": "STOP"},
                {"index": 1, "finishReason": "STOP"},
            ],
            "usageMetadata": {"totalTokenCount": 9},
            "modelVersion": "v1",
        },
    ]

    merged = merge_stream(events)

    first, second = merged["candidates"]
    assert first["content"]["parts"] == [
        {"text": "Hel"},
        {"text": "lo more", "thought": True},
        {"functionCall": {"name": "f", "args": {}}},
    ]
    assert first["content"]["role"] == "model"
    assert first["finishReason"] == second["finishReason"] == "STOP"
    assert second["content"]["parts"] == [{"text": "Other"}]
    assert merged["usageMetadata"] == {"totalTokenCount": 9}
    assert merged["modelVersion"] == "v1"
