"""GeminiUpstream against the fake Gemini API on loopback: what it sends, how it reads
answers and streams, and how every failure is translated into the exception tree."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from localgate.errors import (
    ServiceUnavailable,
    UpstreamBadResponse,
    UpstreamCredentialsRejected,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from localgate.exchange.replies import StreamReply, UpstreamCall
from localgate.gemini.envelope import error_envelope
from localgate.gemini.routes import match_route
from localgate.secret import Secret
from localgate.testing import FakeGemini
from localgate.upstream import GeminiUpstream
from localgate.upstream.gemini import open_session
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, UPSTREAM_KEY

T = TypeVar("T")
GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
STREAM = match_route("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent")
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
# Short, against an upstream that never answers: the timeout itself is under test.
SHORT_TIMEOUT_S = 0.2


def with_upstream(
    base_url: str,
    scenario: Callable[[GeminiUpstream], Awaitable[T]],
    *,
    key: str | None = UPSTREAM_KEY,
    read_timeout_s: float = INFRASTRUCTURE_TIMEOUT_S,
) -> T:
    """Run ``scenario`` with an upstream over its own pooled session, closed afterwards."""

    async def main() -> T:
        session = open_session(4, INFRASTRUCTURE_TIMEOUT_S, read_timeout_s)
        upstream = GeminiUpstream(
            name="gemini",
            base_url=base_url,
            api_key=Secret(key) if key is not None else None,
            session=session,
            read_timeout_s=read_timeout_s,
        )
        try:
            return await scenario(upstream)
        finally:
            await session.close()

    return asyncio.run(main())


def generate(**kwargs: Any) -> Callable[[GeminiUpstream], Awaitable[Any]]:
    async def scenario(upstream: GeminiUpstream) -> Any:
        return (await upstream.unary(UpstreamCall(route=GENERATE, body=BODY, **kwargs))).body

    return scenario


async def texts_of(reply: StreamReply, into: list[str]) -> None:
    """Each event's text, into ``into`` as it arrives; the stream is closed afterwards."""
    try:
        async for event in reply.events:
            into.append(event["candidates"][0]["content"]["parts"][0]["text"])
    finally:
        await reply.close()


def stream_texts(into: list[str]) -> Callable[[GeminiUpstream], Awaitable[None]]:
    async def scenario(upstream: GeminiUpstream) -> None:
        await texts_of(await upstream.stream(UpstreamCall(route=STREAM, body=BODY)), into)

    return scenario


def envelope(status: int, name: str, message: str = "no", **extra: Any) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": name, **extra}}


def test_a_call_carries_the_gateways_key_and_only_the_headers_given(
    upstream: FakeGemini,
) -> None:
    answer = with_upstream(upstream.base_url, generate(headers=(("x-server-timeout", "30"),)))

    assert answer["candidates"][0]["content"]["parts"][0]["text"] == "echo: hi"
    sent = upstream.requests[-1]
    assert (sent.method, sent.path, sent.body) == (
        "POST",
        "/v1beta/models/gemini-2.5-flash:generateContent",
        BODY,
    )
    assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert sent.headers["user-agent"].startswith("localgate/")
    assert sent.headers["x-server-timeout"] == "30"
    assert sent.query == ()


def test_headers_of_the_upstream_hop_are_not_passed_back(upstream: FakeGemini) -> None:
    async def scenario(gemini: GeminiUpstream) -> dict[str, str]:
        return (await gemini.unary(UpstreamCall(route=GENERATE, body=BODY))).headers

    headers = with_upstream(upstream.base_url, scenario)

    assert not {"content-type", "content-length", "server", "date"} & set(headers)


