"""The Gemini ↔ OpenAI translation of the kind: openai upstream, field by field, and round
trips under hypothesis: Gemini request → OpenAI request → (an echoing server, whole or
chunked anywhere) → Gemini answer keeps every field the mapping claims to keep."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localgate.errors import InvalidArgument, UpstreamBadResponse
from localgate.upstream.openai_answer import ChunkTranslator, gemini_answer, usage_metadata
from localgate.upstream.openai_request import chat_request, embeddings_request, json_schema

texts = st.text(min_size=1, max_size=40)
names = st.from_regex(r"[a-z][a-z_]{0,15}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(names, json_values, max_size=4)


@st.composite
def conversations(draw: st.DrawFn) -> dict[str, Any]:
    """A Gemini request: user turns, model turns with text or function calls, and the
    function responses answering them, with a system instruction and generation config."""
    contents: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 2))):
        contents.append({"role": "user", "parts": [{"text": draw(texts)}]})
        calls = draw(st.lists(st.tuples(names, arguments), max_size=3))
        if calls:
            contents.append(
                {
                    "role": "model",
                    "parts": [{"functionCall": {"name": n, "args": a}} for n, a in calls],
                }
            )
            contents.append(
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"name": n, "response": {"result": draw(json_values)}}}
                        for n, _ in calls
                    ],
                }
            )
        else:
            contents.append({"role": "model", "parts": [{"text": draw(texts)}]})
    contents.append({"role": "user", "parts": [{"text": draw(texts)}]})
    body: dict[str, Any] = {"contents": contents}
    if draw(st.booleans()):
        body["systemInstruction"] = {"parts": [{"text": draw(texts)}]}
    config = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "temperature": st.floats(0, 2),
                "topP": st.floats(0, 1),
                "maxOutputTokens": st.integers(1, 8192),
                "stopSequences": st.lists(texts, max_size=3),
                "candidateCount": st.integers(1, 4),
                "seed": st.integers(0, 2**31),
                "presencePenalty": st.floats(-2, 2),
                "frequencyPenalty": st.floats(-2, 2),
            },
        )
    )
    if config:
        body["generationConfig"] = config
    return body


def echo(request: dict[str, Any]) -> dict[str, Any]:
    """What an echoing OpenAI-compatible server answers: every user text, and the calls of
    the last assistant message, again."""
    said = "".join(m["content"] for m in request["messages"] if m["role"] == "user")
    calls: list[Any] = next(
        (m["tool_calls"] for m in reversed(request["messages"]) if m.get("tool_calls")), []
    )
    message: dict[str, Any] = {"role": "assistant", "content": said}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-1",
        "model": request["model"],
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def chunked(answer: dict[str, Any], cuts: list[int]) -> list[dict[str, Any]]:
    """``answer`` as stream chunks: its text and each call's arguments cut at ``cuts``."""
    message = answer["choices"][0]["message"]
    base = {"id": answer["id"], "model": answer["model"]}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    text = message["content"]
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    for start, end in itertools.pairwise(points):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": text[start:end]}}]})
    for n, call in enumerate(message.get("tool_calls") or []):
        args = call["function"]["arguments"]
        half = cuts[0] % (len(args) + 1) if cuts else 0
        for piece, first in ((args[:half], True), (args[half:], False)):
            delta: dict[str, Any] = {"index": n, "function": {"arguments": piece}}
            if first:
                delta.update(id=f"srv-{n}", type="function")
                delta["function"]["name"] = call["function"]["name"]
            chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    reason = answer["choices"][0]["finish_reason"]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    chunks.append({**base, "choices": [], "usage": answer["usage"]})
    return chunks


def last_calls(body: dict[str, Any]) -> list[tuple[str, Any]]:
    for content in reversed(body["contents"]):
        calls = [p["functionCall"] for p in content["parts"] if "functionCall" in p]
        if calls:
            return [(c["name"], c["args"]) for c in calls]
    return []


def user_texts(body: dict[str, Any]) -> str:
    return "".join(
        p["text"]
        for c in body["contents"]
        if c["role"] == "user"
        for p in c["parts"]
        if "text" in p
    )


