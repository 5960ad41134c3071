"""Restoring answers: unary, streamed with split placeholders, function calls, thoughts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localgate.config import RedactionSettings
from localgate.redaction.answer import StreamAnswerRestorer, restore_answer
from localgate.redaction.detector import Detector
from localgate.redaction.placeholders import Pseudonyms
from localgate.redaction.session import RedactionSession


def table() -> Pseudonyms:
    pseudonyms = Pseudonyms()
    pseudonyms.placeholder("CN_MOBILE", "13812345678")
    pseudonyms.placeholder("PERSON", "张伟")
    return pseudonyms


def event(*parts: dict[str, Any], finish: bool = False, index: int = 0) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": index}
    if finish:
        candidate["finishReason"] = "STOP"
    return {"candidates": [candidate], "modelVersion": "m"}


def texts(events: list[dict[str, Any]]) -> str:
    return "".join(
        part.get("text", "")
        for e in events
        for c in e.get("candidates", [])
        for part in c.get("content", {}).get("parts", [])
        if not part.get("thought")
    )


def test_unary_answer_text_and_function_call_args() -> None:
    answer = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {"text": "尊敬的[PERSON_1]，我们会致电[CN_MOBILE_1]。"},
                        {
                            "functionCall": {
                                "name": "sms",
                                "args": {"to": "[CN_MOBILE_1]", "n": [1]},
                            }
                        },
                    ]
                }
            }
        ]
    }

    restored = restore_answer(answer, table())

    parts = restored["candidates"][0]["content"]["parts"]
    assert parts[0]["text"] == "尊敬的张伟，我们会致电13812345678。"
    assert parts[1]["functionCall"]["args"] == {"to": "13812345678", "n": [1]}


def test_stream_split_placeholder_is_restored_in_the_later_event() -> None:
    restorer = StreamAnswerRestorer(table())
    wire = [
        event({"text": "致电[CN_MO"}),
        event({"text": "BILE_1]，"}),
        event({"text": "谢谢[PER"}),
        event({"text": "SON_1]"}, finish=True),
    ]

    out = [restorer.event(e) for e in wire] + restorer.finish()

    assert [texts([e]) for e in out] == ["致电", "13812345678，", "谢谢", "张伟"]
    assert restorer.dangling == 0


@pytest.mark.parametrize("index", [None, "0", 1.0, [0]])
def test_a_stream_with_an_odd_candidate_index_is_restored_by_position(index: object) -> None:
    # Only an upstream sends such an index (Google sends ints); the restorer, compiled as
    # it runs in the gateway, must not fail on it and cut the stream short.
    restorer = StreamAnswerRestorer(table())
    wire = [event({"text": "致电[CN_MO"}), event({"text": "BILE_1]"}, finish=True)]
    for one in wire:
        one["candidates"][0]["index"] = index

    out = [restorer.event(e) for e in wire] + restorer.finish()

    assert texts(out) == "致电13812345678"
    assert restorer.dangling == 0


def test_dangling_fragment_is_emitted_as_is_and_counted() -> None:
    restorer = StreamAnswerRestorer(table())

    first = restorer.event(event({"text": "号码是[CN_MOB"}))
    last = restorer.event(event(finish=True))
    tail = restorer.finish()

    assert texts([first, last, *tail]) == "号码是[CN_MOB"
    assert restorer.dangling == 1


def test_stream_ending_without_finish_reason_flushes_in_an_extra_event() -> None:
    restorer = StreamAnswerRestorer(table())

    out = [restorer.event(event({"text": "x [PERSON"})), *restorer.finish()]

    assert texts(out) == "x [PERSON"
    assert len(out) == 2


def test_thoughts_and_answer_text_are_restored_separately() -> None:
    restorer = StreamAnswerRestorer(table())
    wire = [
        event({"text": "think [PER", "thought": True}, {"text": "answer [CN_"}),
        event({"text": "SON_1]", "thought": True}, {"text": "MOBILE_1]"}, finish=True),
    ]

    out = [restorer.event(copy.deepcopy(e)) for e in wire] + restorer.finish()

    thoughts = "".join(
        p["text"] for e in out for p in e["candidates"][0]["content"]["parts"] if p.get("thought")
    )
    assert thoughts == "think 张伟"
    assert texts(out) == "answer 13812345678"


def test_nothing_to_do_without_placeholders() -> None:
    original = event({"text": "[CN_MOBILE_1]"})

    assert StreamAnswerRestorer(Pseudonyms()).event(copy.deepcopy(original)) == original


# -- scanning answers for personal data that did not come from the request -------------


def scanning_session() -> RedactionSession:
    session = RedactionSession(
        RedactionSettings(scan_answers=True, actions={"IPV4": "allow"}), Detector.builtin()
    )
    session.redact("请回电13812345678", "contents[0].parts[0].text")
    return session


def test_unary_answer_new_values_are_masked_request_values_restored() -> None:
    session = scanning_session()
    answer = event({"text": "已致电[CN_MOBILE_1]，另请联系13912345678或a@b.cn，服务器10.0.0.1"})

    restored = restore_answer(answer, session.pseudonyms, session)

    assert texts([restored]) == "已致电13812345678，另请联系[REDACTED]或[REDACTED]，服务器10.0.0.1"
    assert session.answer_counts == {"CN_MOBILE": 1, "EMAIL": 1}


def test_stream_new_value_split_across_events_is_masked() -> None:
    session = scanning_session()
    restorer = StreamAnswerRestorer(session.pseudonyms, session)
    wire = [
        event({"text": "您好，已致电[CN_MO"}),
        event({"text": "BILE_1]，备用号码139"}),
        event({"text": "1234"}),
        event({"text": "5678。谢谢"}, finish=True),
    ]

    out = [restorer.event(e) for e in wire] + restorer.finish()

    assert texts(out) == "您好，已致电13812345678，备用号码[REDACTED]。谢谢"
    # Text before the last word boundary is not held: the greeting goes out at once.
    assert texts(out[:1]) == "您好，"
