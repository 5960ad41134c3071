"""The detector's shortcuts attacked through the real gateway: identifiers where jieba's
segmentation is cut, inside otherwise-ASCII runs that width folding skips, and e-mail
addresses whose local part starts far before the ``@``, in a prompt, a function
response and its keys. Nothing of them may reach the upstream.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from localgate.testing import FakeGemini
from tests.conftest import RunningGateway
from tests.e2e.test_redaction_attacks import (
    EMAIL,
    GENERATE,
    PHONE,
    RESIDENT_ID,
    assert_not_forwarded,
    post,
)

B64 = "QUJDREVGR0g" * 200
PROSE = "lorem ipsum " * 30
NAMES = ("张伟", "欧阳娜娜", "彭志强")
IDN_EMAIL = "wei@bücher.de"
# Long lines (2 KB and more): jieba segments only the parts that hold Chinese.
LINES = (
    B64 + "张伟说明天到",
    B64 + "\u3000欧阳娜娜女士\u00a0" + B64,
    "https://example.com/search?q=" + "a%20b" * 400 + "&n=彭志强先生",
    PROSE + "call １３８\u3000１２３４\u3000５６７８ " + PROSE,
    PROSE + "身份证１１０１０５１９４９１２３１００２Ｘ " + PROSE,
    "Contact" + "." * 100 + EMAIL + " " + PROSE,
    "or " + IDN_EMAIL + "，谢谢",
)


def _prompt(text: str) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


def _tool_output(output: dict[str, Any]) -> dict[str, Any]:
    call = {"functionCall": {"name": "lookup", "args": {"q": "customer"}}}
    answer = {"functionResponse": {"name": "lookup", "response": output}}
    return {
        "contents": [
            {"role": "user", "parts": [{"text": "Who called?"}]},
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [answer]},
        ]
    }


@pytest.mark.parametrize(
    "body",
    [
        _prompt("\n".join(LINES)),
        _prompt(" ".join(LINES)),
        _tool_output({"records": list(LINES)}),
        _tool_output({line: index for index, line in enumerate(LINES)}),
    ],
    ids=["lines", "one-line", "tool-output", "tool-output-keys"],
)
def test_identifiers_where_the_shortcuts_cut_do_not_reach_the_upstream(
    body: dict[str, Any], gateway: RunningGateway, upstream: FakeGemini
) -> None:
    response = post(gateway, GENERATE, body)

    assert_not_forwarded(response, upstream, (PHONE, RESIDENT_ID, EMAIL, IDN_EMAIL, *NAMES))


@pytest.mark.parametrize(
    "model",
    [
        "gemini-" + base64.b64encode(PHONE.encode()).decode().rstrip("="),
        "gemini-2.5-flash-" + base64.b64encode(f"email {EMAIL}".encode()).decode().rstrip("="),
        "gemini_" + base64.urlsafe_b64encode(RESIDENT_ID.encode()).decode().rstrip("="),
    ],
    ids=["phone", "email", "resident-id"],
)
def test_a_base64_part_of_the_model_name_is_decoded(
    model: str, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    # The whole name was decoded if it was base64; a part after a prefix was not, and
    # reached the upstream's request line.
    response = post(gateway, f"/v1beta/models/{model}:generateContent", _prompt("hello"))

    assert response.status_code == 400
    assert upstream.requests == []
