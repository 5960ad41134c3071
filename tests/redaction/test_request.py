"""Every text-bearing field of every route goes through the redactor."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from localgate.config import RedactionSettings
from localgate.errors import InvalidArgument
from localgate.gemini.routes import GeminiMethod
from localgate.redaction.detector import Detector
from localgate.redaction.request import redact_request_body
from localgate.redaction.session import RedactionSession

PHONE = "13812345678"


@pytest.fixture(scope="module")
def detector() -> Detector:
    return Detector.builtin(names=False)


def session(detector: Detector, **changes: Any) -> RedactionSession:
    return RedactionSession(RedactionSettings(**changes), detector)


def test_generate_request_every_field_same_placeholder(detector: Detector) -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": f"call {PHONE}"}]},
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "dial", "args": {"to": [PHONE], "n": 1}}}],
            },
            {
                "role": "user",
                "parts": [
                    {"function_response": {"name": "dial", "response": {"r": f"ok {PHONE}"}}}
                ],
            },
        ],
        "system_instruction": {"parts": [{"text": f"owner {PHONE}"}]},
        "generationConfig": {"temperature": 0},
    }
    s = session(detector)

    out = redact_request_body(GeminiMethod.GENERATE_CONTENT, body, s)

    assert PHONE not in str(out)
    assert out["contents"][0]["parts"][0]["text"] == "call [CN_MOBILE_1]"
    assert out["contents"][1]["parts"][0]["functionCall"]["args"] == {
        "to": ["[CN_MOBILE_1]"],
        "n": 1,
    }
    assert (
        out["contents"][2]["parts"][0]["function_response"]["response"]["r"] == "ok [CN_MOBILE_1]"
    )
    assert out["system_instruction"]["parts"][0]["text"] == "owner [CN_MOBILE_1]"
    assert out["generationConfig"] == {"temperature": 0}
    assert s.counts == {("CN_MOBILE", "pseudonymize"): 4}


def test_count_tokens_embed_and_batch(detector: Detector) -> None:
    nested = {"generateContentRequest": {"model": "m", "contents": [{"parts": [{"text": PHONE}]}]}}
    embed = {"content": {"parts": [{"text": PHONE}]}, "title": PHONE}
    batch = {"requests": [{"content": {"parts": [{"text": PHONE}]}}]}

    for method, body in [
        (GeminiMethod.COUNT_TOKENS, nested),
        (GeminiMethod.EMBED_CONTENT, embed),
        (GeminiMethod.BATCH_EMBED_CONTENTS, batch),
    ]:
        assert PHONE not in str(redact_request_body(method, body, session(detector)))


def test_text_inline_data_is_decoded_redacted_and_reencoded(detector: Detector) -> None:
    data = base64.urlsafe_b64encode(f"客户电话 {PHONE}".encode()).decode().rstrip("=")
    body = {"contents": [{"parts": [{"inlineData": {"mime_type": "text/csv", "data": data}}]}]}

    out = redact_request_body(GeminiMethod.GENERATE_CONTENT, body, session(detector))

    decoded = base64.b64decode(out["contents"][0]["parts"][0]["inlineData"]["data"]).decode()
    assert decoded == "客户电话 [CN_MOBILE_1]"


@pytest.mark.parametrize(
    "part",
    [
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/f.pdf"}},
        {"inlineData": {"mimeType": "text/plain", "data": base64.b64encode(b"\xff\xfe").decode()}},
    ],
)
def test_unscannable_content_follows_the_binary_policy(
    detector: Detector, part: dict[str, Any]
) -> None:
    body = {"contents": [{"parts": [{"text": "see attached"}, part]}]}

    with pytest.raises(InvalidArgument, match=r"contents\[0\]\.parts\[1\]"):
        redact_request_body(GeminiMethod.GENERATE_CONTENT, body, session(detector))
    allowed = redact_request_body(
        GeminiMethod.GENERATE_CONTENT, body, session(detector, binary_data="allow")
    )
    assert allowed["contents"][0]["parts"][1] == part


def test_block_names_the_type_and_the_field(detector: Detector) -> None:
    body = {
        "contents": [
            {"parts": [{"text": "a"}]},
            {"parts": [{"text": "b"}, {"text": "AKIAIOSFODNN7EXAMPLE"}]},
        ]
    }

    with pytest.raises(InvalidArgument) as caught:
        redact_request_body(
            GeminiMethod.GENERATE_CONTENT, body, session(detector, actions={"API_SECRET": "block"})
        )

    assert "API_SECRET found in contents[1].parts[1].text" in caught.value.message


def test_mask_allow_and_partial_mask(detector: Detector) -> None:
    text = f"{PHONE} a@b.cn"
    full = session(detector, default_action="mask", actions={"EMAIL": "allow"})
    partial = session(detector, default_action="mask", mask={"keep_start": 3, "keep_end": 4})

    assert full.redact(text, "x") == "[REDACTED] a@b.cn"
    # A value too short to keep both ends is replaced entirely.
    assert partial.redact(text, "x") == "138****5678 [REDACTED]"
    assert ("EMAIL", "allow") in full.counts


# -- fields the redactor does not know about still get scanned (review findings) -------


def test_snake_case_and_unknown_fields_are_scanned(detector: Detector) -> None:
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"executableCode": {"code": "x"}, "executable_code": {"code": f"call {PHONE}"}},
                    {"code_execution_result": {"output": f"dialled {PHONE}"}},
                ],
                "futureField": f"note {PHONE}",
            }
        ],
        "someNewTopLevelField": {"deep": [f"{PHONE}"]},
    }

    out = redact_request_body(GeminiMethod.GENERATE_CONTENT, body, session(detector))

    assert PHONE not in str(out)


def test_multimodal_function_response_parts_are_scanned(detector: Detector) -> None:
    data = base64.b64encode(f"客户电话 {PHONE}".encode()).decode()
    part = {
        "functionResponse": {
            "name": "lookup",
            "response": {"ok": True},
            "parts": [{"inlineData": {"mimeType": "text/plain", "data": data}}],
        }
    }
    image = {
        "functionResponse": {
            "name": "f",
            "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}],
        }
    }

    out = redact_request_body(
        GeminiMethod.GENERATE_CONTENT, {"contents": [{"parts": [part]}]}, session(detector)
    )
    with pytest.raises(InvalidArgument, match=r"functionResponse\.parts"):
        redact_request_body(
            GeminiMethod.GENERATE_CONTENT, {"contents": [{"parts": [image]}]}, session(detector)
        )

    sent = out["contents"][0]["parts"][0]["functionResponse"]["parts"][0]["inlineData"]["data"]
    assert PHONE not in base64.b64decode(sent).decode()


def test_keys_that_carry_data_are_scanned(detector: Detector) -> None:
    body = {
        "contents": [
            {
                "parts": [
                    {"functionResponse": {"name": "f", "response": {"li@example.com": "vip"}}},
                    {"functionCall": {"name": "f", "args": {f"zhang_{PHONE}": 1, "n": 2}}},
                ]
            }
        ]
    }

    out = redact_request_body(GeminiMethod.GENERATE_CONTENT, body, session(detector))

    assert out["contents"][0]["parts"][0]["functionResponse"]["response"] == {"[EMAIL_1]": "vip"}
    assert out["contents"][0]["parts"][1]["functionCall"]["args"] == {
        "zhang_[CN_MOBILE_1]": 1,
        "n": 2,
    }


def test_non_utf8_text_blobs_cannot_be_scanned(detector: Detector) -> None:
    utf16 = base64.b64encode(f"call {PHONE}".encode("utf-16-le")).decode()
    for mime in ("text/plain", "text/plain; charset=utf-16"):
        body = {"contents": [{"parts": [{"inlineData": {"mimeType": mime, "data": utf16}}]}]}
        with pytest.raises(InvalidArgument, match="binary_data"):
            redact_request_body(GeminiMethod.GENERATE_CONTENT, body, session(detector))


def _nested(levels: int, leaf: Any) -> Any:
    body = leaf
    for level in range(levels):
        body = {"a": body} if level % 2 else [body]
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "x": body}


def test_a_body_nested_within_the_walk_s_depth_is_redacted_all_the_way_down(
    detector: Detector,
) -> None:
    redacted = redact_request_body(
        GeminiMethod.GENERATE_CONTENT, _nested(250, "13812345678"), session(detector)
    )

    assert "13812345678" not in repr(redacted)
    assert "[CN_MOBILE_1]" in repr(redacted)


@pytest.mark.parametrize("levels", [260, 100_000])
def test_a_body_nested_deeper_than_the_walk_goes_is_refused(
    detector: Detector, levels: int
) -> None:
    # The doors refuse such bodies first (100 levels); the walk refuses them on any other
    # way in, with the doors' message, and the compiled walk never overruns the C stack.
    with pytest.raises(InvalidArgument, match="nested deeper than 256 levels"):
        redact_request_body(
            GeminiMethod.GENERATE_CONTENT, _nested(levels, "13812345678"), session(detector)
        )
