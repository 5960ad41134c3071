"""Personal data in the forms and places an app did not mean to hide it in — escaped,
percent-encoded, split by invisible characters, in the path, the query and opaque fields —
never reaches the upstream: through the real gateway, checked on what the upstream got."""

from __future__ import annotations

import base64
import contextlib
import html
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway
from tests.e2e.sdk_parts import parts

PHONE = "13812345678"
RESIDENT_ID = "11010519491231002X"
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
# What json.dumps makes of a customer record: every Chinese character as \uXXXX.
ESCAPED = json.dumps({"客户": "张伟", "手机": PHONE, "身份证": RESIDENT_ID})
SIGNATURE = base64.b64encode(b"upstream thought state").decode()
INVISIBLE = re.compile("[\u200b-\u200f\u2060-\u2064\ufeff\u00ad]")


def sent(upstream: FakeGemini) -> str:
    """Everything the upstream received in its last request, in every form a model could
    read it, decoded here independently of the gateway's own decoder."""
    if not upstream.requests:
        return ""
    request = upstream.requests[-1]
    strings = [request.path, urllib.parse.urlencode(request.query), *_strings(request.body)]
    readable: list[str] = []
    for text in strings:
        forms = {text, urllib.parse.unquote(text), html.unescape(text)}
        with contextlib.suppress(ValueError):
            forms.add(json.loads(f'"{text}"'))
        with contextlib.suppress(ValueError):
            forms.add(json.dumps(json.loads(text), ensure_ascii=False))
        readable += forms
    return INVISIBLE.sub("", "\n".join(readable))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            if key == "data" and isinstance(item, str):
                yield base64.b64decode(item).decode()
            yield from _strings(item)


def assert_nothing_left(upstream: FakeGemini) -> None:
    received = sent(upstream)
    assert received, "the upstream received nothing"
    for value in (PHONE, RESIDENT_ID, "张伟"):
        assert value not in received


def post(gateway: RunningGateway, path: str, body: Any) -> Any:
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as http:
        return http.post(path, json=body)


# -- encodings, in every field and route -------------------------------------------


def test_json_escaped_records_in_the_prompt_via_the_sdk(
    client: genai.Client, upstream: FakeGemini
) -> None:
    answer = client.models.generate_content(
        model="gemini-2.5-flash", contents=f"整理这条记录：{ESCAPED}"
    )

    assert_nothing_left(upstream)
    prompt = upstream.requests[-1].body["contents"][0]["parts"][0]["text"]
    record = json.loads(prompt.removeprefix("整理这条记录："))
    assert record == {"客户": "[PERSON_1]", "手机": "[CN_MOBILE_1]", "身份证": "[CN_RESIDENT_ID_1]"}
    # The answer gets the values back, readable.
    assert PHONE in (answer.text or "")
    assert "张伟" in (answer.text or "")


@pytest.mark.parametrize(
    "body",
    [
        {
            "systemInstruction": {"parts": [{"text": ESCAPED}]},
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        },
        {
            "contents": [
                {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                {
                    "role": "user",
                    "parts": [{"functionResponse": {"name": "f", "response": {"raw": ESCAPED}}}],
                },
            ]
        },
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {
                            "inlineData": {
                                "mimeType": "application/json",
                                "data": base64.b64encode(ESCAPED.encode()).decode(),
                            }
                        }
                    ],
                }
            ]
        },
        {"contents": [{"role": "user", "parts": [{"text": "回电 1381\u200b2345\u2060678"}]}]},
        {"contents": [{"parts": [{"text": f"https://crm.example.com/c?p=%2B86{PHONE}"}]}]},
        {"contents": [{"parts": [{"text": "&#49;&#51;&#56;12345678"}]}]},
        {"contents": [{"parts": [{"text": json.dumps(json.dumps({"m": PHONE, "n": "张伟"}))}]}]},
    ],
    ids=["system", "function-response", "json-blob", "invisible", "url", "references", "twice"],
)
def test_every_field_sees_through_every_encoding(
    gateway: RunningGateway, upstream: FakeGemini, body: dict[str, Any]
) -> None:
    response = post(gateway, GENERATE, body)

    assert response.status_code == 200, response.text
    assert_nothing_left(upstream)


