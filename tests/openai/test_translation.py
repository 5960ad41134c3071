"""The translation between OpenAI's chat completions and Gemini's generateContent, checked
where it claims to be lossless: an answer's assistant turn sent back in the next request is
the model turn Gemini gave (text, function calls and their arguments, thought signatures),
and every tool result reaches the function that was called."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localgate.openai.answers import ChatChunks, chat_completion, finish_reason, usage
from localgate.openai.chat import translate_chat_request
from localgate.openai.errors import InvalidParameter

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
FILE_PART = {"type": "file", "file": {"file_id": "f"}}
ARGS = st.dictionaries(st.text(min_size=1, max_size=8), JSON_VALUES, max_size=4)
SIGNATURES = st.none() | st.from_regex(r"[A-Za-z0-9+/]{4,40}={0,2}", fullmatch=True)
TEXT = st.text(min_size=1, max_size=40)


@st.composite
def model_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A model turn as Gemini answers it: optional text, then function calls, each maybe
    with a thought signature (Gemini 3 signs the first)."""
    parts: list[dict[str, Any]] = []
    text = draw(st.none() | TEXT)
    if text is not None:
        parts.append({"text": text})
    for _ in range(draw(st.integers(0 if parts else 1, 4))):
        part: dict[str, Any] = {"functionCall": {"name": draw(NAMES), "args": draw(ARGS)}}
        signature = draw(SIGNATURES)
        if signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _answer(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
    }


def _completion(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return chat_completion(_answer(parts), model="m", completion_id="chatcmpl-x", created=1)


@given(model_turns())
def test_an_assistant_turn_sent_back_is_the_model_turn_gemini_gave(
    parts: list[dict[str, Any]],
) -> None:
    message = _completion(parts)["choices"][0]["message"]
    # As a client sends it back: through JSON, as the SDK serialises it.
    message = json.loads(json.dumps(message))
    request = {
        "model": "gemini-3-pro-preview",
        "messages": [{"role": "user", "content": "go"}, message],
    }

    turns = translate_chat_request(request).body["contents"]

    assert turns[1] == {"role": "model", "parts": parts}


@given(model_turns(), st.lists(TEXT, min_size=4, max_size=4))
def test_every_tool_result_reaches_the_function_called(
    parts: list[dict[str, Any]], results: list[str]
) -> None:
    message = _completion(parts)["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    replies = [
        {"role": "tool", "tool_call_id": call["id"], "content": result}
        for call, result in zip(calls, results, strict=False)
    ]
    request = {"model": "m", "messages": [{"role": "user", "content": "go"}, message, *replies]}

    turns = translate_chat_request(request).body["contents"]

    names = [part["functionCall"]["name"] for part in parts if "functionCall" in part]
    if not replies:
        assert len(turns) == 2
        return
    answered = turns[2]["parts"]
    assert [part["functionResponse"]["name"] for part in answered] == names[: len(replies)]
    assert [part["functionResponse"]["response"]["content"] for part in answered] == results[
        : len(replies)
    ]


@given(model_turns())
def test_a_stream_gives_the_same_calls_and_ids_as_the_unary_answer(
    parts: list[dict[str, Any]],
) -> None:
    unary = _completion(parts)["choices"][0]["message"]
    stream = ChatChunks(model="m", completion_id="chatcmpl-x", created=1)
    chunks = []
    for part in parts:  # one part an event, as a stream may send them
        event = _answer([part])
        del event["candidates"][0]["finishReason"]
        chunks += stream.chunks(event)
    chunks += stream.chunks({"candidates": [{"index": 0, "finishReason": "STOP"}]})

    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    calls = [call for delta in deltas for call in delta.get("tool_calls", ())]
    assert [{k: v for k, v in c.items() if k != "index"} for c in calls] == unary.get(
        "tool_calls", []
    )
    assert [call["index"] for call in calls] == list(range(len(calls)))
    text = "".join(delta.get("content") or "" for delta in deltas)
    assert text == (unary["content"] or "")
    expected = "tool_calls" if calls else "stop"
    assert chunks[-1]["choices"][0]["finish_reason"] == expected


def test_tool_call_ids_are_deterministic_and_distinct_in_one_answer() -> None:
    call = {"functionCall": {"name": "f", "args": {"a": 1}}}
    first = _completion([call, call])["choices"][0]["message"]["tool_calls"]
    again = _completion([call, call])["choices"][0]["message"]["tool_calls"]

    assert [c["id"] for c in first] == [c["id"] for c in again]
    assert first[0]["id"] != first[1]["id"]


@pytest.mark.parametrize(
    ("reason", "calls", "expected"),
    [
        ("STOP", False, "stop"),
        ("STOP", True, "tool_calls"),
        ("MAX_TOKENS", False, "length"),
        ("SAFETY", False, "content_filter"),
        ("RECITATION", False, "content_filter"),
        ("PROHIBITED_CONTENT", False, "content_filter"),
        ("SPII", False, "content_filter"),
        ("MALFORMED_FUNCTION_CALL", False, "malformed_function_call"),
        ("OTHER", False, "other"),
        (None, False, None),
    ],
)
def test_finish_reasons(reason: str | None, calls: bool, expected: str | None) -> None:
    assert finish_reason(reason, calls) == expected


def test_a_blocked_prompt_is_a_content_filter_choice() -> None:
    answer = {"promptFeedback": {"blockReason": "SAFETY"}}

    choice = chat_completion(answer, model="m", completion_id="c", created=1)["choices"][0]

    assert choice["finish_reason"] == "content_filter"
    assert choice["extra_content"] == {"google": {"block_reason": "SAFETY"}}


def test_usage_counts_thoughts_as_completion_and_cached_tokens() -> None:
    found = usage(
        {
            "promptTokenCount": 10,
            "cachedContentTokenCount": 4,
            "candidatesTokenCount": 3,
            "thoughtsTokenCount": 2,
            "totalTokenCount": 15,
        }
    )

    assert found == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }


def test_logprobs_are_mapped() -> None:
    answer = _answer([{"text": "hi"}])
    answer["candidates"][0]["logprobsResult"] = {
        "chosenCandidates": [{"token": "hi", "logProbability": -0.5}],
        "topCandidates": [{"candidates": [{"token": "hi", "logProbability": -0.5}]}],
    }

    choice = chat_completion(answer, model="m", completion_id="c", created=1)["choices"][0]

    assert choice["logprobs"]["content"] == [
        {
            "token": "hi",
            "logprob": -0.5,
            "bytes": [104, 105],
            "top_logprobs": [{"token": "hi", "logprob": -0.5, "bytes": [104, 105]}],
        }
    ]


def test_parameters_map_to_generation_config() -> None:
    request = {
        "model": "models/gemini-2.5-flash",
        "messages": [{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}],
        "max_completion_tokens": 9,
        "top_p": 0.5,
        "n": 2,
        "logprobs": True,
        "top_logprobs": 3,
        "presence_penalty": 0.1,
        "response_format": {"type": "json_object"},
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "reasoning_effort": "none",
        "user": "u-1",
    }

    translated = translate_chat_request(request)

    assert translated.model == "gemini-2.5-flash"
    assert translated.user == "u-1"
    assert translated.body["systemInstruction"] == {"parts": [{"text": "d"}]}
    assert translated.body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}
    }
    assert translated.body["generationConfig"] == {
        "maxOutputTokens": 9,
        "topP": 0.5,
        "presencePenalty": 0.1,
        "candidateCount": 2,
        "responseLogprobs": True,
        "logprobs": 3,
        "thinkingConfig": {"thinkingBudget": 0},
        "responseMimeType": "application/json",
    }


def test_gemini_3_takes_a_thinking_level() -> None:
    request = {
        "model": "gemini-3-pro-preview",
        "messages": [{"role": "user", "content": "u"}],
        "reasoning_effort": "high",
    }

    config = translate_chat_request(request).body["generationConfig"]

    assert config == {"thinkingConfig": {"thinkingLevel": "high"}}


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"functions": []}, "functions"),
        ({"logit_bias": {}}, "logit_bias"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls"),
        ({"store": True}, "store"),
        ({"temperature": 3}, "temperature"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "../../files"}, "model"),
        ({"messages": [{"role": "user", "content": "x", "name": "n"}]}, "messages[0].name"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}
                ]
            },
            "messages[0].content[0].file",
        ),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(change: dict[str, Any], param: str) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "x"}], **change}

    with pytest.raises(InvalidParameter) as refused:
        translate_chat_request(request)

    assert refused.value.param == param


def test_tool_call_arguments_that_are_not_an_object_are_refused() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
    request = {"model": "m", "messages": [{"role": "assistant", "tool_calls": [call]}]}

    with pytest.raises(InvalidParameter) as refused:
        translate_chat_request(request)

    assert refused.value.param == "messages[0].tool_calls[0].function.arguments"