@settings(max_examples=150, deadline=None)
@given(conversations())
def test_a_request_keeps_its_texts_calls_results_and_settings(body: dict[str, Any]) -> None:
    request = chat_request(body, "local", stream=False)

    messages = request["messages"]
    if "systemInstruction" in body:
        assert messages.pop(0) == {
            "role": "system",
            "content": body["systemInstruction"]["parts"][0]["text"],
        }
    calls_by_id: dict[str, tuple[str, Any]] = {}
    at = 0
    for content in body["contents"]:
        parts = content["parts"]
        if content["role"] == "model":
            message = messages[at]
            at += 1
            assert message["role"] == "assistant"
            calls = [p["functionCall"] for p in parts if "functionCall" in p]
            if calls:
                sent = message["tool_calls"]
                assert [
                    (c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in sent
                ] == [(c["name"], c["args"]) for c in calls]
                calls_by_id.update({c["id"]: (c["function"]["name"], None) for c in sent})
                assert len({c["id"] for c in sent}) == len(sent)
            else:
                assert message["content"] == parts[0]["text"]
        elif "functionResponse" in parts[0]:
            for part in parts:
                message = messages[at]
                at += 1
                assert message["role"] == "tool"
                # Each result answers a call of the previous turn with its name.
                assert calls_by_id[message["tool_call_id"]][0] == part["functionResponse"]["name"]
                assert orjson.loads(message["content"]) == part["functionResponse"]["response"]
        else:
            assert messages[at] == {"role": "user", "content": parts[0]["text"]}
            at += 1
    assert at == len(messages)
    config = body.get("generationConfig", {})
    renamed = {
        "temperature": "temperature",
        "topP": "top_p",
        "maxOutputTokens": "max_tokens",
        "stopSequences": "stop",
        "candidateCount": "n",
        "seed": "seed",
        "presencePenalty": "presence_penalty",
        "frequencyPenalty": "frequency_penalty",
    }
    assert {renamed[k]: v for k, v in config.items()} == {
        k: v for k, v in request.items() if k not in ("model", "messages", "stream")
    }


@settings(max_examples=150, deadline=None)
@given(conversations(), st.lists(st.integers(0, 10_000), max_size=6))
def test_an_echoed_answer_comes_back_whole_and_streamed(
    body: dict[str, Any], cuts: list[int]
) -> None:
    request = chat_request(body, "local-model", stream=False)
    answer = echo(request)
    turn = len(body["contents"])

    whole = gemini_answer(answer, turn, "the upstream")
    translator = ChunkTranslator(turn, "the upstream")
    events = [e for chunk in chunked(answer, cuts) for e in translator.chunk(chunk)]
    events += translator.finish()

    expected_calls = last_calls(body)
    for label, parts, candidate, usage, version in (
        (
            "whole",
            whole["candidates"][0]["content"]["parts"],
            whole["candidates"][0],
            whole["usageMetadata"],
            whole["modelVersion"],
        ),
        (
            "streamed",
            [p for e in events for c in e.get("candidates", []) for p in c["content"]["parts"]],
            events[-1]["candidates"][0],
            events[-1]["usageMetadata"],
            events[-1]["modelVersion"],
        ),
    ):
        text = "".join(p.get("text", "") for p in parts)
        calls = [
            (p["functionCall"]["name"], p["functionCall"]["args"])
            for p in parts
            if "functionCall" in p
        ]
        assert text == user_texts(body), label
        assert calls == expected_calls, label
        assert candidate["finishReason"] == "STOP", label
        assert usage == {"promptTokenCount": 11, "candidatesTokenCount": 7, "totalTokenCount": 18}
        assert version == "local-model", label
        # The answer's calls carry the ids the next request gives them by their place.
        ids = [p["functionCall"]["id"] for p in parts if "functionCall" in p]
        assert ids == [f"call_{turn}_{n}" for n in range(len(ids))], label


def test_a_model_turn_sent_back_without_ids_gets_the_ids_of_the_answer() -> None:
    answer = gemini_answer(
        {
            "model": "m",
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "x", "function": {"name": "f", "arguments": "{}"}},
                            {"id": "y", "function": {"name": "f", "arguments": '{"a": 1}'}},
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        },
        1,
        "u",
    )
    model_turn = answer["candidates"][0]["content"]
    for part in model_turn["parts"]:
        del part["functionCall"]["id"]  # an app that rebuilds the history drops them
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            model_turn,
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "f", "response": {"n": 1}}},
                    {"functionResponse": {"name": "f", "response": {"n": 2}}},
                ],
            },
        ]
    }
    messages = chat_request(body, "m", stream=False)["messages"]

    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_1_0", "call_1_1"]
    assert [m["tool_call_id"] for m in messages[2:]] == ["call_1_0", "call_1_1"]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", "STOP"),
        ("length", "MAX_TOKENS"),
        ("tool_calls", "STOP"),
        ("content_filter", "SAFETY"),
        ("something_new", "OTHER"),
    ],
)
def test_finish_reasons(reason: str, expected: str) -> None:
    answer = {"choices": [{"message": {"content": "x"}, "finish_reason": reason}]}
    assert gemini_answer(answer, 1, "u")["candidates"][0]["finishReason"] == expected