def test_cookies_the_upstream_sets_are_never_sent_back(upstream: FakeGemini) -> None:
    # One pooled client serves every tenant: a cookie kept from one answer would follow the
    # next tenant's request and let the upstream link the two.
    answer = {"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}}]}
    upstream.fail_with(200, answer, {"set-cookie": "NID=tenant-a; Path=/"}, times=1)

    async def twice(gemini: GeminiUpstream) -> None:
        await generate()(gemini)
        await generate()(gemini)

    # By name: aiohttp's default jar ignores cookies from IP addresses anyway.
    with_upstream(upstream.base_url.replace("127.0.0.1", "localhost"), twice)

    assert "cookie" not in upstream.requests[-1].headers


def test_without_a_key_nothing_is_sent(upstream: FakeGemini) -> None:
    with pytest.raises(ServiceUnavailable, match="GEMINI_API_KEY"):
        with_upstream(upstream.base_url, generate(), key=None)

    assert upstream.requests == []


def test_an_error_envelope_passes_through_with_its_status(upstream: FakeGemini) -> None:
    body = envelope(429, "RESOURCE_EXHAUSTED", "Quota exceeded.")
    upstream.fail_with(429, body)

    with pytest.raises(UpstreamError) as raised:
        with_upstream(upstream.base_url, generate())

    assert (raised.value.code, raised.value.status_name) == (429, "RESOURCE_EXHAUSTED")
    assert error_envelope(raised.value) == body


def test_an_envelope_in_a_list_without_code_or_status_is_completed(upstream: FakeGemini) -> None:
    upstream.fail_with(503, [{"error": {"message": "The model is overloaded."}}])

    with pytest.raises(UpstreamError) as raised:
        with_upstream(upstream.base_url, generate())

    assert error_envelope(raised.value) == envelope(503, "UNAVAILABLE", "The model is overloaded.")


def test_an_error_without_a_gemini_body_gets_one_naming_the_upstream(
    upstream: FakeGemini,
) -> None:
    upstream.fail_with(500, "<html>Internal Server Error</html>")

    with pytest.raises(UpstreamError) as raised:
        with_upstream(upstream.base_url, generate())

    assert (raised.value.code, raised.value.status_name) == (500, "INTERNAL")
    assert "'gemini'" in raised.value.message
    assert "without a Gemini error body" in raised.value.message


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (401, envelope(401, "UNAUTHENTICATED")),
        (400, envelope(400, "INVALID_ARGUMENT", details=[{"reason": "API_KEY_INVALID"}])),
        (400, envelope(400, "INVALID_ARGUMENT", details=[{"reason": "API_KEY_EXPIRED"}])),
    ],
)
def test_a_refused_gateway_key_is_the_operators_problem_not_the_clients(
    upstream: FakeGemini, status: int, body: dict[str, Any]
) -> None:
    upstream.fail_with(status, body)

    with pytest.raises(UpstreamCredentialsRejected) as raised:
        with_upstream(upstream.base_url, generate())

    assert raised.value.code == 502
    assert UPSTREAM_KEY not in raised.value.message


def test_a_bad_request_that_is_not_about_the_key_passes_through(upstream: FakeGemini) -> None:
    upstream.fail_with(400, envelope(400, "INVALID_ARGUMENT", details=[{"reason": "OTHER"}]))

    with pytest.raises(UpstreamError) as raised:
        with_upstream(upstream.base_url, generate())

    assert raised.value.code == 400


def test_a_redirect_is_refused_not_followed(upstream: FakeGemini) -> None:
    upstream.fail_with(307, b"", headers={"location": "http://203.0.113.1/steal"})

    with pytest.raises(UpstreamBadResponse, match="redirect"):
        with_upstream(upstream.base_url, generate())

    assert len(upstream.requests) == 1


def test_an_answer_that_is_not_json_is_a_bad_response(upstream: FakeGemini) -> None:
    upstream.misbehave("malformed")

    with pytest.raises(UpstreamBadResponse, match="not JSON"):
        with_upstream(upstream.base_url, generate())


def test_a_reset_connection_is_unreachable(upstream: FakeGemini) -> None:
    upstream.misbehave("reset")

    with pytest.raises(UpstreamUnreachable, match="'gemini'"):
        with_upstream(upstream.base_url, generate())


