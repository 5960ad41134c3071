"""The OpenAI-compatible adapter against the fake server on loopback: keys, errors and
their classes, the probe and its cache, the catalogue."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from localgate.errors import (
    NotFound,
    UpstreamBadResponse,
    UpstreamCredentialsRejected,
    UpstreamError,
    UpstreamUnreachable,
)
from localgate.exchange.replies import UpstreamCall
from localgate.gemini.routes import match_route
from localgate.secret import Secret
from localgate.testing import FakeOpenAI
from localgate.upstream.dispatcher import retryable, worth_repeating
from localgate.upstream.gemini import open_session
from localgate.upstream.openai_compat import OpenAICompatUpstream

GENERATE = match_route("POST", "/v1beta/models/gemini-inhouse:generateContent")
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
T = TypeVar("T")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeOpenAI) -> FakeOpenAI:
    server.reset()
    return server


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(
    base_url: str,
    use: Callable[[OpenAICompatUpstream], Awaitable[T]],
    **options: Any,
) -> T:
    async def scenario() -> T:
        session = open_session(4, 10.0, 60.0)
        try:
            upstream = OpenAICompatUpstream(
                "inhouse", base_url, session, 60.0, lambda body: 1, **options
            )
            return await use(upstream)
        finally:
            await session.close()

    return asyncio.run(scenario())


def generate(upstream: OpenAICompatUpstream) -> Awaitable[Any]:
    return upstream.unary(UpstreamCall(route=GENERATE, body=BODY))


def test_keys_are_sent_as_bearer_and_a_throttled_key_sits_out(fake: FakeOpenAI) -> None:
    fake.fail_with(429, {"error": {"message": "slow down"}}, {"retry-after": "30"}, times=1)
    keys = (Secret("sk-one"), Secret("sk-two"))

    async def twice(upstream: OpenAICompatUpstream) -> str:
        with pytest.raises(UpstreamError) as throttled:
            await generate(upstream)
        # Another key is ready now: the dispatcher may ask again at once.
        assert throttled.value.retry_after == 0.0
        assert throttled.value.status_name == "RESOURCE_EXHAUSTED"
        reply = await generate(upstream)
        return str(reply.body["candidates"][0]["content"]["parts"][0]["text"])

    assert run(fake.base_url, twice, keys=keys) == "echo: hi"
    assert [r.headers["authorization"] for r in fake.requests] == [
        "Bearer sk-one",
        "Bearer sk-two",
    ]


def test_a_429_on_the_only_key_keeps_the_servers_wait(fake: FakeOpenAI) -> None:
    fake.fail_with(429, {"error": {"message": "slow down"}}, {"retry-after": "7"})

    async def once(upstream: OpenAICompatUpstream) -> UpstreamError:
        with pytest.raises(UpstreamError) as throttled:
            await generate(upstream)
        return throttled.value

    error = run(fake.base_url, once, keys=(Secret("sk-one"),))
    assert error.retry_after == 7.0
    assert retryable(error)
    assert worth_repeating(error)


@pytest.mark.parametrize(
    ("status", "body", "expected", "retried"),
    [
        (500, {"object": "error", "message": "engine died", "code": 500}, UpstreamError, True),
        (400, {"error": {"message": "context too long"}}, UpstreamError, False),
        (404, {"error": {"message": "model x not found"}}, UpstreamError, False),
        (401, {"error": {"message": "bad key"}}, UpstreamCredentialsRejected, True),
        (302, "", UpstreamBadResponse, True),
    ],
)
def test_errors_become_the_classes_the_dispatcher_knows(
    fake: FakeOpenAI, status: int, body: Any, expected: type[Exception], retried: bool
) -> None:
    fake.fail_with(status, body, {"location": "http://elsewhere.example/"} if status == 302 else {})

    async def once(upstream: OpenAICompatUpstream) -> Exception:
        with pytest.raises(expected) as failed:
            await generate(upstream)
        return failed.value

    error = run(fake.base_url, once)
    assert retryable(error) is retried  # type: ignore[arg-type]
    if isinstance(error, UpstreamError):
        envelope = error.envelope()["error"]
        assert envelope["code"] == status
        message = body.get("message") or body["error"]["message"]
        assert message in envelope["message"]
        assert "'inhouse'" in envelope["message"]
    assert len(fake.requests) == 1


def test_an_unreachable_server(fake: FakeOpenAI) -> None:
    with FakeOpenAI() as stopped:
        url = stopped.base_url

    async def once(upstream: OpenAICompatUpstream) -> None:
        with pytest.raises(UpstreamUnreachable):
            await generate(upstream)

    run(url, once)


def test_a_model_outside_the_mapping_is_not_found_and_nothing_is_sent(fake: FakeOpenAI) -> None:
    async def once(upstream: OpenAICompatUpstream) -> str:
        with pytest.raises(NotFound) as missing:
            await generate(upstream)
        return missing.value.message

    message = run(fake.base_url, once, models={"other": "x"})
    assert "gemini-inhouse" in message
    assert "other" in message
    assert fake.requests == []


def test_the_probe_is_cached_for_its_interval(fake: FakeOpenAI) -> None:
    clock = Clock()

    async def probes(upstream: OpenAICompatUpstream) -> list[str | None]:
        results = [await upstream.probe()]
        fake.fail_with(503, {"error": {"message": "loading"}})
        results.append(await upstream.probe())  # cached: still fine
        clock.now = 31.0
        results.append(await upstream.probe())
        return results

    first, cached, later = run(fake.base_url, probes, clock=clock, probe_interval_s=30.0)
    assert (first, cached) == (None, None)
    assert later is not None
    assert "HTTP 503" in later
    assert [r.path for r in fake.requests] == ["/v1/models", "/v1/models"]


def test_the_catalogue_lists_the_mapping_or_what_the_server_serves(fake: FakeOpenAI) -> None:
    fake.serve_models("llama3.1:8b", "qwen2.5")

    async def listing(upstream: OpenAICompatUpstream) -> list[str]:
        return [entry["name"] for entry in await upstream.catalogue()]

    # llama3.1:8b cannot be a Gemini model name (the colon): only a mapping can offer it.
    assert run(fake.base_url, listing) == ["models/qwen2.5"]
    assert run(fake.base_url, listing, models={"gemini-llama": "llama3.1:8b"}) == [
        "models/gemini-llama"
    ]