def test_arguments_that_are_not_a_json_object_are_a_malformed_function_call() -> None:
    answer = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{oops"}}],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    candidate = gemini_answer(answer, 1, "u")["candidates"][0]
    assert candidate["finishReason"] == "MALFORMED_FUNCTION_CALL"
    assert candidate["content"]["parts"] == []


def test_usage_keeps_cached_and_reasoning_tokens() -> None:
    usage = usage_metadata(
        {
            "prompt_tokens": 100,
            "completion_tokens": 50,
            "total_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 40},
            "completion_tokens_details": {"reasoning_tokens": 30},
        }
    )
    assert usage == {
        "promptTokenCount": 100,
        "candidatesTokenCount": 20,
        "thoughtsTokenCount": 30,
        "cachedContentTokenCount": 40,
        "totalTokenCount": 150,
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cachedContent": "cachedContents/x"}, "cachedContent"),
        ({"safetySettings": []}, "safetySettings"),
        ({"tools": [{"googleSearch": {}}]}, "tools[0].googleSearch"),
        ({"generationConfig": {"topK": 4}}, "generationConfig.topK"),
        (
            {"generationConfig": {"responseModalities": ["IMAGE"]}},
            "generationConfig.responseModalities",
        ),
        (
            {"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}},
            "generationConfig.thinkingConfig",
        ),
        (
            {"generationConfig": {"responseMimeType": "text/x.enum"}},
            "generationConfig.responseMimeType",
        ),
        (
            {
                "toolConfig": {
                    "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a", "b"]}
                }
            },
            "toolConfig.functionCallingConfig.allowedFunctionNames",
        ),
        (
            {
                "contents": [
                    {"parts": [{"fileData": {"fileUri": "gs://x", "mimeType": "image/png"}}]}
                ]
            },
            "contents[0].parts[0].fileData",
        ),
        (
            {"contents": [{"parts": [{"text": "x", "videoMetadata": {"fps": 1}}]}]},
            "contents[0].parts[0].videoMetadata",
        ),
        (
            {"contents": [{"parts": [{"inlineData": {"mimeType": "audio/wav", "data": "AA=="}}]}]},
            "contents[0].parts[0].inlineData.mimeType",
        ),
        (
            {
                "tools": [
                    {
                        "functionDeclarations": [
                            {"name": "f", "parameters": {"type": "OBJECT", "x-y": 1}}
                        ]
                    }
                ]
            },
            "tools[0].functionDeclarations[0].parameters.x-y",
        ),
    ],
)
def test_what_cannot_be_carried_is_refused_naming_the_field(
    body: dict[str, Any], field: str
) -> None:
    body.setdefault("contents", [{"parts": [{"text": "hi"}]}])
    with pytest.raises(InvalidArgument) as refused:
        chat_request(body, "m", stream=False)
    assert refused.value.message.startswith(f"{field}: ")


def test_images_tool_choice_and_json_mode() -> None:
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "what is this?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
                ],
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}},
        "generationConfig": {
            "responseMimeType": "application/json",
            "thinkingConfig": {"thinkingBudget": 0},
        },
    }
    request = chat_request(body, "m", stream=True)

    assert request["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            ],
        }
    ]
    assert request["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert request["response_format"] == {"type": "json_object"}
    assert request["stream_options"] == {"include_usage": True}


def test_snake_case_fields_are_read_as_google_reads_them() -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "system_instruction": {"parts": [{"text": "sys"}]},
        "generation_config": {"max_output_tokens": 5, "top_p": 0.5},
    }
    request = chat_request(body, "m", stream=False)
    assert request["messages"][0] == {"role": "system", "content": "sys"}
    assert (request["max_tokens"], request["top_p"]) == (5, 0.5)


def test_schemas_become_json_schema() -> None:
    schema = {
        "type": "ARRAY",
        "items": {
            "type": "OBJECT",
            "properties": {"when": {"type": "STRING", "format": "date-time", "nullable": True}},
            "propertyOrdering": ["when"],
            "anyOf": [{"type": "OBJECT"}],
        },
        "minItems": 1,
    }
    assert json_schema(schema, "s") == {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"when": {"type": ["string", "null"], "format": "date-time"}},
            "anyOf": [{"type": "object"}],
        },
        "minItems": 1,
    }


def test_embedding_requests() -> None:
    assert embeddings_request(
        [{"content": {"parts": [{"text": "a"}, {"text": "b"}]}, "outputDimensionality": 8}], "e"
    ) == {"model": "e", "input": ["a\nb"], "encoding_format": "float", "dimensions": 8}
    with pytest.raises(InvalidArgument, match="taskType"):
        embeddings_request(
            [{"content": {"parts": [{"text": "a"}]}, "taskType": "RETRIEVAL_QUERY"}], "e"
        )


def test_answers_that_are_not_chat_completions_are_bad_responses() -> None:
    with pytest.raises(UpstreamBadResponse):
        gemini_answer({"object": "list"}, 1, "u")
    with pytest.raises(UpstreamBadResponse):
        ChunkTranslator(1, "u").chunk(["not", "an", "object"])


def test_references_and_additional_properties() -> None:
    schema = {
        "type": "OBJECT",
        "properties": {"pet": {"ref": "#/defs/Pet"}},
        "additionalProperties": False,
        "defs": {"Pet": {"type": "OBJECT", "additionalProperties": {"type": "INTEGER"}}},
    }
    assert json_schema(schema, "s") == {
        "type": "object",
        "properties": {"pet": {"$ref": "#/$defs/Pet"}},
        "additionalProperties": False,
        "$defs": {"Pet": {"type": "object", "additionalProperties": {"type": "integer"}}},
    }
