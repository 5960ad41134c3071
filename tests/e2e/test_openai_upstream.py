"""An OpenAI-compatible server (the fake vLLM/Ollama on loopback) as an upstream, driven by
the official google-genai SDK through a real gateway: unary, stream, tools over two
turns, JSON schema, embeddings, errors, models.list, /readyz, and the redaction promise
(in-house with redaction off sees the data as written; nothing unredacted ever reaches
an upstream that needs redaction)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pydantic
import pytest
from google import genai
from google.genai import errors, types

from localgate.testing import FakeGemini, FakeOpenAI, ScriptedAnswer
from openai import OpenAI
from tests.conftest import RunningGateway, run_gateway
from tests.e2e.sdk_parts import parts

PHONE = "13812345678"
# Tenants besides acme (the test key's): one kept off the in-house servers, one kept on
# them only.
TENANTS = (
    "tenants:\n  gemini-only: {upstreams: [default]}\n  inhouse-only: {upstreams: [inhouse]}\n"
)


def gateway_config(fake: FakeOpenAI, key_file: Path) -> str:
    return (
        "upstreams:\n"
        "  inhouse:\n"
        "    kind: openai\n"
        f"    base_url: '{fake.base_url}'\n"
        "    redaction: false\n"
        "    models: {gemini-inhouse: qwen2.5-7b-instruct, gemini-mixed: qwen2.5-7b-instruct,"
        " inhouse-embed: nomic-embed-text}\n"
        "  redacted:\n"
        "    kind: openai\n"
        f"    base_url: '{fake.base_url}'\n"
        f"    api_key_file: '{key_file}'\n"
        "    models: {gemini-local: local-model}\n"
        "routes:\n"
        "  - {models: [gemini-inhouse, inhouse-embed], upstream: inhouse}\n"
        "  - {models: gemini-mixed, upstream: inhouse, fallback: [default]}\n"
        "  - {models: gemini-local, upstream: redacted, fallback: [inhouse]}\n"
        "retries: {backoff_initial_s: 0, backoff_max_s: 0}\n" + TENANTS
    )


@pytest.fixture(scope="module")
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake(openai_server: FakeOpenAI) -> FakeOpenAI:
    openai_server.reset()
    return openai_server


@pytest.fixture(scope="module")
def inhouse_gateway(
    openai_server: FakeOpenAI,
    fake_upstream: FakeGemini,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningGateway]:
    data = tmp_path_factory.mktemp("openai-upstream")
    key_file = data.parent / "openai.key"
    key_file.write_text("sk-inhouse-secret\n")
    config = gateway_config(openai_server, key_file)
    with run_gateway(data / "data", fake_upstream.base_url, config=config) as gateway:
        yield gateway


@pytest.fixture
def gateway(
    inhouse_gateway: RunningGateway, fake: FakeOpenAI, upstream: FakeGemini
) -> RunningGateway:
    return inhouse_gateway


def sdk(gateway: RunningGateway, key: str | None = None) -> genai.Client:
    return genai.Client(
        api_key=key or gateway.key,
        http_options=types.HttpOptions(
            base_url=gateway.base_url, api_version="v1beta", retry_options=None
        ),
    )


def sent(fake: FakeOpenAI, path: str = "/v1/chat/completions") -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if r.path == path]


def test_a_unary_answer_comes_back_in_geminis_shape(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    with sdk(gateway) as client:
        answer = client.models.generate_content(
            model="gemini-inhouse",
            contents="Say hello",
            config=types.GenerateContentConfig(
                system_instruction="Be brief.",
                temperature=0.2,
                top_p=0.9,
                max_output_tokens=64,
                stop_sequences=["END"],
                seed=7,
            ),
        )

    assert answer.text == "echo: Say hello"
    assert answer.candidates is not None
    assert answer.candidates[0].finish_reason == types.FinishReason.STOP
    assert answer.model_version == "qwen2.5-7b-instruct"
    assert answer.usage_metadata is not None
    assert answer.usage_metadata.total_token_count
    (body,) = sent(fake)
    assert body["model"] == "qwen2.5-7b-instruct"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello"},
    ]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.2, 0.9, 64)
    assert (body["stop"], body["seed"], body["stream"]) == (["END"], 7, False)


def test_a_stream_arrives_in_pieces_and_ends_with_usage(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    with sdk(gateway) as client:
        events = list(
            client.models.generate_content_stream(
                model="gemini-inhouse", contents="a fairly long sentence to stream back"
            )
        )

    assert len(events) > 3
    assert "".join(e.text or "" for e in events) == "echo: a fairly long sentence to stream back"
    assert events[-1].candidates is not None
    assert events[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert events[-1].usage_metadata is not None
    assert events[-1].usage_metadata.candidates_token_count
    (body,) = sent(fake)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_tools_over_two_turns_pair_each_result_with_its_call(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    weather = types.FunctionDeclaration(
        name="get_weather",
        description="The weather in a city.",
        parameters=types.Schema(
            type=types.Type.OBJECT,
            properties={"city": types.Schema(type=types.Type.STRING)},
            required=["city"],
        ),
    )
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[weather])])
    fake.script(ScriptedAnswer(tool_calls=(("get_weather", '{"city": "Paris"}'),)))
    history: list[types.Content] = [
        types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    ]
    with sdk(gateway) as client:
        first = client.models.generate_content(
            model="gemini-inhouse", contents=history, config=config
        )
        assert first.function_calls is not None
        call = first.function_calls[0]
        assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
        assert first.candidates is not None
        assert first.candidates[0].content is not None
        history.append(first.candidates[0].content)
        # The result without an id, as most apps build it: paired by the call's place.
        history.append(
            types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            name="get_weather", response={"temperature": 21}
                        )
                    )
                ],
            )
        )
        fake.script(ScriptedAnswer(text="It is 21 degrees."))
        second = client.models.generate_content(
            model="gemini-inhouse", contents=history, config=config
        )

    assert second.text == "It is 21 degrees."
    body = sent(fake)[1]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    assistant, tool = body["messages"][1], body["messages"][2]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    }
    assert tool == {
        "role": "tool",
        "tool_call_id": assistant["tool_calls"][0]["id"],
        "content": '{"temperature":21}',
    }


def test_a_streamed_tool_call_arrives_whole(gateway: RunningGateway, fake: FakeOpenAI) -> None:
    fake.script(ScriptedAnswer(tool_calls=(("lookup", '{"id": 42, "deep": {"a": [1, 2]}}'),)))
    with sdk(gateway) as client:
        events = list(
            client.models.generate_content_stream(model="gemini-inhouse", contents="look it up")
        )

    calls = [c for e in events for c in (e.function_calls or [])]
    assert [(c.name, c.args) for c in calls] == [("lookup", {"id": 42, "deep": {"a": [1, 2]}})]


def test_a_json_schema_becomes_the_servers_response_format(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    fake.script(ScriptedAnswer(text='{"name": "Ada", "age": 36}'))
    schema = types.Schema(
        type=types.Type.OBJECT,
        properties={
            "name": types.Schema(type=types.Type.STRING),
            "age": types.Schema(type=types.Type.INTEGER, nullable=True),
        },
        required=["name"],
    )
    with sdk(gateway) as client:
        answer = client.models.generate_content(
            model="gemini-inhouse",
            contents="Who?",
            config=types.GenerateContentConfig(
                response_mime_type="application/json", response_schema=schema
            ),
        )

    assert orjson.loads(answer.text or "") == {"name": "Ada", "age": 36}
    (body,) = sent(fake)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "response",
            "schema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "age": {"type": ["integer", "null"]},
                },
                "required": ["name"],
            },
        },
    }


def test_embeddings_single_and_batched(gateway: RunningGateway, fake: FakeOpenAI) -> None:
    with sdk(gateway) as client:
        one = client.models.embed_content(model="inhouse-embed", contents="hello")
        many = client.models.embed_content(model="inhouse-embed", contents=parts("a", "bcd"))

    assert one.embeddings is not None
    assert one.embeddings[0].values == [5.0, 532 % 97, 1.0]
    assert many.embeddings is not None
    assert [e.values[0] for e in many.embeddings if e.values] == [1.0, 3.0]
    bodies = sent(fake, "/v1/embeddings")
    assert bodies[0]["model"] == "nomic-embed-text"
    assert bodies[0]["input"] == ["hello"]
    assert bodies[1]["input"] == ["a", "bcd"]


def test_count_tokens_is_estimated_without_asking_the_server(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    with sdk(gateway) as client:
        counted = client.models.count_tokens(model="gemini-inhouse", contents="abcdefgh" * 4)

    # The limits' estimate: 32 characters are 8 tokens, and the role "user" one more.
    assert counted.total_tokens == 9
    assert fake.requests == []


def test_what_cannot_be_translated_is_refused_naming_the_field(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    with sdk(gateway) as client, pytest.raises(errors.ClientError) as refused:
        client.models.generate_content(
            model="gemini-inhouse",
            contents="hi",
            config=types.GenerateContentConfig(top_k=3),
        )
    assert refused.value.code == 400
    assert "generationConfig.topK" in (refused.value.message or "")
    pdf = {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}
    response = gateway.generate(
        {"contents": [{"role": "user", "parts": [pdf]}]}, model="gemini-inhouse"
    )
    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "contents[0].parts[0].inlineData.mimeType" in response.json()["error"]["message"]
    assert fake.requests == []


def test_each_upstream_asks_for_its_own_name_of_the_model(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    response = gateway.generate({"contents": [{"parts": [{"text": "x"}]}]}, model="gemini-local")
    assert response.status_code == 200  # mapped: gemini-local -> local-model
    assert sent(fake)[0]["model"] == "local-model"


def test_a_429_is_retried_with_its_retry_after(gateway: RunningGateway, fake: FakeOpenAI) -> None:
    fake.fail_with(
        429, {"error": {"message": "busy", "type": "rate_limit"}}, {"retry-after": "0"}, times=1
    )
    response = gateway.generate({"contents": [{"parts": [{"text": "x"}]}]}, model="gemini-inhouse")
    assert response.status_code == 200, response.text
    assert len(sent(fake)) == 2


def test_a_500_is_a_gemini_error_envelope_naming_the_server(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    fake.fail_with(500, {"object": "error", "message": "CUDA out of memory", "code": 500})
    response = gateway.generate({"contents": [{"parts": [{"text": "x"}]}]}, model="gemini-inhouse")

    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (500, "INTERNAL")
    assert "inhouse" in error["message"]
    assert "CUDA out of memory" in error["message"]
    # Tried twice on the one upstream (attempts_per_upstream), never elsewhere.
    assert len(sent(fake)) == 2


def test_a_body_that_is_not_json_is_a_bad_gateway(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    fake.answer_malformed()
    response = gateway.generate({"contents": [{"parts": [{"text": "x"}]}]}, model="gemini-inhouse")
    assert response.status_code == 502
    assert "not JSON" in response.json()["error"]["message"]


@pytest.mark.parametrize("breaks", ["cut", "error event"])
def test_a_stream_broken_mid_way_ends_in_an_error_not_a_clean_end(
    gateway: RunningGateway, fake: FakeOpenAI, breaks: str
) -> None:
    if breaks == "cut":
        fake.cut_streams_after(3)
    else:
        fake.error_streams_after(3)
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as client:
        response = client.post(
            "/v1beta/models/gemini-inhouse:streamGenerateContent",
            params={"alt": "sse"},
            json={"contents": [{"parts": [{"text": "a long enough text to be cut"}]}]},
        )
    lines = [orjson.loads(x[6:]) for x in response.text.splitlines() if x.startswith("data: ")]
    assert lines[0]["candidates"][0]["content"]["parts"][0]["text"]
    assert "error" in lines[-1]
    assert all("finishReason" not in c for e in lines[:-1] for c in e.get("candidates", []))


def test_in_house_with_redaction_off_gets_the_data_as_written_and_says_so_on_record(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    response = gateway.generate(
        {"contents": [{"parts": [{"text": f"Call me on {PHONE}."}]}]}, model="gemini-inhouse"
    )
    assert response.status_code == 200, response.text
    assert PHONE in orjson.dumps(sent(fake)[0]).decode()
    request_record, _ = gateway.audit_headers(response.headers["x-request-id"])
    assert "redaction: false" in request_record["redaction_skipped"]
    assert "inhouse" in request_record["redaction_skipped"]
    assert gateway.access_record(response.headers["x-request-id"])["redaction"] == "skipped"
    metrics = httpx.get(f"{gateway.base_url}/metrics").text
    assert 'localgate_redaction_skipped_total{upstream="inhouse"}' in metrics


def test_a_route_that_may_fall_back_to_gemini_is_redacted_everywhere(
    gateway: RunningGateway, fake: FakeOpenAI, upstream: FakeGemini
) -> None:
    fake.fail_with(503, {"error": {"message": "down"}})
    response = gateway.generate(
        {"contents": [{"parts": [{"text": f"Call me on {PHONE}."}]}]}, model="gemini-mixed"
    )

    assert response.status_code == 200, response.text
    assert response.headers["x-localgate-upstream"] == "default"
    # The in-house server and the Gemini fallback both got the redacted request.
    assert sent(fake)
    assert all(PHONE not in orjson.dumps(b).decode() for b in sent(fake))
    assert upstream.requests
    assert PHONE not in orjson.dumps(upstream.requests[0].body).decode()
    # ... and the client sees its number again.
    assert PHONE in response.text
    request_record, _ = gateway.audit_headers(response.headers["x-request-id"])
    assert "redaction_skipped" not in request_record


def test_pii_never_reaches_an_openai_upstream_that_keeps_redaction_on(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    with sdk(gateway) as client:
        answer = client.models.generate_content(
            model="gemini-local", contents=f"My number is {PHONE}, remember it."
        )
        streamed = "".join(
            e.text or ""
            for e in client.models.generate_content_stream(
                model="gemini-local", contents=f"Again: {PHONE}"
            )
        )

    assert all(PHONE not in orjson.dumps(body).decode() for body in sent(fake))
    # The echo carried the placeholder, and the gateway restored it for the client.
    assert answer.text == f"echo: My number is {PHONE}, remember it."
    assert streamed == f"echo: Again: {PHONE}"
    assert fake.requests[0].headers["authorization"] == "Bearer sk-inhouse-secret"


def test_models_list_shows_in_house_models_to_tenants_that_may_reach_them(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    def listed(key: str) -> set[str]:
        with gateway.client(headers={"x-goog-api-key": key}) as client:
            response = client.get("/v1beta/models")
        assert response.status_code == 200, response.text
        return {m["name"] for m in response.json()["models"]}

    store = gateway.keys()
    try:
        gemini_only = store.create("gemini-only").key.reveal()
        inhouse_only = store.create("inhouse-only").key.reveal()
    finally:
        store.close()
    with sdk(gateway) as client:
        through_sdk = {m.name for m in client.models.list()}

    everyone = listed(gateway.key)
    assert {"models/gemini-inhouse", "models/gemini-local", "models/inhouse-embed"} <= everyone
    assert through_sdk == everyone
    assert any(
        not name.startswith(("models/gemini-inhouse", "models/inhouse")) for name in everyone
    )
    assert not {"models/gemini-inhouse", "models/gemini-local"} & listed(gemini_only)
    assert listed(inhouse_only) == {
        "models/gemini-inhouse",
        "models/gemini-mixed",
        "models/inhouse-embed",
    }


def test_readyz_shows_the_in_house_servers_health(gateway: RunningGateway) -> None:
    response = httpx.get(f"{gateway.base_url}/readyz")
    checks = response.json()["checks"]
    assert checks["upstream:inhouse"] == "ok"
    assert checks["upstream:redacted"] == "ok"


def test_readyz_shows_a_server_that_is_down_as_degraded(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with FakeOpenAI() as stopped:
        url = stopped.base_url
    config = f"upstreams:\n  inhouse: {{kind: openai, base_url: '{url}'}}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        response = httpx.get(f"{gateway.base_url}/readyz")

    assert response.status_code == 200  # shown, not a reason to leave the load balancer
    assert response.json()["checks"]["upstream:inhouse"].startswith("degraded: ")
    assert "unreachable" in response.json()["checks"]["upstream:inhouse"]


def test_pii_in_tool_arguments_and_results_is_redacted_and_restored(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    email = "ada.lovelace@example.com"
    history = [
        {"role": "user", "parts": [{"text": "Find the customer."}]},
        {"role": "model", "parts": [{"functionCall": {"name": "find", "args": {"phone": PHONE}}}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "find", "response": {"email": email}}}],
        },
    ]
    first = gateway.generate({"contents": history}, model="gemini-local")
    assert first.status_code == 200, first.text
    seen = orjson.dumps(sent(fake)[0]).decode()
    assert PHONE not in seen
    assert email not in seen
    # The server calls a tool with what it saw (the placeholder of the phone number).
    placeholder = orjson.loads(
        sent(fake)[0]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    )
    fake.script(ScriptedAnswer(tool_calls=(("notify", orjson.dumps(placeholder).decode()),)))

    second = gateway.generate({"contents": history}, model="gemini-local")

    assert second.status_code == 200, second.text
    call = second.json()["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert (call["name"], call["args"]) == ("notify", {"phone": PHONE})


class Owner(pydantic.BaseModel):
    name: str


class Pet(pydantic.BaseModel):
    name: str
    tags: list[str]
    owner: Owner | None = None


def test_a_pydantic_schema_from_the_sdk_is_carried_and_parsed(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    fake.script(ScriptedAnswer(text='{"name": "Rex", "tags": ["dog"], "owner": {"name": "Ada"}}'))
    with sdk(gateway) as client:
        answer = client.models.generate_content(
            model="gemini-inhouse",
            contents="A pet, please.",
            config=types.GenerateContentConfig(
                response_mime_type="application/json", response_schema=Pet
            ),
        )

    assert answer.parsed == Pet(name="Rex", tags=["dog"], owner=Owner(name="Ada"))
    schema = sent(fake)[0]["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["name", "tags"]
    assert schema["properties"]["owner"]["type"] == ["object", "null"]
    assert schema["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "title": "Tags",
    }


def test_a_tenant_kept_in_house_is_not_redacted_and_never_falls_back_to_gemini(
    gateway: RunningGateway, fake: FakeOpenAI, upstream: FakeGemini
) -> None:
    store = gateway.keys()
    try:
        kept_in = store.create("inhouse-only").key.reveal()
    finally:
        store.close()
    # gemini-mixed falls back to Gemini, but this tenant may reach only the in-house server:
    # its chain is in-house only, so it is sent as written ...
    ok = gateway.generate(
        {"contents": [{"parts": [{"text": f"Call {PHONE}"}]}]},
        model="gemini-mixed",
        **{"x-goog-api-key": kept_in},
    )
    assert ok.status_code == 200, ok.text
    assert PHONE in orjson.dumps(sent(fake)[0]).decode()
    # ... and when the in-house server fails, nothing goes to Gemini: the client gets the error.
    fake.fail_with(503, {"error": {"message": "down"}})
    failed = gateway.generate(
        {"contents": [{"parts": [{"text": f"Call {PHONE}"}]}]},
        model="gemini-mixed",
        **{"x-goog-api-key": kept_in},
    )
    assert failed.status_code == 503
    assert upstream.requests == []


def test_the_openai_dialect_reaches_an_in_house_openai_server_redacted_and_restored(
    gateway: RunningGateway, fake: FakeOpenAI
) -> None:
    # Both dialects' halves at once: an OpenAI client at the front door, an OpenAI-compatible
    # server behind the gateway, the Gemini-shaped pipeline in between (redaction on).
    client = OpenAI(base_url=f"{gateway.base_url}/v1beta/openai/", api_key=gateway.key)
    try:
        answer = client.chat.completions.create(
            model="gemini-local",
            messages=[{"role": "user", "content": "Call 13812345678 about the refund"}],
        )
        chunks = list(
            client.chat.completions.create(
                model="gemini-local",
                messages=[{"role": "user", "content": "Mail zhang.wei@example.com"}],
                stream=True,
            )
        )
    finally:
        client.close()

    assert answer.choices[0].message.content == "echo: Call 13812345678 about the refund"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == "echo: Mail zhang.wei@example.com"
    bodies = sent(fake)
    assert [body["model"] for body in bodies] == ["local-model", "local-model"]
    text = str(bodies)
    assert "13812345678" not in text
    assert "zhang.wei@example.com" not in text
    assert "[CN_MOBILE_1]" in text
    assert "[EMAIL_1]" in text
