"""The OpenAI-compatible routes' contract: docs/openapi/openai.json, held against the door.

As for the Gemini routes (test_openapi.py): the committed document is the generated one,
the gateway serves it without a key, and schemathesis drives a live gateway in front of
the fake upstream with positive and negative requests — no 5xx, every answer as
documented, every refusal in OpenAI's error shape. The request schemas are keyed by the
door's own parameter sets, so every parameter the door accepts is documented and any
other is refused (tested here for every operation taking a body).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from schemathesis import GenerationMode

from localgate.openai.chat import CHAT_PARAMETERS
from localgate.openai.embeddings import EMBEDDING_PARAMETERS
from localgate.openai.openapi import BASES, openai_document
from localgate.openai.routes import OpenAIOperation
from tests.conftest import RunningGateway
from tests.contract.harness import CHECKS, cases, keeps_contract, operations

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi" / "openai.json"


def test_the_committed_contract_is_the_generated_one() -> None:
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))

    assert committed == openai_document(), (
        "The OpenAI routes' contract changed. If that is deliberate, run `make openapi`, "
        "review the diff of docs/openapi/openai.json and note the change in CHANGELOG.md."
    )


def test_the_document_is_valid_and_documents_every_operation_and_parameter() -> None:
    document = openai_document()
    validate(document)

    operations = {
        operation["operationId"]
        for path in document["paths"].values()
        for operation in path.values()
    }
    assert len(operations) == len(OpenAIOperation)
    schemas = document["components"]["schemas"]
    assert set(schemas["ChatCompletionRequest"]["properties"]) == CHAT_PARAMETERS
    assert set(schemas["EmbeddingsRequest"]["properties"]) == EMBEDDING_PARAMETERS
    assert schemas["Error"]["properties"]["error"]["required"] == [
        "message",
        "type",
        "param",
        "code",
    ]


def test_the_gateway_serves_it_without_a_key(gateway: RunningGateway) -> None:
    with gateway.client() as client:
        answer = client.get("/openapi/openai.json")

    assert answer.status_code == 200
    assert answer.json() == openai_document()


def _openai_refusal(case: Any, response: Any) -> None:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body


@pytest.mark.parametrize(("operation", "mode"), cases(openai_document()))
def test_the_gateway_keeps_its_openai_contract(
    operation: Any, mode: GenerationMode, gateway: RunningGateway
) -> None:
    keeps_contract(
        operation,
        mode,
        base_url=gateway.base_url,
        headers={"authorization": f"Bearer {gateway.key}"},
        refusal=_openai_refusal,
    )


@pytest.mark.parametrize("base", BASES)
def test_refusals_under_both_bases_use_openais_shape(gateway: RunningGateway, base: str) -> None:
    with gateway.client(headers={"authorization": f"Bearer {gateway.key}"}) as client:
        answers = {
            "unknown route": client.post(f"{base}/completions", json={}),
            "unsupported parameter": client.post(
                f"{base}/chat/completions",
                json={
                    "model": "gemini-2.5-flash",
                    "messages": [{"role": "user", "content": "hi"}],
                    "logit_bias": {},
                },
            ),
            "wrong method": client.get(f"{base}/chat/completions"),
            "not json": client.post(
                f"{base}/embeddings", content=b"x", headers={"content-type": "text/plain"}
            ),
        }
    with gateway.client() as anonymous:
        answers["no key"] = anonymous.get(f"{base}/models")

    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == {
        "unknown route": 404,
        "unsupported parameter": 400,
        "wrong method": 405,
        "not json": statuses["not json"],
        "no key": 401,
    }
    assert statuses["not json"] in (400, 415)
    for answer in answers.values():
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
        assert answer.headers["x-request-id"]
    assert answers["unsupported parameter"].json()["error"]["param"] == "logit_bias"


# Generated chat requests are mostly refused (a tool message must answer a tool call of an
# earlier message, which a schema cannot say): these answered ones hold the 200s to the
# document, JSON and stream alike.
CHAT = next(op for op in operations(openai_document()) if op.path.endswith("/chat/completions"))
ANSWERED = {
    "plain": {"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "Hi"}]},
    "every knob": {
        "model": "models/gemini-2.5-flash",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Call me at 13812345678"}]},
        ],
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 50,
        "stop": ["END"],
        "seed": 7,
        "user": "u-1",
        "store": False,
        "modalities": ["text"],
    },
    "tool round trip": {
        "model": "gemini-2.5-flash",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Beijing"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}],
    },
    "stream": {
        "model": "gemini-2.5-flash",
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    },
}


@pytest.mark.parametrize("name", list(ANSWERED))
def test_answered_chat_completions_keep_the_contract(name: str, gateway: RunningGateway) -> None:
    case = CHAT.Case(body=ANSWERED[name], media_type="application/json")

    response = case.call_and_validate(
        base_url=gateway.base_url,
        headers={"authorization": f"Bearer {gateway.key}"},
        checks=CHECKS,
        timeout=60,
    )

    assert response.status_code == 200, response.text
    if name == "stream":
        assert response.headers["content-type"][0].startswith("text/event-stream")
        assert response.text.rstrip().endswith("data: [DONE]")
    else:
        assert response.json()["object"] == "chat.completion"