def test_a_stream_of_an_escaped_prompt(gateway: RunningGateway, upstream: FakeGemini) -> None:
    upstream.echo_stream(3)

    response = post(gateway, STREAM, {"contents": [{"parts": [{"text": ESCAPED}]}]})

    assert_nothing_left(upstream)
    events = [
        json.loads(line.removeprefix("data: "))
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]
    text = "".join(e["candidates"][0]["content"]["parts"][0]["text"] for e in events)
    assert json.loads(text) == {"客户": "张伟", "手机": PHONE, "身份证": RESIDENT_ID}


def test_embeddings_and_token_counts_of_escaped_text(
    client: genai.Client, upstream: FakeGemini
) -> None:
    client.models.embed_content(model="gemini-embedding-001", contents=parts(ESCAPED))
    assert_nothing_left(upstream)
    client.models.count_tokens(model="gemini-2.5-flash", contents=ESCAPED)
    assert_nothing_left(upstream)


# -- the path and the query -----------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [PHONE, f"gemini-{PHONE}", "zhang.wei@example.com", f"%31%33%38{PHONE[3:]}"],
)
def test_personal_data_in_the_model_name_is_refused_and_not_recorded(
    gateway: RunningGateway, upstream: FakeGemini, model: str
) -> None:
    response = post(
        gateway,
        f"/v1beta/models/{model}:generateContent",
        {"contents": [{"parts": [{"text": "hi"}]}]},
    )

    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "model name" in response.json()["error"]["message"]
    assert upstream.requests == []
    request_id = response.headers["x-request-id"]
    record = gateway.access_record(request_id)
    audit = gateway.audit_headers(request_id, count=1)
    for value in (PHONE, "zhang.wei"):
        assert value not in json.dumps(record)
        assert value not in json.dumps(audit)
        assert value not in response.text


