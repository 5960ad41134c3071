"""Personal data never leaves, and comes back in the answer: through the real gateway."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from google import genai
from google.genai import errors, types

from localgate.audit.database import SqliteDatabase
from localgate.audit.records import parse_header
from localgate.audit.store import AuditReader
from localgate.identity import SqliteKeyStore
from localgate.redaction.detector import Detector
from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway, wait_until
from tests.e2e.sdk_parts import parts

PROMPT = "客户张伟，手机13812345678，身份证11010519491231002X，请起草一封道歉信"
REDACTED = "客户[PERSON_1]，手机[CN_MOBILE_1]，身份证[CN_RESIDENT_ID_1]，请起草一封道歉信"
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"

POLICY = """
proxy:
  redaction:
    actions: {API_SECRET: block}
  redaction_rules:
    - {pattern: 'ORD-[0-9]{8}', type: ORDER_NUMBER, replacement: '[ORDER]'}
tenants:
  acme:
    redaction:
      actions: {EMAIL: allow}
      binary_data: allow
"""


@pytest.fixture
def policy_gateway(tmp_path: Path, upstream: FakeGemini) -> Iterator[RunningGateway]:
    with run_gateway(tmp_path / "data", upstream.base_url, config=POLICY) as gateway:
        yield gateway


def upstream_text(upstream: FakeGemini) -> str:
    return str(upstream.requests[-1].body["contents"][0]["parts"][0]["text"])


def test_the_product_promise(client: genai.Client, upstream: FakeGemini) -> None:
    answer = client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT)

    assert upstream_text(upstream) == REDACTED
    assert answer.text == f"echo: {PROMPT}"


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_streamed_answer_is_restored_however_it_is_split(
    client: genai.Client, upstream: FakeGemini, chunk: int
) -> None:
    upstream.echo_stream(chunk)

    pieces = [
        c.text or ""
        for c in client.models.generate_content_stream(model="gemini-2.5-flash", contents=PROMPT)
    ]

    assert upstream_text(upstream) == REDACTED
    assert "".join(pieces) == PROMPT
    # Streaming stays streaming: one event out for (nearly) every event in.
    assert len(pieces) >= len(REDACTED) // chunk - 2


def test_json_array_stream_is_restored(gateway: RunningGateway, upstream: FakeGemini) -> None:
    upstream.echo_stream(4)
    body = {"contents": [{"parts": [{"text": PROMPT}]}]}

    with gateway.client() as http:
        response = http.post(STREAM, json=body, headers={"x-goog-api-key": gateway.key})

    events = response.json()
    text = "".join(e["candidates"][0]["content"]["parts"][0]["text"] for e in events)
    assert text == PROMPT


def test_count_tokens_and_embeddings_are_redacted(
    client: genai.Client, upstream: FakeGemini
) -> None:
    client.models.count_tokens(model="gemini-2.5-flash", contents=PROMPT)
    counted = upstream_text(upstream)
    client.models.embed_content(model="gemini-embedding-001", contents=parts(PROMPT, "a@b.cn"))
    embedded = upstream.requests[-1].body["requests"]

    assert counted == REDACTED
    assert embedded[0]["content"]["parts"][0]["text"] == REDACTED
    assert embedded[1]["content"]["parts"][0]["text"] == "[EMAIL_1]"


def test_function_call_arguments_both_ways(gateway: RunningGateway, upstream: FakeGemini) -> None:
    upstream.fail_with(
        200,
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"functionCall": {"name": "sms", "args": {"to": "[CN_MOBILE_1]"}}}
                        ],
                    }
                }
            ]
        },
    )
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "text 13812345678"}]},
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "sms", "args": {"to": "13812345678"}}}],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "sms", "response": {"sent": "13812345678"}}}
                ],
            },
        ]
    }

    with gateway.client() as http:
        response = http.post(GENERATE, json=body, headers={"x-goog-api-key": gateway.key})

    sent = json.dumps(upstream.requests[-1].body)
    assert "13812345678" not in sent
    assert sent.count("[CN_MOBILE_1]") == 3
    call = response.json()["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert call["args"] == {"to": "13812345678"}


def test_block_mask_and_tenant_policy(policy_gateway: RunningGateway, upstream: FakeGemini) -> None:
    store = SqliteKeyStore(policy_gateway.settings.state_db_path)
    other_key = store.create("globex").key.reveal()
    store.close()
    text = "订单ORD-12345678，邮箱li@example.com"

    with policy_gateway.client() as http:
        blocked = http.post(
            GENERATE,
            json={
                "contents": [
                    {"parts": [{"text": "ok"}]},
                    {"parts": [{"text": "AKIAIOSFODNN7EXAMPLE"}]},
                ]
            },
            headers={"x-goog-api-key": policy_gateway.key},
        )
        acme = http.post(
            GENERATE,
            json={"contents": [{"parts": [{"text": text}]}]},
            headers={"x-goog-api-key": policy_gateway.key},
        )
        acme_sent = upstream_text(upstream)
        globex = http.post(
            GENERATE,
            json={"contents": [{"parts": [{"text": text}]}]},
            headers={"x-goog-api-key": other_key},
        )
        globex_sent = upstream_text(upstream)

    assert blocked.status_code == 400
    assert "API_SECRET found in contents[1].parts[0].text" in blocked.json()["error"]["message"]
    assert acme_sent == "订单[ORDER]，邮箱li@example.com"
    assert globex_sent == "订单[ORDER]，邮箱[EMAIL_1]"
    # A mask is irreversible: the answer keeps it.
    assert acme.json()["candidates"][0]["content"]["parts"][0]["text"] == f"echo: {acme_sent}"
    assert (
        globex.json()["candidates"][0]["content"]["parts"][0]["text"]
        == "echo: 订单[ORDER]，邮箱li@example.com"
    )
    assert len(upstream.requests) == 2


def test_images_are_blocked_unless_the_tenant_allows_them(
    client: genai.Client, upstream: FakeGemini, policy_gateway: RunningGateway
) -> None:
    image = types.Part.from_bytes(data=b"\x89PNG\r\n", mime_type="image/png")

    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model="gemini-2.5-flash", contents=parts("look", image))
    assert caught.value.code == 400
    assert "binary_data" in str(caught.value.message)
    assert upstream.requests == []

    allowed = genai.Client(
        api_key=policy_gateway.key,
        http_options=types.HttpOptions(base_url=policy_gateway.base_url, api_version="v1beta"),
    )
    allowed.models.generate_content(model="gemini-2.5-flash", contents=parts("look", image))
    allowed.close()
    assert len(upstream.requests) == 1


def test_redaction_failure_refuses_the_request(
    gateway: RunningGateway, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Detector, text: str) -> list[object]:
        raise RuntimeError("recognizer crashed")

    monkeypatch.setattr(Detector, "detect", broken)

    with gateway.client() as http:
        response = http.post(
            GENERATE,
            # A text the gateway has not seen: one it remembers is not scanned again
            # (docs/redaction.md, "Conversations").
            json={"contents": [{"parts": [{"text": f"{PROMPT}，今天第一次"}]}]},
            headers={"x-goog-api-key": gateway.key},
        )

    assert response.status_code == 500
    error = response.json()["error"]
    assert error["status"] == "INTERNAL"
    assert response.headers["x-request-id"] in error["message"]
    assert "nothing was forwarded" in error["message"]
    assert upstream.requests == []

    def outcome() -> object:
        reader = AuditReader(SqliteDatabase(gateway.settings.audit_db_path))
        records = reader.by_request(response.headers["x-request-id"])
        reader.close()
        return parse_header(records[0].header or b"{}").get("outcome") if records else None

    wait_until(lambda: outcome() is not None)
    assert outcome() == "refused: redaction failed"


def test_findings_are_counted_and_nothing_sensitive_is_logged(
    gateway: RunningGateway, client: genai.Client, upstream: FakeGemini
) -> None:
    client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT)

    with gateway.client() as http:
        metrics = http.get("/metrics").text

    assert 'localgate_redaction_findings_total{action="pseudonymize",type="CN_MOBILE"}' in metrics
    assert "localgate_redaction_duration_seconds_count" in metrics
    log = gateway.settings.access_log_path.read_text()
    for secret in ("13812345678", "张伟", "11010519491231002X", "[CN_MOBILE_1]"):
        assert secret not in log


def test_text_attachments_are_scanned(client: genai.Client, upstream: FakeGemini) -> None:
    attachment = types.Part.from_bytes(
        data="姓名,手机\n王芳,13912345678\n".encode(), mime_type="text/csv"
    )

    client.models.generate_content(
        model="gemini-2.5-flash", contents=parts("summarise", attachment)
    )

    part = upstream.requests[-1].body["contents"][0]["parts"][1]
    decoded = base64.b64decode(part["inlineData"]["data"]).decode()
    assert "13912345678" not in decoded
    assert "[CN_MOBILE_1]" in decoded


def test_tenant_can_have_answers_scanned(tmp_path: Path, upstream: FakeGemini) -> None:
    config = "tenants:\n  acme:\n    redaction:\n      scan_answers: true\n"
    upstream.stream(["您的号码[CN_MOBILE_1]已登记，", "客服电话139", "12345678。"])
    body = {"contents": [{"parts": [{"text": "登记13812345678"}]}]}

    with (
        run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway,
        gateway.client() as http,
    ):
        response = http.post(
            STREAM, json=body, params={"alt": "sse"}, headers={"x-goog-api-key": gateway.key}
        )
        metrics = http.get("/metrics").text

    events = [json.loads(line[6:]) for line in response.text.split("\r\n\r\n") if line]
    text = "".join(p["text"] for e in events for p in e["candidates"][0]["content"]["parts"])
    assert text == "您的号码13812345678已登记，客服电话[REDACTED]。"
    assert (
        'localgate_redaction_findings_total{action="mask_in_answer",type="CN_MOBILE"} 1.0'
        in metrics
    )


def test_large_prompts_are_redacted_too(client: genai.Client, upstream: FakeGemini) -> None:
    # Over 32 KB the redaction runs in a worker thread; the result must be the same.
    big = "普通的业务描述没有个人信息。" * 3000 + PROMPT

    client.models.generate_content(model="gemini-2.5-flash", contents=big)

    sent = upstream_text(upstream)
    assert len(big.encode()) > 32 * 1024
    assert sent.endswith(REDACTED)
    assert "13812345678" not in sent


def test_concurrent_requests_each_get_their_own_values_back(
    client: genai.Client, upstream: FakeGemini
) -> None:
    # Requests that reach redaction together are redacted back to back
    # (pipeline/batching.py): no request may see another's values or placeholders.
    prompts = [f"客户张伟，手机1381234{n:04d}，邮箱user{n}@example.com，请回电" for n in range(24)]

    def ask(prompt: str) -> str | None:
        return client.models.generate_content(model="gemini-2.5-flash", contents=prompt).text

    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(ask, prompts))

    assert answers == [f"echo: {prompt}" for prompt in prompts]
    sent = [str(r.body["contents"][0]["parts"][0]["text"]) for r in upstream.requests]
    assert sorted(sent[-len(prompts) :]) == sorted(
        ["客户[PERSON_1]，手机[CN_MOBILE_1]，邮箱[EMAIL_1]，请回电"] * len(prompts)
    )
    assert not any("1381234" in text or "@example.com" in text for text in sent)
