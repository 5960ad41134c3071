"""The dispatcher: candidates in order, the attempt record, and when another may be tried."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from localgate.config import Settings
from localgate.errors import (
    InvalidArgument,
    LocalgateError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ServiceUnavailable,
    UpstreamBadResponse,
    UpstreamCredentialsRejected,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from localgate.exchange.context import RequestContext
from localgate.exchange.principal import Principal
from localgate.exchange.replies import UpstreamCall
from localgate.gemini.routes import match_route
from localgate.policy import TenantPolicy
from localgate.upstream import Router, UpstreamDispatcher
from localgate.upstream.dispatcher import retryable
from tests.upstream.fakes import ScriptedUpstream, answer

GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
STREAM = match_route("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent")
EMBED = match_route("POST", "/v1beta/models/gemini-embedding-001:embedContent")


def upstream_error(status: int) -> UpstreamError:
    return UpstreamError(status, {"error": {"code": status, "message": "no", "status": "X"}})


def context() -> RequestContext:
    return RequestContext(request_id="r1", route=GENERATE, principal=Principal("acme", "k1"))


def call(route: Any = GENERATE) -> UpstreamCall:
    return UpstreamCall(route=route, body={"contents": []})


def dispatcher(max_attempts: int = 1) -> UpstreamDispatcher:
    """Candidates in order, one attempt each (retries of one upstream: test_retries.py)."""
    return UpstreamDispatcher(
        Router(ScriptedUpstream("default")), max_attempts=max_attempts, attempts_per_upstream=1
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (UpstreamUnreachable("could not connect"), True),
        (UpstreamTimeout("too slow"), True),
        (UpstreamBadResponse("not JSON"), True),
        (UpstreamCredentialsRejected("key refused"), True),
        (ServiceUnavailable("no key configured"), True),
        (upstream_error(429), True),
        (upstream_error(500), True),
        (upstream_error(503), True),
        (upstream_error(400), False),
        (upstream_error(403), False),
        (upstream_error(404), False),
        (InvalidArgument("the local embedder embeds text only"), False),
        (PayloadTooLarge("too large"), False),
        (PermissionDenied("no"), False),
        (NotFound("no such route"), False),
        (LocalgateError("a defect"), False),
    ],
)
def test_only_failures_of_the_upstream_allow_another_attempt(
    error: LocalgateError, expected: bool
) -> None:
    assert retryable(error) is expected


def test_the_one_attempt_policy_does_not_try_the_second_candidate() -> None:
    first = ScriptedUpstream("first", error=upstream_error(503))  # retryable, were it allowed
    second = ScriptedUpstream("second")
    ctx = context()

    with pytest.raises(UpstreamError):
        asyncio.run(dispatcher().unary(ctx, (first, second), call()))

    assert (len(first.calls), len(second.calls)) == (1, 0)
    assert (ctx.upstream, ctx.attempt) == ("first", 1)


def test_a_second_attempt_goes_to_the_next_candidate_and_is_on_record() -> None:
    first = ScriptedUpstream("first", error=UpstreamUnreachable("could not connect"))
    second = ScriptedUpstream("second", events=[answer("from the second")])
    ctx = context()

    reply = asyncio.run(dispatcher(max_attempts=2).unary(ctx, (first, second), call()))

    assert reply.body == answer("from the second")
    assert (len(first.calls), len(second.calls)) == (1, 1)
    assert second.calls[0] is first.calls[0]  # the same call, not a copy
    assert (ctx.upstream, ctx.attempt) == ("second", 2)


def test_an_error_that_judges_the_request_is_not_tried_elsewhere() -> None:
    first = ScriptedUpstream("first", error=upstream_error(400))
    second = ScriptedUpstream("second")
    ctx = context()

    with pytest.raises(UpstreamError):
        asyncio.run(dispatcher(max_attempts=2).unary(ctx, (first, second), call()))

    assert second.calls == []
    assert (ctx.upstream, ctx.attempt) == ("first", 1)


def test_attempts_stop_at_the_last_candidate() -> None:
    only = ScriptedUpstream("only", error=upstream_error(503))
    ctx = context()

    with pytest.raises(UpstreamError):
        asyncio.run(dispatcher(max_attempts=3).unary(ctx, (only,), call()))

    assert (len(only.calls), ctx.attempt) == (1, 1)


def test_a_stream_the_first_candidate_refuses_goes_to_the_next() -> None:
    first = ScriptedUpstream("first", error=upstream_error(429))
    second = ScriptedUpstream("second")
    ctx = context()

    async def scenario() -> list[Any]:
        reply = await dispatcher(max_attempts=2).stream(ctx, (first, second), call(STREAM))
        try:
            return [event async for event in reply.events]
        finally:
            await reply.close()

    assert asyncio.run(scenario()) == second.events
    assert (ctx.upstream, ctx.attempt, second.closed) == ("second", 2, 1)


def test_a_stream_that_fails_once_accepted_is_not_tried_again() -> None:
    broken = UpstreamUnreachable("broke off")
    first = ScriptedUpstream("first", fail_mid_stream=broken)
    second = ScriptedUpstream("second")
    ctx = context()
    received: list[Any] = []

    async def scenario() -> None:
        reply = await dispatcher(max_attempts=2).stream(ctx, (first, second), call(STREAM))
        try:
            async for event in reply.events:
                received.append(event)
        finally:
            await reply.close()

    with pytest.raises(UpstreamUnreachable):
        asyncio.run(scenario())

    assert received == first.events  # what the client has seen stays the only answer
    assert second.calls == []
    assert (ctx.upstream, ctx.attempt) == ("first", 1)


def test_the_candidates_are_the_routers() -> None:
    default = ScriptedUpstream("gemini")
    local = ScriptedUpstream("local-embedder", local=True)
    dispatch = UpstreamDispatcher(Router(default, local))
    keeps_local = TenantPolicy.resolve(Settings(local_embeddings=True), None)

    assert dispatch.candidates(EMBED, keeps_local) == (local,)
    assert dispatch.candidates(GENERATE, keeps_local) == (default,)