def test_a_model_name_outside_the_grammar_is_a_400(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    response = post(gateway, "/v1beta/models/gemini%20pro:generateContent", {"contents": []})

    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert upstream.requests == []


@pytest.mark.parametrize("parameter", ["pageToken", "filter"])
def test_personal_data_in_a_forwarded_query_parameter_is_refused(
    gateway: RunningGateway, upstream: FakeGemini, parameter: str
) -> None:
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as http:
        refused = http.get("/v1beta/models", params={parameter: f"c{PHONE}"})
        served = http.get("/v1beta/models", params={"pageToken": "Cg5nZW1pbmktMi41"})

    assert refused.status_code == 400
    assert parameter in refused.json()["error"]["message"]
    assert served.status_code == 200
    assert [dict(r.query) for r in upstream.requests] == [{"pageToken": "Cg5nZW1pbmktMi41"}]


# -- thought signatures -----------------------------------------------------------


def test_signatures_go_round_trip_through_the_sdk_and_reach_the_upstream_as_issued(
    client: genai.Client, upstream: FakeGemini
) -> None:
    upstream.sign_with(SIGNATURE)
    first = client.models.generate_content(model="gemini-2.5-flash", contents="hello")
    candidate = first.candidates[0] if first.candidates else None
    assert candidate is not None
    assert candidate.content is not None
    received = candidate.content.parts[0].thought_signature if candidate.content.parts else None
    # The client holds a sealed signature, not the upstream's.
    assert received is not None
    assert received != base64.b64decode(SIGNATURE)

    client.models.generate_content(
        model="gemini-2.5-flash",
        contents=[
            types.Content(role="user", parts=[types.Part(text="hello")]),
            candidate.content,
            types.Content(role="user", parts=[types.Part(text="and then?")]),
        ],
    )

    model_turn = upstream.requests[-1].body["contents"][1]["parts"][0]
    assert model_turn["thoughtSignature"] == SIGNATURE


def test_a_streamed_signature_is_sealed_too(gateway: RunningGateway, upstream: FakeGemini) -> None:
    upstream.sign_with(SIGNATURE)

    response = post(gateway, STREAM, {"contents": [{"parts": [{"text": "hi"}]}]})

    signatures = [
        part["thoughtSignature"]
        for line in response.text.splitlines()
        if line.startswith("data: ")
        for part in json.loads(line.removeprefix("data: "))["candidates"][0]["content"]["parts"]
        if "thoughtSignature" in part
    ]
    assert len(signatures) == 1
    assert signatures[0] != SIGNATURE
    back = {
        "contents": [
            {"role": "model", "parts": [{"text": "x", "thoughtSignature": signatures[0]}]},
            {"role": "user", "parts": [{"text": "go on"}]},
        ]
    }
    assert post(gateway, GENERATE, back).status_code == 200
    assert upstream.requests[-1].body["contents"][0]["parts"][0]["thoughtSignature"] == SIGNATURE


def test_data_smuggled_in_a_signature_is_refused(
    client: genai.Client, upstream: FakeGemini
) -> None:
    smuggled = f"客户张伟 {PHONE}".encode()

    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(
            model="gemini-2.5-flash",
            contents=[
                types.Content(
                    role="model", parts=[types.Part(text="x", thought_signature=smuggled)]
                ),
                types.Content(role="user", parts=[types.Part(text="go on")]),
            ],
        )

    assert caught.value.code == 400
    assert "thoughtSignature" in str(caught.value.message)
    assert upstream.requests == []


def test_another_tenants_signature_is_refused(
    tmp_path: Any, upstream: FakeGemini, gateway: RunningGateway
) -> None:
    upstream.sign_with(SIGNATURE)
    answer = post(gateway, GENERATE, {"contents": [{"parts": [{"text": "hi"}]}]}).json()
    sealed = answer["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    other = gateway.keys().create("globex", "tests").key.reveal()
    back = {"contents": [{"role": "model", "parts": [{"text": "x", "thoughtSignature": sealed}]}]}

    with gateway.client(headers={"x-goog-api-key": other}) as http:
        refused = http.post(GENERATE, json=back)

    assert refused.status_code == 400
    assert len(upstream.requests) == 1


def test_the_drop_policy_forwards_the_turn_without_the_foreign_signature(
    tmp_path: Any, upstream: FakeGemini
) -> None:
    config = "proxy:\n  redaction:\n    foreign_signatures: drop\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        back = {
            "contents": [
                {"role": "model", "parts": [{"text": "x", "thoughtSignature": SIGNATURE}]},
                {"role": "user", "parts": [{"text": "go on"}]},
            ]
        }
        response = post(gateway, GENERATE, back)

    assert response.status_code == 200
    assert upstream.requests[-1].body["contents"][0]["parts"][0] == {"text": "x"}


def test_replicas_with_the_same_key_open_each_others_signatures(
    tmp_path: Any, upstream: FakeGemini
) -> None:
    key = base64.b64encode(b"s" * 32).decode()
    upstream.sign_with(SIGNATURE)
    config_a = f"proxy:\n  signature_key_file: {tmp_path / 'shared.key'}\n"
    (tmp_path / "shared.key").write_text(key)
    with run_gateway(tmp_path / "a", upstream.base_url, config=config_a) as first:
        answer = post(first, GENERATE, {"contents": [{"parts": [{"text": "hi"}]}]}).json()
    sealed = answer["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    back = {"contents": [{"role": "model", "parts": [{"text": "x", "thoughtSignature": sealed}]}]}
    with run_gateway(tmp_path / "b", upstream.base_url, config=config_a) as second:
        # Another replica's tenant "acme" with the shared key: opens.
        assert post(second, GENERATE, back).status_code == 200
    with run_gateway(tmp_path / "c", upstream.base_url) as stranger:
        # A replica started with a key of its own: refuses.
        assert post(stranger, GENERATE, back).status_code == 400
