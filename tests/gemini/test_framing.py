"""Stream framing: decoding upstream SSE, encoding both client framings."""

from __future__ import annotations

import json

import pytest

from localgate.errors import UpstreamUnreachable
from localgate.gemini.framing import Framing, SseDecoder, StreamEncoder


def decode(*chunks: bytes) -> list[object]:
    decoder = SseDecoder(max_event_bytes=1 << 20)
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + list(decoder.finish())


def test_events_split_anywhere_across_chunks() -> None:
    wire = b'data: {"a": 1}\r\n\r\ndata: {"b": "x\\ny"}\r\n\r\n'

    for cut in range(1, len(wire)):
        assert decode(wire[:cut], wire[cut:]) == [{"a": 1}, {"b": "x\ny"}]


def test_multiline_data_comments_and_missing_final_blank_line() -> None:
    wire = b': keep-alive\nevent: message\ndata: {"a":\ndata: 1}\n\ndata:{"b":2}'

    assert decode(wire) == [{"a": 1}, {"b": 2}]


def test_oversized_event_is_refused() -> None:
    decoder = SseDecoder(max_event_bytes=10)

    with pytest.raises(ValueError, match="exceeds"):
        list(decoder.feed(b"data: " + b"x" * 20))


def test_sse_encoding_is_one_compact_line_per_event() -> None:
    encoder = StreamEncoder(Framing.SSE)

    wire = encoder.event({"t": "a\u2028b\nc"}) + encoder.close()

    assert wire == b'data: {"t":"a\\u2028b\\nc"}\r\n\r\n'


def test_json_array_encoding_parses_as_an_array() -> None:
    encoder = StreamEncoder(Framing.JSON_ARRAY)
    error = UpstreamUnreachable("gone")

    wire = encoder.event({"n": 1}) + encoder.event({"n": 2}) + encoder.error(error)
    wire += encoder.close()

    assert json.loads(wire) == [
        {"n": 1},
        {"n": 2},
        {"error": {"code": 502, "message": "gone", "status": "UNAVAILABLE"}},
    ]
    assert wire.startswith(b"[{")
    assert b"\n,\r\n" in wire
    assert wire.endswith(b"\n]")


def test_empty_json_array_stream() -> None:
    assert json.loads(StreamEncoder(Framing.JSON_ARRAY).close()) == []


def test_a_json_array_is_not_mistaken_for_sse() -> None:
    with pytest.raises(ValueError, match="not Server-Sent Events"):
        decode(b'[{"candidates": []}]\n')
