"""The data plane's contract: the OpenAPI document, held against the code and the gateway.

- The committed docs/openapi/gemini.json is the generated document: a change to the
  contract shows in the diff (regenerate with ``make openapi``, say why in CHANGELOG).
- The live gateway serves the same document at /openapi.json, without a key.
- schemathesis generates requests from the document against a live gateway in front of
  the fake upstream, positive and negative: no 5xx, every status, content type, header
  and body as documented, every refusal in the error envelope. (Not "every
  schema-violating request is refused": unknown query parameters and fields pass through,
  redacted, as Google's API would see them; a priority header the key may not set is
  ignored.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from schemathesis import GenerationMode

from localgate.gemini.openapi import openapi_document
from localgate.gemini.routes import GeminiMethod
from tests.conftest import RunningGateway
from tests.contract.harness import cases, keeps_contract

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi" / "gemini.json"


def test_the_committed_contract_is_the_generated_one() -> None:
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))

    assert committed == openapi_document(), (
        "The data plane's contract changed. If that is deliberate, run `make openapi`, "
        "review the diff of docs/openapi/gemini.json and note the change in CHANGELOG.md."
    )


def test_the_document_is_valid_openapi_3_1_and_covers_every_route() -> None:
    document = openapi_document()
    validate(document)  # raises on any violation of the OpenAPI 3.1 specification

    operations = {
        operation["operationId"]
        for path in document["paths"].values()
        for operation in path.values()
    }
    assert {method.name.lower() for method in GeminiMethod} <= operations
    envelope = document["components"]["schemas"]["ErrorEnvelope"]
    assert envelope["required"] == ["error"]


def test_the_gateway_serves_it_without_a_key(gateway: RunningGateway) -> None:
    with gateway.client() as client:
        answer = client.get("/openapi.json")

    assert answer.status_code == 200
    assert answer.json() == openapi_document()


def _gemini_refusal(case: Any, response: Any) -> None:
    if case.path == "/readyz":  # not ready is a status, not an error
        return
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == response.status_code


# Negative cases for the operations that take input (the operations endpoints take none).
@pytest.mark.parametrize(
    ("operation", "mode"),
    cases(openapi_document(), negative=lambda operation: operation.path.startswith("/{version}")),
)
def test_the_gateway_keeps_its_contract(
    operation: Any, mode: GenerationMode, gateway: RunningGateway
) -> None:
    keeps_contract(
        operation,
        mode,
        base_url=gateway.base_url,
        headers={"x-goog-api-key": gateway.key},
        refusal=_gemini_refusal,
    )


def test_a_refusal_outside_any_route_uses_the_envelope_too(gateway: RunningGateway) -> None:
    # Paths the document does not describe get the documented envelope, not HTML.
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as client:
        answers = [
            client.get("/v1beta/files"),
            client.post("/v1beta/models/gemini-2.5-flash:unknownVerb", json={}),
            client.get("/nothing/here"),
            client.post(
                "/v1beta/models/gemini-2.5-flash:generateContent",
                content=b"not json",
                headers={"content-type": "text/plain"},
            ),
        ]

    for answer in answers:
        assert answer.status_code in (403, 404, 400, 415), answer.text
        body = answer.json()
        assert body["error"]["code"] == answer.status_code
        assert answer.headers["x-request-id"]
