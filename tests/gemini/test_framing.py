"""Stream framing: decoding upstream SSE, encoding both client framings."""

from __future__ import annotations

import json
import tracemalloc

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from localgate.errors import UpstreamUnreachable
from localgate.gemini.framing import Framing, SseDecoder, StreamEncoder, dump_json


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


def test_an_event_too_large_across_many_chunks_is_refused() -> None:
    # The pieces of an unfinished line count towards the limit as they arrive.
    decoder = SseDecoder(max_event_bytes=64)

    for _ in range(7):  # 7 * 9 = 63 bytes: not yet
        list(decoder.feed(b"data: xxx"))
    with pytest.raises(ValueError, match="exceeds"):
        list(decoder.feed(b"data: xxx"))


def test_a_line_trickled_in_tiny_chunks_is_held_in_about_its_own_size() -> None:
    # An upstream (or a proxy) that sends a long event two bytes at a time: what waits for
    # the line's end must not cost many times the bytes the limit allows.
    line = b'data: "' + b"x" * 100_000 + b'"'
    decoder = SseDecoder(max_event_bytes=1 << 20)
    chunks = [line[at : at + 2] for at in range(0, len(line), 2)]
    tracemalloc.start()
    try:
        for chunk in chunks:
            assert list(decoder.feed(chunk)) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 3 * len(line)
    assert list(decoder.feed(b"\n\n")) == ["x" * 100_000]


def test_events_before_a_line_that_is_not_sse_come_out_first() -> None:
    decoder = SseDecoder(max_event_bytes=1 << 20)
    events = decoder.feed(b'data: {"a": 1}\n\n[{"b": 2}]\n')

    assert next(events) == {"a": 1}
    with pytest.raises(ValueError, match="not Server-Sent Events"):
        next(events)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@given(
    st.lists(
        st.tuples(
            _JSON_VALUES,
            st.sampled_from([b"\n", b"\r\n"]),  # the line ending
            st.booleans(),  # "data:" without the space
            st.booleans(),  # a comment line before the event
            st.booleans(),  # the JSON over two data lines
        ),
        max_size=5,
    ),
    st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_any_stream_cut_anywhere_decodes_to_its_events(
    events: list[tuple[object, bytes, bool, bool, bool]], cuts: list[int]
) -> None:
    wire = b""
    for value, end, bare, comment, split in events:
        body = json.dumps(value, indent=1 if split else None).encode()
        if comment:
            wire += b": keep-alive" + end
        lines = body.split(b"\n") if split else [body]
        wire += b"".join((b"data:" if bare else b"data: ") + line + end for line in lines) + end
    points = sorted({cut % (len(wire) + 1) for cut in cuts})
    chunks = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]

    assert decode(*chunks) == [value for value, *_ in events]


def test_sse_encoding_is_one_compact_line_per_event() -> None:
    encoder = StreamEncoder(Framing.SSE)

    wire = encoder.event({"t": "a\u2028b\nc"}) + encoder.close()

    assert wire == b'data: {"t":"a\\u2028b\\nc"}\r\n\r\n'


def reference_dump_json(value: object) -> bytes:
    """dump_json as it was before its one-byte shortcut: both escapes, always."""
    raw = orjson.dumps(value)
    return raw.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")


# Characters whose UTF-8 starts E2 80 like the line separators (curly quotes, dashes, the
# ellipsis, U+2027, U+202A), CJK text whose continuation bytes include A8/A9, and the
# separators themselves: the one-byte shortcut must not change a single byte.
_NEAR_SEPARATORS = st.text(
    st.sampled_from(
        [
            "\u2028",
            "\u2029",
            "\u2027",
            "\u202a",
            "\u201c",
            "\u201d",
            "\u2014",
            "\u2026",
            "\u4f60",
            "\u7a31",
            "\u96a9",
            "\u00a8",
            "a",
            "\\",
            '"',
            "\n",
        ]
    )
    | st.characters(exclude_categories=["Cs"]),  # no lone surrogates: not UTF-8
    max_size=40,
)


@given(st.lists(_NEAR_SEPARATORS, max_size=4))
def test_dump_json_escapes_exactly_as_the_plain_replace(texts: list[str]) -> None:
    value = {"contents": [{"parts": [{"text": text} for text in texts]}]}

    assert dump_json(value) == reference_dump_json(value)
    assert orjson.loads(dump_json(value)) == value


def test_dump_json_escapes_separators_among_other_e2_characters() -> None:
    value = {"t": "\u201c\u2028\u2026\u2029\u2014"}

    assert dump_json(value) == b'{"t":"\xe2\x80\x9c\\u2028\xe2\x80\xa6\\u2029\xe2\x80\x94"}'
    assert dump_json({"t": "\u4f60\u201c"}) == orjson.dumps({"t": "\u4f60\u201c"})


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