def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there

    with pytest.raises(UpstreamUnreachable, match="could not connect"):
        with_upstream(f"http://127.0.0.1:{port}", generate())


def test_an_upstream_that_does_not_answer_times_out(upstream: FakeGemini) -> None:
    upstream.misbehave("hang")

    with pytest.raises(UpstreamTimeout, match=r"within 0\.2s \(upstream\.timeout_s\)"):
        with_upstream(upstream.base_url, generate(), read_timeout_s=SHORT_TIMEOUT_S)


def test_a_stream_is_asked_for_as_sse_and_decoded_event_by_event(upstream: FakeGemini) -> None:
    upstream.stream(["Hel", "lo", " there"])
    texts: list[str] = []

    with_upstream(upstream.base_url, stream_texts(texts))

    assert texts == ["Hel", "lo", " there"]
    assert upstream.requests[-1].query == (("alt", "sse"),)


def test_streams_with_and_without_a_query_of_their_own_keep_theirs(upstream: FakeGemini) -> None:
    # The URL kept per route for streams carries alt=sse; a stream with a query of its own
    # gets it added to that query, and a unary call on the same route gets neither.
    async def scenario(gemini: GeminiUpstream) -> None:
        for query in ((), (("$fields", "candidates"),), ()):
            await texts_of(await gemini.stream(UpstreamCall(STREAM, BODY, query=query)), [])
        with pytest.raises(UpstreamBadResponse):  # the fake streams on this path
            await gemini.unary(UpstreamCall(route=STREAM, body=BODY))

    with_upstream(upstream.base_url, scenario)

    assert [request.query for request in upstream.requests] == [
        (("alt", "sse"),),
        (("$fields", "candidates"), ("alt", "sse")),
        (("alt", "sse"),),
        (),
    ]


def test_a_stream_refused_before_it_starts_raises_at_once(upstream: FakeGemini) -> None:
    upstream.fail_with(503, envelope(503, "UNAVAILABLE"))

    with pytest.raises(UpstreamError) as raised:
        with_upstream(upstream.base_url, stream_texts([]))

    assert raised.value.code == 503


def test_a_stream_broken_off_raises_after_the_events_that_came(upstream: FakeGemini) -> None:
    upstream.stream(["one", "two", "three"], error_after=1)
    texts: list[str] = []

    with pytest.raises(UpstreamUnreachable, match="'gemini'"):
        with_upstream(upstream.base_url, stream_texts(texts))

    assert texts == ["one"]


def test_a_stream_that_is_not_sse_is_a_bad_response(upstream: FakeGemini) -> None:
    upstream.fail_with(200, [{"candidates": []}])

    with pytest.raises(UpstreamBadResponse, match="not Server-Sent Events"):
        with_upstream(upstream.base_url, stream_texts([]))


def test_a_stream_that_stalls_times_out(upstream: FakeGemini) -> None:
    hold = threading.Event()
    upstream.stream(["first", "never"], hold=hold)
    texts: list[str] = []
    try:
        with pytest.raises(UpstreamTimeout):
            with_upstream(upstream.base_url, stream_texts(texts), read_timeout_s=SHORT_TIMEOUT_S)
    finally:
        hold.set()  # lets the fake's handler finish

    assert texts == ["first"]


def test_closing_a_stream_early_drops_the_upstream_connection(upstream: FakeGemini) -> None:
    hold = threading.Event()
    upstream.stream(["first", "second"], hold=hold)

    async def scenario(gemini: GeminiUpstream) -> Any:
        reply = await gemini.stream(UpstreamCall(route=STREAM, body=BODY))
        first = await anext(reply.events)
        await reply.close()  # the client went away after one event
        return first

    try:
        first = with_upstream(upstream.base_url, scenario)
    finally:
        hold.set()  # the fake now writes the second event into a closed connection

    assert first["candidates"][0]["content"]["parts"][0]["text"] == "first"
    assert upstream.stream_abandoned.wait(INFRASTRUCTURE_TIMEOUT_S)
