"""Reading a request from its ASGI scope: headers, query, body limits and nesting."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from localgate.errors import (
    ClientClosedRequest,
    InvalidArgument,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
)
from localgate.frontdoor.body import BODY_TIMED_OUT, MAX_DEPTH, IncomingRequest


def incoming(
    body: bytes | list[dict[str, Any]],
    headers: list[tuple[bytes, bytes]] | None = None,
    query: bytes = b"",
) -> IncomingRequest:
    messages = body if isinstance(body, list) else [{"type": "http.request", "body": body}]
    pending = iter(messages)

    async def receive() -> dict[str, Any]:
        return next(pending)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1beta/models/m:generateContent",
        "query_string": query,
        "headers": headers or [],
    }
    return IncomingRequest(scope, receive)


def nested(depth: int) -> bytes:
    """A JSON value nesting ``depth`` levels: objects and arrays in turn."""
    value: Any = "leaf [{ not brackets }]"
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return orjson.dumps(value)


def test_nesting_up_to_the_limit_is_read_and_one_more_level_refused() -> None:
    body, _ = asyncio.run(incoming(nested(MAX_DEPTH)).read_json(1 << 20))
    assert body is not None

    with pytest.raises(InvalidArgument, match=f"nested deeper than {MAX_DEPTH}"):
        asyncio.run(incoming(nested(MAX_DEPTH + 1)).read_json(1 << 20))


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    raw = orjson.dumps({"contents": [{"parts": [{"text": "[{" * 500}]}]})
    body, read = asyncio.run(incoming(raw).read_json(1 << 20))
    assert body["contents"][0]["parts"][0]["text"].startswith("[{[{")
    assert read == raw


def test_body_in_several_messages_over_the_limit_is_refused() -> None:
    chunks = [
        {"type": "http.request", "body": b'{"contents": "', "more_body": True},
        {"type": "http.request", "body": b"x" * 100, "more_body": True},
        {"type": "http.request", "body": b'"}', "more_body": False},
    ]
    with pytest.raises(PayloadTooLarge, match="limit of 64 bytes"):
        asyncio.run(incoming(chunks).read_json(64))
    body, raw = asyncio.run(incoming(list(chunks)).read_json(1024))
    assert body == {"contents": "x" * 100}
    assert len(raw) == 116


def test_client_leaving_during_the_body_is_noticed() -> None:
    gone: list[dict[str, Any]] = [
        {"type": "http.request", "body": b"{", "more_body": True},
        {"type": "http.disconnect"},
    ]
    with pytest.raises(ClientClosedRequest):
        asyncio.run(incoming(gone).read_json(1024))


def test_headers_first_value_wins_and_unread_headers_are_not_kept() -> None:
    request = incoming(
        b"",
        headers=[
            (b"x-goog-api-key", b" lg_first "),
            (b"x-goog-api-key", b"lg_second"),
            (b"user-agent", b"some client"),
        ],
        query=b"alt=sse&key=a%20b&key=c",
    )
    assert request.header("x-goog-api-key") == "lg_first"
    assert "user-agent" not in request.headers
    assert request.query_value("key") == "a b"
    assert request.query == [("alt", "sse"), ("key", "a b"), ("key", "c")]


def test_declared_size_is_checked_before_reading() -> None:
    request = incoming(b"{}", headers=[(b"content-length", b"999999")])
    with pytest.raises(PayloadTooLarge):
        request.check_declared_size(1000)
    with pytest.raises(InvalidArgument, match="Content-Length"):
        incoming(b"{}", headers=[(b"content-length", b"lots")]).check_declared_size(1000)


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        b"application/json",
        b"application/json; charset=utf-8",
        b"Application/JSON;charset=UTF-8",
        b"",
    ],
)
def test_json_or_no_content_type_is_accepted(content_type: bytes | None) -> None:
    headers = [] if content_type is None else [(b"content-type", content_type)]
    incoming(b"{}", headers=headers).check_content_type()


@pytest.mark.parametrize(
    "content_type",
    [
        b"text/plain",
        b"application/x-www-form-urlencoded",
        b"multipart/form-data; boundary=x",
        b"application/jsonx",
        b"text/json",
    ],
)
def test_other_content_types_are_refused_with_415(content_type: bytes) -> None:
    request = incoming(b"{}", headers=[(b"content-type", content_type)])
    with pytest.raises(UnsupportedMediaType) as refused:
        request.check_content_type()
    assert refused.value.code == 415
    assert "application/json" in refused.value.message


def test_body_cut_off_by_the_connection_deadline_is_a_timeout() -> None:
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": b"{", "more_body": True},
        {"type": "http.disconnect"},
    ]
    request = incoming(messages)
    request._scope[BODY_TIMED_OUT] = True  # what the connection sets before disconnecting
    with pytest.raises(RequestTimeout, match=r"server\.body_timeout_s"):
        asyncio.run(request.read_json(1024))
