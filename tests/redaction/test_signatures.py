"""Thought signatures: only what the upstream issued, for this tenant, goes back up."""

from __future__ import annotations

import base64
import re

import pytest

from localgate.config import RedactionSettings
from localgate.gemini.routes import GeminiMethod
from localgate.redaction.detector import Detector
from localgate.redaction.request import redact_request_body
from localgate.redaction.session import PolicyBlocked, RedactionSession
from localgate.redaction.signatures import SignatureSeal, seal_answer

SEAL = SignatureSeal(b"k" * 32)
UPSTREAM_SIGNATURE = base64.b64encode(b"opaque upstream state").decode()


def body_with(signature: object, field: str = "thoughtSignature") -> dict[str, object]:
    return {
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "ok", field: signature}]},
        ]
    }


def redact(body: dict[str, object], *, tenant: str = "acme", drop: bool = False) -> object:
    policy = RedactionSettings(foreign_signatures="drop" if drop else "refuse")
    session = RedactionSession(
        policy, Detector.builtin(), open_signature=lambda value: SEAL.open(tenant, value)
    )
    return redact_request_body(GeminiMethod.GENERATE_CONTENT, body, session)


def model_part(body: object) -> dict[str, object]:
    assert isinstance(body, dict)
    return body["contents"][1]["parts"][0]  # type: ignore[no-any-return]


def test_a_sealed_signature_goes_back_as_the_upstreams_original() -> None:
    sealed = SEAL.seal("acme", UPSTREAM_SIGNATURE)

    assert sealed != UPSTREAM_SIGNATURE
    assert model_part(redact(body_with(sealed)))["thoughtSignature"] == UPSTREAM_SIGNATURE


def test_the_sdks_url_safe_re_encoding_still_opens() -> None:
    sealed = SEAL.seal("acme", UPSTREAM_SIGNATURE)
    url_safe = base64.urlsafe_b64encode(base64.b64decode(sealed)).decode().rstrip("=")

    part = model_part(redact(body_with(url_safe, "thought_signature")))

    assert part["thought_signature"] == UPSTREAM_SIGNATURE


@pytest.mark.parametrize(
    "signature",
    [
        UPSTREAM_SIGNATURE,  # the upstream's own, never sealed: could be anything
        base64.b64encode("客户张伟 13812345678".encode()).decode(),  # smuggled data
        "not base64 !",
        12345,
        SignatureSeal(b"x" * 32).seal("acme", UPSTREAM_SIGNATURE),  # another key
        SEAL.seal("other-tenant", UPSTREAM_SIGNATURE),  # another tenant's
    ],
)
def test_a_signature_the_gateway_did_not_seal_for_this_tenant_is_refused(
    signature: object,
) -> None:
    with pytest.raises(PolicyBlocked, match=re.escape("contents[1].parts[0].thoughtSignature")):
        redact(body_with(signature))


def test_a_tampered_seal_is_refused() -> None:
    raw = bytearray(base64.b64decode(SEAL.seal("acme", UPSTREAM_SIGNATURE)))
    raw[-1] ^= 1  # the original, changed after sealing

    with pytest.raises(PolicyBlocked):
        redact(body_with(base64.b64encode(bytes(raw)).decode()))


def test_the_drop_policy_removes_foreign_signatures_and_keeps_the_part() -> None:
    part = model_part(redact(body_with(UPSTREAM_SIGNATURE), drop=True))

    assert part == {"text": "ok"}


def test_signatures_in_function_call_parts_are_opened_too() -> None:
    sealed = SEAL.seal("acme", UPSTREAM_SIGNATURE)
    body: dict[str, object] = {
        "contents": [
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "f"}, "thoughtSignature": sealed}],
            }
        ]
    }

    redacted = redact(body)

    assert isinstance(redacted, dict)
    assert redacted["contents"][0]["parts"][0]["thoughtSignature"] == UPSTREAM_SIGNATURE


def test_sealing_an_answer_copies_and_leaves_the_shared_original_alone() -> None:
    answer = {
        "candidates": [
            {"content": {"parts": [{"text": "a"}, {"text": "b", "thoughtSignature": "c2ln"}]}},
            {"content": {"parts": [{"text": "no signature"}]}},
        ]
    }

    sealed = seal_answer(answer, lambda value: SEAL.seal("acme", value))

    assert answer["candidates"][0]["content"]["parts"][1]["thoughtSignature"] == "c2ln"
    signature = sealed["candidates"][0]["content"]["parts"][1]["thoughtSignature"]
    assert SEAL.open("acme", signature) == "c2ln"
    assert sealed["candidates"][1] is answer["candidates"][1]
    assert seal_answer({"totalTokens": 3}, str) == {"totalTokens": 3}


def test_the_seal_never_prints_its_key() -> None:
    assert "k" * 8 not in repr(SEAL)
