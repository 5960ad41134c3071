"""GeminiUpstream's key pool against the fake Gemini API: a throttled key cools down for
the upstream's Retry-After, the others carry on, and with none left nothing is sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from localgate.errors import UpstreamError
from localgate.exchange.replies import UpstreamCall
from localgate.gemini.routes import match_route
from localgate.secret import Secret
from localgate.testing import FakeGemini
from localgate.upstream import GeminiUpstream
from localgate.upstream.gemini import open_session
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
CALL = UpstreamCall(route=GENERATE, body={"contents": [{"parts": [{"text": "hi"}]}]})
QUOTA = {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(upstream_url: str, clock: Clock, steps: Any) -> list[Any]:
    """Run ``steps(upstream)`` with a two-key upstream; returns what it returned."""

    async def main() -> list[Any]:
        session = open_session(4, INFRASTRUCTURE_TIMEOUT_S, INFRASTRUCTURE_TIMEOUT_S)
        upstream = GeminiUpstream(
            name="pooled",
            base_url=upstream_url,
            api_key=None,
            session=session,
            read_timeout_s=INFRASTRUCTURE_TIMEOUT_S,
            keys=[Secret("key-a"), Secret("key-b")],
            key_cooldown_s=60,
            clock=clock,
        )
        try:
            result: list[Any] = await steps(upstream)
            return result
        finally:
            await session.close()

    return asyncio.run(main())


async def outcome(upstream: GeminiUpstream) -> int | str:
    try:
        await upstream.unary(CALL)
    except UpstreamError as exc:
        return exc.code
    return "ok"


def test_keys_rotate_and_a_throttled_one_sits_out_its_retry_after(
    upstream: FakeGemini,
) -> None:
    clock = Clock()

    async def steps(pooled: GeminiUpstream) -> list[Any]:
        results = [await outcome(pooled)]  # key-a
        upstream.fail_with(429, QUOTA, {"retry-after": "30"}, times=1)
        results.append(await outcome(pooled))  # key-b: throttled for 30 s
        results += [await outcome(pooled), await outcome(pooled)]  # key-a twice
        clock.now = 30
        results.append(await outcome(pooled))  # key-b again
        return results

    assert run(upstream.base_url, clock, steps) == ["ok", 429, "ok", "ok", "ok"]
    sent = [r.headers["x-goog-api-key"] for r in upstream.requests]
    assert sent == ["key-a", "key-b", "key-a", "key-a", "key-b"]


def test_with_every_key_throttled_the_one_ready_soonest_is_used_and_the_wait_said(
    upstream: FakeGemini,
) -> None:
    clock = Clock()
    details = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}]
    upstream.fail_with(429, {"error": {**QUOTA["error"], "details": details}}, times=3)

    async def steps(pooled: GeminiUpstream) -> list[Any]:
        errors = []
        for seconds in (0, 1, 0):
            clock.now += seconds
            with pytest.raises(UpstreamError) as raised:
                await pooled.unary(CALL)
            errors.append(raised.value)
        return errors

    first, second, third = run(upstream.base_url, clock, steps)

    # From RetryInfo; the first time, the other key was still usable: no need to wait.
    assert [e.retry_after for e in (first, second, third)] == [0.0, 12.0, 12.0]
    assert third.message == "Quota exceeded."  # the upstream's own answer, not the gateway's
    sent = [r.headers["x-goog-api-key"] for r in upstream.requests]
    assert sent == ["key-a", "key-b", "key-a"]  # key-a's cool-down ends first
