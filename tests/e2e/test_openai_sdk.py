"""The official ``openai`` SDK, pointed at localgate's OpenAI-compatible door, works end to
end against the fake Gemini upstream: the same pipeline, OpenAI's shapes both ways."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import openai
from localgate.testing import FakeGemini
from openai import OpenAI
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, RunningGateway, run_gateway
from tests.e2e.test_cache import CACHE, wait_stored

MOBILE = "13812345678"
Client = Callable[..., OpenAI]
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "lookup_customer",
        "description": "Find a customer by phone",
        "parameters": {"type": "object", "properties": {"phone": {"type": "string"}}},
    },
}


@pytest.fixture
def sdk(gateway: RunningGateway) -> Iterator[Client]:
    """Makes OpenAI SDK clients for the gateway (its key as the bearer token)."""
    made: list[OpenAI] = []

    def make(base: str = "/v1beta/openai/", api_key: str | None = None) -> OpenAI:
        client = OpenAI(
            base_url=gateway.base_url + base,
            api_key=api_key or gateway.key,
            max_retries=0,
            timeout=INFRASTRUCTURE_TIMEOUT_S,
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.mark.parametrize("base", ["/v1beta/openai/", "/openai/v1/", "/proxy/v1beta/openai/"])
def test_unary_chat_completion_is_redacted_and_restored(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini, base: str
) -> None:
    answer = sdk(base).chat.completions.create(
        model="gemini-2.5-flash",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"Call me on {MOBILE}"},
        ],
        temperature=0.2,
        max_tokens=50,
        stop=["END"],
        seed=7,
    )

    assert answer.choices[0].message.content == f"echo: Call me on {MOBILE}"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (8, 5)
    assert answer.usage.total_tokens == 13
    received = upstream.requests[-1]
    assert received.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert gateway.key not in str(received.headers)
    assert MOBILE not in json.dumps(received.body)
    assert received.body["contents"] == [
        {"role": "user", "parts": [{"text": "Call me on [CN_MOBILE_1]"}]}
    ]
    assert received.body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert received.body["generationConfig"] == {
        "maxOutputTokens": 50,
        "temperature": 0.2,
        "stopSequences": ["END"],
        "seed": 7,
    }


def test_the_audit_record_and_access_log_say_openai(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    raw = sdk().chat.completions.with_raw_response.create(
        model="gemini-2.5-flash", messages=[{"role": "user", "content": "hi"}]
    )
    request_id = raw.headers["x-request-id"]

    headers = gateway.audit_headers(request_id)
    assert headers[0]["dialect"] == "openai"
    assert headers[0]["route"] == "generateContent"
    record = gateway.access_record(request_id)
    assert record["dialect"] == "openai"
    assert record["model"] == "models/gemini-2.5-flash"


def test_stream_with_usage_is_restored_across_chunks(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.echo_stream(3)  # the placeholder arrives split over several events

    stream = sdk().chat.completions.create(
        model="gemini-2.5-flash",
        messages=[{"role": "user", "content": f"Ring {MOBILE} now"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == f"Ring {MOBILE} now"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 13
    assert all(c.usage is None for c in chunks[:-1])
    assert MOBILE not in json.dumps(upstream.requests[-1].body)
    assert upstream.requests[-1].path.endswith(":streamGenerateContent")


def test_tools_across_two_turns_map_ids_back_and_keep_signatures(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk()
    upstream.reply_with(
        [
            {
                "functionCall": {"name": "lookup_customer", "args": {"phone": "[CN_MOBILE_1]"}},
                "thoughtSignature": "c2lnLW9uZQ==",
            },
            {"functionCall": {"name": "lookup_customer", "args": {"phone": "[CN_MOBILE_1]"}}},
        ]
    )
    messages: list[Any] = [
        {"role": "user", "content": f"Who has {MOBILE}?"},
    ]
    first = client.chat.completions.create(
        model="gemini-3-pro-preview", messages=messages, tools=[WEATHER_TOOL], tool_choice="auto"
    )

    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    assert len(message.tool_calls) == 2
    call = message.tool_calls[0]
    assert call.type == "function"
    assert json.loads(call.function.arguments) == {"phone": MOBILE}  # restored
    assert message.tool_calls[0].id != message.tool_calls[1].id
    sealed = message.model_dump()["tool_calls"][0]["extra_content"]["google"]["thought_signature"]
    assert sealed != "c2lnLW9uZQ=="  # sealed for the tenant, as on the native door
    sent = upstream.requests[-1].body
    assert sent["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "lookup_customer",
                    "description": "Find a customer by phone",
                    "parametersJsonSchema": WEATHER_TOOL["function"]["parameters"],
                }
            ]
        }
    ]
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}

    upstream.reply_with([{"text": "Customer 42 uses that number."}])
    messages.append(message.model_dump(exclude_none=True))
    for tool_call in message.tool_calls:
        messages.append(
            {
                "role": "tool",
                "tool_call_id": tool_call.id,
                "content": f'{{"customer": 42, "mobile": "{MOBILE}"}}',
            }
        )
    second = client.chat.completions.create(
        model="gemini-3-pro-preview",
        messages=messages,
        tools=[WEATHER_TOOL],
    )

    assert second.choices[0].message.content == "Customer 42 uses that number."
    sent = upstream.requests[-1].body
    assert MOBILE not in json.dumps(sent)
    model_turn, tool_turn = sent["contents"][1], sent["contents"][2]
    assert model_turn["role"] == "model"
    assert model_turn["parts"][0] == {
        "functionCall": {"name": "lookup_customer", "args": {"phone": "[CN_MOBILE_1]"}},
        "thoughtSignature": "c2lnLW9uZQ==",  # opened: the upstream gets its own back
    }
    assert tool_turn["role"] == "user"
    assert [part["functionResponse"]["name"] for part in tool_turn["parts"]] == [
        "lookup_customer",
        "lookup_customer",
    ]
    assert "[CN_MOBILE_1]" in tool_turn["parts"][0]["functionResponse"]["response"]["content"]


def test_streamed_tool_call_deltas_are_restored(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk()
    upstream.reply_with(
        [{"functionCall": {"name": "lookup_customer", "args": {"phone": "[CN_MOBILE_1]"}}}]
    )

    chunks = list(
        client.chat.completions.create(
            model="gemini-2.5-flash",
            messages=[{"role": "user", "content": f"Look up {MOBILE}"}],
            tools=[WEATHER_TOOL],
            stream=True,
        )
    )

    calls = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or ()]
    assert len(calls) == 1
    assert calls[0].index == 0
    assert calls[0].function is not None
    assert json.loads(calls[0].function.arguments or "") == {"phone": MOBILE}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert MOBILE not in json.dumps(upstream.requests[-1].body)
    # The same call gets the same id whether streamed or not.
    unary = client.chat.completions.create(
        model="gemini-2.5-flash",
        messages=[{"role": "user", "content": f"Look up {MOBILE}"}],
        tools=[WEATHER_TOOL],
    )
    assert unary.choices[0].message.tool_calls is not None
    assert unary.choices[0].message.tool_calls[0].id == calls[0].id


def test_json_schema_output(sdk: Client, gateway: RunningGateway, upstream: FakeGemini) -> None:
    schema: Any = {"type": "object", "properties": {"name": {"type": "string"}}}
    upstream.reply_with([{"text": '{"name": "Li Lei"}'}])

    answer = sdk().chat.completions.create(
        model="gemini-2.5-flash",
        messages=[{"role": "user", "content": "Name?"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": schema},
        },
    )

    assert json.loads(answer.choices[0].message.content or "") == {"name": "Li Lei"}
    config = upstream.requests[-1].body["generationConfig"]
    assert config == {"responseMimeType": "application/json", "responseJsonSchema": schema}


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("MAX_TOKENS", "length"),
        ("MALFORMED_FUNCTION_CALL", "malformed_function_call"),
    ],
)
def test_finish_reasons_are_not_stop(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini, reason: str, expected: str
) -> None:
    upstream.reply_with([{"text": "partial"}], finish_reason=reason)

    answer = sdk().chat.completions.create(
        model="gemini-2.5-flash", messages=[{"role": "user", "content": "x"}]
    )

    assert answer.choices[0].finish_reason == expected
    assert answer.choices[0].model_dump()["extra_content"] == {"google": {"finish_reason": reason}}


def test_usage_counts_cached_and_reasoning_tokens(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.reply_with(
        [{"text": "done"}],
        usage={
            "promptTokenCount": 100,
            "cachedContentTokenCount": 60,
            "candidatesTokenCount": 10,
            "thoughtsTokenCount": 30,
            "totalTokenCount": 140,
        },
    )

    usage = (
        sdk()
        .chat.completions.create(
            model="gemini-2.5-flash",
            messages=[{"role": "user", "content": "x"}],
            reasoning_effort="low",
        )
        .usage
    )

    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (100, 40, 140)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 60
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 30
    config = upstream.requests[-1].body["generationConfig"]
    assert config == {"thinkingConfig": {"thinkingBudget": 1024}}


def test_image_parts_follow_the_binary_data_policy(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()

    with pytest.raises(openai.BadRequestError) as refused:
        sdk().chat.completions.create(
            model="gemini-2.5-flash",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
                    ],
                }
            ],
        )

    # The default policy refuses binary data it cannot scan, in OpenAI's shape.
    assert refused.value.status_code in (400, 403)
    assert upstream.requests == []


def test_embeddings_as_floats_and_base64(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk()

    floats = client.embeddings.create(
        model="gemini-embedding-001", input=[f"call {MOBILE}", "second"], encoding_format="float"
    )
    default = client.embeddings.create(model="gemini-embedding-001", input="one")

    assert [item.index for item in floats.data] == [0, 1]
    assert floats.data[1].embedding == pytest.approx([0.1, 0.2, 0.3])
    assert default.data[0].embedding == pytest.approx([0.0, 0.2, 0.3])  # base64 on the wire
    sent = upstream.requests[-2]
    assert sent.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert MOBILE not in json.dumps(sent.body)


def test_models_list_and_retrieve(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk()

    ids = [model.id for model in client.models.list()]
    one = client.models.retrieve("gemini-2.5-flash")

    assert ids == ["gemini-2.5-flash", "gemini-embedding-001"]
    assert one.id == "gemini-2.5-flash"
    assert one.object == "model"


# -- errors ---------------------------------------------------------------------------------


def _error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]  # type: ignore[no-any-return]


def test_an_unknown_key_is_401_in_openai_shape(sdk: Client, gateway: RunningGateway) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(api_key="lg-not-a-key").chat.completions.create(
            model="gemini-2.5-flash", messages=[{"role": "user", "content": "x"}]
        )

    assert refused.value.status_code == 401
    error = _error(refused.value.response)
    assert error["type"] == "authentication_error"


def test_an_unsupported_parameter_is_named(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk().chat.completions.create(
            model="gemini-2.5-flash",
            messages=[{"role": "user", "content": "x"}],
            logit_bias={"50256": -100},
        )

    error = _error(refused.value.response)
    assert error["param"] == "logit_bias"
    assert error["code"] == "unsupported_parameter"
    assert error["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_an_unknown_tool_call_id_is_refused(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk().chat.completions.create(
            model="gemini-2.5-flash",
            messages=[
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "call_nowhere", "content": "42"},
            ],
        )

    assert _error(refused.value.response)["param"] == "messages[1].tool_call_id"


def test_unknown_route_404_wrong_method_405(gateway: RunningGateway) -> None:
    auth = {"authorization": f"Bearer {gateway.key}"}
    with gateway.client(headers=auth) as client:
        missing = client.post("/v1beta/openai/completions", json={})
        wrong = client.get("/v1beta/openai/chat/completions")
        files = client.post("/v1beta/openai/files", json={})

    assert (missing.status_code, _error(missing)["type"]) == (404, "not_found_error")
    assert (files.status_code, _error(files)["type"]) == (404, "not_found_error")
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")
    assert _error(wrong)["type"] == "invalid_request_error"


def test_too_large_413_and_dropping_unsupported_parameters(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    config = (
        "server:\n  max_body_bytes: 1000\nopenai:\n  drop_unsupported: true\n"
        "proxy:\n  redaction:\n    binary_data: allow\n"
    )
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        client = OpenAI(
            base_url=gateway.base_url + "/v1beta/openai/", api_key=gateway.key, max_retries=0
        )
        with pytest.raises(openai.APIStatusError) as large:
            client.chat.completions.create(
                model="gemini-2.5-flash", messages=[{"role": "user", "content": "x" * 2000}]
            )
        dropped = client.chat.completions.create(
            model="gemini-2.5-flash",
            messages=[{"role": "user", "content": "hi", "name": "li"}],
            logit_bias={"1": 1},
            parallel_tool_calls=False,
        )
        png = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
        client.chat.completions.create(
            model="gemini-2.5-flash",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
                    ],
                }
            ],
        )
        client.close()

    assert upstream.requests[-1].body["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": png}
    }
    assert large.value.status_code == 413
    assert _error(large.value.response)["type"] == "invalid_request_error"
    assert dropped.choices[0].message.content == "echo: hi"
    assert upstream.requests[-2].body == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def test_upstream_errors_and_their_retry_after_in_openai_shape(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.fail_with(
        429,
        {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}},
        {"retry-after": "7"},
    )

    with pytest.raises(openai.RateLimitError) as limited:
        sdk().chat.completions.create(
            model="gemini-2.5-flash", messages=[{"role": "user", "content": "x"}]
        )

    assert _error(limited.value.response)["type"] == "rate_limit_error"
    assert limited.value.response.headers["retry-after"] == "7"

    upstream.fail_with(500, {"error": {"code": 500, "message": "boom", "status": "INTERNAL"}})
    with pytest.raises(openai.InternalServerError) as failed:
        sdk().chat.completions.create(
            model="gemini-2.5-flash", messages=[{"role": "user", "content": "x"}]
        )
    assert _error(failed.value.response)["type"] == "server_error"


def test_an_upstream_failure_mid_stream_is_an_error_event(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.stream(["one", "two", "three"], error_after=1)

    stream = sdk().chat.completions.create(
        model="gemini-2.5-flash", messages=[{"role": "user", "content": "x"}], stream=True
    )
    received: list[Any] = []
    with pytest.raises(openai.APIError):
        received.extend(stream)

    assert received[0].choices[0].delta.content == "one"


def test_raw_stream_ends_with_done(gateway: RunningGateway, upstream: FakeGemini) -> None:
    with (
        gateway.client(headers={"authorization": f"Bearer {gateway.key}"}) as client,
        client.stream(
            "POST",
            "/v1beta/openai/chat/completions",
            json={
                "model": "gemini-2.5-flash",
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
            },
        ) as response,
    ):
        body = response.read().decode()

    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line for line in body.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert all(event.startswith("data: ") for event in events)


def test_a_revoked_key_and_the_limits_429_in_openai_shape(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    config = "tenants:\n  acme:\n    limits:\n      requests_per_minute: 1\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        client = OpenAI(
            base_url=gateway.base_url + "/openai/v1/", api_key=gateway.key, max_retries=0
        )
        client.chat.completions.create(
            model="gemini-2.5-flash", messages=[{"role": "user", "content": "one"}]
        )
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(
                model="gemini-2.5-flash", messages=[{"role": "user", "content": "two"}]
            )
        keys = gateway.keys()
        revoked = keys.create("acme", "revoked")
        keys.revoke(revoked.key_id)
        keys.close()
        other = OpenAI(
            base_url=gateway.base_url + "/openai/v1/",
            api_key=revoked.key.reveal(),
            max_retries=0,
        )
        with pytest.raises(openai.APIStatusError) as refused:
            other.models.list()
        client.close()
        other.close()

    error = _error(limited.value.response)
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert int(limited.value.response.headers["retry-after"]) >= 1
    assert "x-ratelimit-limit-requests" in limited.value.response.headers
    assert refused.value.status_code == 403
    assert _error(refused.value.response)["type"] == "permission_error"
    assert len(upstream.requests) == 1


def test_a_policy_block_is_400_in_openai_shape(tmp_path: Path, upstream: FakeGemini) -> None:
    config = "proxy:\n  redaction:\n    actions:\n      CN_MOBILE: block\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        client = OpenAI(
            base_url=gateway.base_url + "/v1beta/openai/", api_key=gateway.key, max_retries=0
        )
        with pytest.raises(openai.APIStatusError) as blocked:
            client.chat.completions.create(
                model="gemini-2.5-flash",
                messages=[
                    {"role": "user", "content": "look it up"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": f'{{"p": "{MOBILE}"}}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
                ],
            )
        client.close()

    assert blocked.value.status_code == 400
    assert _error(blocked.value.response)["type"] == "invalid_request_error"
    assert "CN_MOBILE" in str(_error(blocked.value.response)["message"])
    assert upstream.requests == []


def test_personal_data_in_every_field_stays_inside(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    """System, developer, content parts, tool arguments and results, tool descriptions and
    schemas, the response schema and stop sequences: every one is scanned."""
    email = "li.lei@example.com"
    tool: Any = {
        "type": "function",
        "function": {
            "name": "f",
            "description": f"ask {email}",
            "parameters": {"type": "object", "description": MOBILE},
        },
    }
    sdk().chat.completions.create(
        model="gemini-2.5-flash",
        messages=[
            {"role": "system", "content": f"operator {MOBILE}"},
            {"role": "developer", "content": [{"type": "text", "text": email}]},
            {"role": "user", "content": [{"type": "text", "text": f"me: {MOBILE}"}]},
            {
                "role": "assistant",
                "content": f"noted {email}",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "f", "arguments": json.dumps({"n": int(MOBILE)})},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_a",
                "content": [{"type": "text", "text": email}],
            },
        ],
        tools=[tool],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object", "description": email}},
        },
        stop=[MOBILE],
        user=email,
    )

    sent = json.dumps(upstream.requests[-1].body)
    assert MOBILE not in sent
    assert email not in sent
    assert "li.lei" not in sent


def test_a_broken_stream_ends_with_an_error_event_and_no_done(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.stream(["one", "two", "three"], error_after=1)
    with (
        gateway.client(headers={"authorization": f"Bearer {gateway.key}"}) as client,
        client.stream(
            "POST",
            "/v1beta/openai/chat/completions",
            json={
                "model": "gemini-2.5-flash",
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ) as response,
    ):
        events = [event for event in response.read().decode().split("\n\n") if event]

    assert response.status_code == 200
    assert "[DONE]" not in events[-1]
    last = json.loads(events[-1].removeprefix("data: "))
    assert set(last["error"]) == {"message", "type", "param", "code"}
    assert last["error"]["type"] == "server_error"
    first = json.loads(events[0].removeprefix("data: "))
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "one"}
    assert first["usage"] is None


def test_cached_answers_reach_openai_clients_with_their_own_values(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url, config=CACHE) as gateway:
        client = OpenAI(
            base_url=gateway.base_url + "/v1beta/openai/", api_key=gateway.key, max_retries=0
        )

        def ask(mobile: str, *, stream: bool) -> Any:
            return client.chat.completions.with_raw_response.create(
                model="gemini-2.5-flash",
                messages=[{"role": "user", "content": f"客户手机{mobile}，请问话费余额多少？"}],
                temperature=0,
                stream=stream,
            )

        first = ask(MOBILE, stream=False)
        wait_stored(gateway, 1)
        second = ask("13900001111", stream=False)
        streamed = ask("13700002222", stream=True)
        chunks = list(streamed.parse())
        client.close()

    assert first.headers["x-localgate-cache"] == "miss"
    assert second.headers["x-localgate-cache"].startswith("hit")
    assert "13900001111" in (second.parse().choices[0].message.content or "")
    assert MOBILE not in second.text
    assert streamed.headers["x-localgate-cache"].startswith("hit")
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert "13700002222" in text
    assert len(upstream.requests) == 1


def test_a_thought_signature_the_gateway_did_not_seal_is_refused(
    sdk: Client, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    """The signature field is opaque to the redactor: only what the gateway sealed passes."""
    forged = base64.b64encode(f"call {MOBILE}".encode()).decode()
    call: Any = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
        "extra_content": {"google": {"thought_signature": forged}},
    }

    with pytest.raises(openai.BadRequestError) as refused:
        sdk().chat.completions.create(
            model="gemini-3-pro-preview",
            messages=[
                {"role": "user", "content": "go"},
                {"role": "assistant", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "done"},
            ],
        )

    assert "thought signature" in str(_error(refused.value.response)["message"])
    assert upstream.requests == []
