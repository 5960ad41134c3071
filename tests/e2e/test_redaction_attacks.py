"""An attack round on the redactor through the real gateway: personal data in numbers,
beside blob data, in other escape syntaxes and digit forms, split by unusual separators,
glued to letters in identifier-like fields, in the model name and the list parameters.

Each test failed before the fix it names. A test accepts either outcome the product
allows: the request refused with a 4xx and nothing forwarded, or forwarded with the value
gone in every form a model could read it (decoded here independently of the gateway's own
decoder: HTML5 references with or without ';', percent-encoding, backslash escapes of
every syntax, digit-like characters of any kind, combining marks and control characters
dropped, separators between digits dropped).
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import html
import re
import unicodedata
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from localgate.redaction.reveal import reveal
from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway

PHONE = "13812345678"
RESIDENT_ID = "11010519491231002X"
# Luhn-valid UnionPay number and a resident ID whose check character is a digit: both
# fit in a JSON integer.
CARD = 6222020200112345679
NUMERIC_ID = 110105194912310003
EMAIL = "zhang.wei@example.com"
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
COUNT = "/v1beta/models/gemini-2.5-flash:countTokens"
EMBED = "/v1beta/models/text-embedding-004:embedContent"


# -- what the upstream could read ------------------------------------------------------


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(int(value)) if float(value).is_integer() else str(value)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)


_PERCENT_U = re.compile(r"%u([0-9A-Fa-f]{4})")


def _folded(text: str) -> str:
    """Every digit-like character as its digit; marks, controls and format characters
    (which do not stop a reader from reading the digits around them) dropped."""
    out: list[str] = []
    for char in text:
        digit = unicodedata.digit(char, None)
        if digit is not None:
            out.append(str(digit))
        elif unicodedata.category(char) in ("Mn", "Me", "Cf", "Cc", "Zl", "Zp"):
            continue
        else:
            out.append(char)
    return "".join(out)


def readable(text: str) -> set[str]:
    """``text`` in every form a model could read it."""
    forms = {text, html.unescape(html.unescape(text)), urllib.parse.unquote(text)}
    forms.add(html.unescape(text))
    forms.add(_PERCENT_U.sub(lambda m: chr(int(m.group(1), 16)), text))
    with contextlib.suppress(UnicodeError, ValueError):
        forms.add(codecs.decode(text.encode("latin-1", "backslashreplace"), "unicode_escape"))
    for form in list(forms):
        folded = _folded(form)
        forms.add(folded)
        # Digits read across separators: "1 3 8 …", "138/1234/5678", "138\r\n1234".
        forms.add(re.sub(r"(?<=[0-9])[^0-9A-Za-z@\u4e00-\u9fff]{1,3}(?=[0-9Xx])", "", folded))
    return forms


def upstream_text(upstream: FakeGemini) -> str:
    """Everything the upstream received (path, query, body) in every readable form."""
    if not upstream.requests:
        return ""
    request = upstream.requests[-1]
    strings = [request.path, *(v for _, v in request.query), *_strings(request.body)]
    return "\n".join(form for text in strings for form in readable(text))


def post(gateway: RunningGateway, path: str, body: Any) -> Any:
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as http:
        return http.post(path, json=body)


def assert_not_forwarded(
    response: Any, upstream: FakeGemini, values: tuple[str, ...] = (PHONE, RESIDENT_ID, EMAIL)
) -> None:
    """Refused with a 4xx and nothing sent, or sent without any of ``values``."""
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert upstream.requests == [], "refused, yet something was forwarded"
        return
    received = upstream_text(upstream)
    assert received, "the upstream received nothing"
    for value in values:
        assert value not in received, f"{value} reached the upstream"


def text_body(text: str) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": f"客户资料：{text} 。"}]}]}


# -- 0. strings inside inlineData / fileData other than the data itself --------------------

_HI = base64.b64encode(b"hi").decode()


@pytest.mark.parametrize(
    "blob",
    [
        {"mimeType": "text/plain", "data": _HI, "displayName": f"客户 {PHONE}"},
        {"mimeType": f"text/plain; name={PHONE}", "data": _HI},
        {"mime_type": "text/csv", "data": _HI, "note": {"mobile": PHONE}},
    ],
    ids=["displayName", "mime-parameter", "unknown-field"],
)
def test_strings_beside_the_data_of_a_text_blob_are_scanned(
    gateway: RunningGateway, upstream: FakeGemini, blob: dict[str, Any]
) -> None:
    # Default settings: a text blob is "decoded, scanned and re-encoded", but every other
    # string of the blob goes out as it came.
    response = post(gateway, GENERATE, {"contents": [{"parts": [{"inlineData": blob}]}]})

    assert_not_forwarded(response, upstream, (PHONE,))


def test_binary_data_allow_lets_binary_through_not_the_text_around_it(
    tmp_path: Any, upstream: FakeGemini
) -> None:
    config = "proxy:\n  redaction:\n    binary_data: allow\n"
    parts = [
        {
            "fileData": {
                "mimeType": "application/pdf",
                "fileUri": f"https://crm.example.com/export?phone={PHONE}",
            }
        },
        {"inlineData": {"mimeType": f"image/png; comment={PHONE}", "data": _HI}},
    ]
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        for part in parts:
            upstream.requests.clear()
            response = post(gateway, GENERATE, {"contents": [{"parts": [part]}]})
            assert_not_forwarded(response, upstream, (PHONE,))


# -- 1. JSON numbers are never scanned ---------------------------------------------------


def test_numbers_in_a_function_response_are_personal_data_too(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    # A CRM lookup's result as the database returns it: numeric columns.
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "查一下这个客户"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {}}}]},
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "lookup",
                            "response": {
                                "mobile": int(PHONE),
                                "card": CARD,
                                "resident_id": NUMERIC_ID,
                            },
                        }
                    }
                ],
            },
        ]
    }

    response = post(gateway, GENERATE, body)

    assert_not_forwarded(response, upstream, (PHONE, str(CARD), str(NUMERIC_ID)))


@pytest.mark.parametrize("raw", [b"13812345678", b"13812345678.0", b"1.3812345678e10"])
def test_a_number_in_an_unknown_field_is_scanned(
    gateway: RunningGateway, upstream: FakeGemini, raw: bytes
) -> None:
    body = b'{"contents":[{"parts":[{"text":"hi"}]}],"customer":' + raw + b"}"
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as http:
        response = http.post(GENERATE, content=body, headers={"content-type": "application/json"})

    assert_not_forwarded(response, upstream, (PHONE,))


# -- 2. forms reveal() claims to see through, or that a reader reads as digits ----------------

_DINGBAT = "".join(chr(0x2776 + int(c) - 1) for c in PHONE)  # ❶❸❽…
_KEYCAP = "".join(f"{c}\ufe0f\u20e3" for c in PHONE)  # 1️⃣3️⃣8️⃣…


@pytest.mark.parametrize(
    "text",
    [
        # A '%' in front: reveal decodes "%13" to U+0013 and the number is gone for the
        # recognizer; the model still reads %13812345678.
        f"编号%{PHONE}",
        f"证件号%{RESIDENT_ID}",
        # HTML numeric references without ';' (HTML5 and html.unescape decode them).
        "".join(f"&#{ord(c)}" for c in PHONE),
        "".join(f"&#x{ord(c):x}" for c in PHONE),
        "zhang.wei&#64example.com",
        # More than six hex digits (leading zeros are allowed in HTML).
        "".join(f"&#x{ord(c):07x};" for c in PHONE),
        # Format characters (category Cf) missing from INVISIBLE.
        "1381\u06002345678",
        "1381\U000134302345678",
        # Digits with combining marks.
        "".join(f"{c}\u0332" for c in PHONE),
        "1\u0301" + PHONE[1:],
        # Digit characters NFKC does not fold to one digit.
        _DINGBAT,
        _KEYCAP,
        "".join(chr(0x2474 + int(c) - 1) for c in PHONE),  # ⑴⑶⑻…
        "".join(chr(0x2488 + int(c) - 1) for c in PHONE),  # ⒈⒊⒏…
    ],
    ids=[
        "percent-eats-mobile",
        "percent-eats-id",
        "html-dec-no-semicolon",
        "html-hex-no-semicolon",
        "html-at-no-semicolon",
        "html-hex-7-digits",
        "arabic-number-sign",
        "egyptian-joiner",
        "combining-low-line",
        "combining-acute",
        "negative-circled-digits",
        "keycap-digits",
        "parenthesized-digits",
        "digit-full-stop",
    ],
)
def test_encodings_and_digit_forms_are_seen_through(
    gateway: RunningGateway, upstream: FakeGemini, text: str
) -> None:
    response = post(gateway, GENERATE, text_body(text))

    assert_not_forwarded(response, upstream)


@pytest.mark.parametrize(
    "text",
    [
        "".join(f"\\x{ord(c):02x}" for c in PHONE),
        "".join(f"\\U{ord(c):08x}" for c in PHONE),
        "".join(f"%u{ord(c):04x}" for c in PHONE),
        "".join(f"\\{ord(c):03o}" for c in PHONE),
        "zhang.wei&commat;example&period;com",
        # HTML escaped twice, as templates do: &amp;#49; is &#49; is 1.
        "".join(f"&amp;#{ord(c)};" for c in PHONE),
    ],
    ids=["backslash-x", "backslash-U", "percent-u", "octal", "html-named", "html-twice"],
)
def test_other_escape_syntaxes_are_seen_through(
    gateway: RunningGateway, upstream: FakeGemini, text: str
) -> None:
    # Any model decodes these at sight.
    response = post(gateway, GENERATE, text_body(text))

    assert_not_forwarded(response, upstream)


# -- 3. shapes the recognizers miss -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "138\t1234\t5678",
        "138/1234/5678",
        "138_1234_5678",
        "138·1234·5678",
        "(138)12345678",
        " ".join(PHONE),
        "-".join(PHONE),
        "110105 19491231 002X",
        "110105-19491231-002X",
    ],
    ids=[
        "tab",
        "slashes",
        "underscores",
        "middle-dot",
        "parenthesized-prefix",
        "digit-by-digit",
        "dash-by-digit",
        "id-grouped-spaces",
        "id-grouped-dashes",
    ],
)
def test_separated_numbers_are_found(
    gateway: RunningGateway, upstream: FakeGemini, text: str
) -> None:
    response = post(gateway, GENERATE, text_body(text))

    assert_not_forwarded(response, upstream)


def test_a_checksummed_resident_id_glued_to_letters_is_found(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    # The GB 11643 check character, birth date and province leave no doubt.
    response = post(gateway, GENERATE, text_body(f"userid{RESIDENT_ID}"))

    assert_not_forwarded(response, upstream)


# -- 4. identifier-like fields: a number glued to letters ------------------------------------


def _with(**fields: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **fields}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (GENERATE, _with(cachedContent=f"cachedContents/c{PHONE}")),
        (GENERATE, _with(labels={"customer": f"u{PHONE}"})),
        (GENERATE, _with(tools=[{"functionDeclarations": [{"name": f"lookup{PHONE}"}]}])),
        (
            GENERATE,
            _with(
                tools=[
                    {
                        "functionDeclarations": [
                            {
                                "name": "f",
                                "parameters": {
                                    "type": "OBJECT",
                                    "properties": {f"zhang{PHONE}": {"type": "STRING"}},
                                },
                            }
                        ]
                    }
                ]
            ),
        ),
        (GENERATE, _with(customer={f"zhang{PHONE}": 1})),
        (
            GENERATE,
            _with(toolConfig={"functionCallingConfig": {"allowedFunctionNames": [f"f{PHONE}"]}}),
        ),
        (
            GENERATE,
            {"contents": [{"role": "model", "parts": [{"functionCall": {"name": f"f{PHONE}"}}]}]},
        ),
        (GENERATE, {"contents": [{"role": f"u{PHONE}", "parts": [{"text": "hi"}]}]}),
        (
            COUNT,
            {
                "generateContentRequest": {
                    "model": f"models/x{PHONE}",
                    "contents": [{"parts": [{"text": "hi"}]}],
                }
            },
        ),
        (EMBED, {"model": f"models/x{PHONE}", "content": {"parts": [{"text": "hi"}]}}),
    ],
    ids=[
        "cachedContent",
        "labels",
        "function-name",
        "schema-property-key",
        "object-key",
        "allowed-function-names",
        "function-call-name",
        "role",
        "countTokens-nested-model",
        "embedContent-body-model",
    ],
)
def test_numbers_glued_to_letters_in_identifier_fields(
    gateway: RunningGateway, upstream: FakeGemini, path: str, body: dict[str, Any]
) -> None:
    # The model name in the path is pulled apart ("no prose to protect"); these
    # identifier-like strings are not.
    response = post(gateway, path, body)

    assert_not_forwarded(response, upstream, (PHONE,))


def test_a_letter_only_secret_as_an_object_key(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    key_id = "AKIAABCDEFGHIJKLMNOP"  # found as a value; as a key it is a "field name"
    assert post(gateway, GENERATE, _with(customer=key_id)).status_code < 500
    assert key_id not in upstream_text(upstream)
    upstream.requests.clear()

    response = post(gateway, GENERATE, _with(customer={key_id: "x"}))

    assert_not_forwarded(response, upstream, (key_id,))


# -- 5. the path and the query ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1beta/models/gemini-1-3-8-1-2-3-4-5-6-7-8:generateContent"),
        ("POST", "/v1alpha/models/gemini-1-3-8-1-2-3-4-5-6-7-8:generateContent"),
        ("GET", "/v1beta/models/gemini-1-3-8-1-2-3-4-5-6-7-8"),
        ("POST", "/v1beta/models/110105-19491231-002X:generateContent"),
        ("POST", "/v1beta/models/MTM4MTIzNDU2Nzg:generateContent"),  # base64 of the number
    ],
    ids=["digit-dashes", "v1alpha", "models.get", "grouped-id", "base64"],
)
def test_personal_data_in_the_model_name(
    gateway: RunningGateway, upstream: FakeGemini, method: str, path: str
) -> None:
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as http:
        response = http.request(method, path, json=None if method == "GET" else _with())

    assert response.status_code < 500
    if response.status_code < 400:
        model = upstream.requests[-1].path.split("/")[-1].split(":")[0]
        forms = readable(model)
        with contextlib.suppress(ValueError):
            forms.add(base64.b64decode(model + "=" * (-len(model) % 4)).decode("utf-8", "replace"))
        assert not any(PHONE in form or RESIDENT_ID in form for form in forms), model


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pageToken", base64.b64encode(PHONE.encode()).decode()),
        ("pageToken", "-".join(PHONE)),
        ("pageToken", "110105-19491231-002X"),
        ("filter", " ".join(PHONE)),
        ("filter", "(138)12345678"),
    ],
)
def test_personal_data_in_models_list_parameters(
    gateway: RunningGateway, upstream: FakeGemini, name: str, value: str
) -> None:
    # pageToken is opaque like thoughtSignature: it could be sealed the same way.
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as http:
        response = http.get("/v1beta/models", params={name: value})

    assert response.status_code < 500
    forwarded = [v for r in upstream.requests for _, v in r.query]
    forms = "\n".join(form for v in forwarded for form in readable(v))
    with contextlib.suppress(ValueError):
        forms += "\n".join(
            base64.b64decode(v + "=" * (-len(v) % 4)).decode("utf-8", "replace") for v in forwarded
        )
    assert PHONE not in forms
    assert RESIDENT_ID not in forms


# -- 6. denial of service through reveal -------------------------------------------------------


def test_a_flood_of_undecodable_percent_bytes_is_left_as_it_is_in_one_pass() -> None:
    # "%ff" once counted as a change, so every round decoded it again, one exception per
    # byte: 1 MB took 16-18 s and ~360 MB. Nothing in it decodes, so nothing is revealed
    # (and no position map is built).
    assert reveal("%ff" * 100_000) is None
    assert reveal("%ff%13%0b" * 30_000) is None
