"""The pipeline with in-process stages: their order, and one ending per request however it
goes (one completion record where the trail owes one, one access-log line, one count, the
permit given back once)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from localgate.config import Settings
from localgate.errors import (
    ClientClosedRequest,
    InvalidArgument,
    LocalgateError,
    NotFound,
    ServiceUnavailable,
    UpstreamUnreachable,
)
from localgate.exchange.outcome import Outcome
from localgate.exchange.replies import StreamReply, UnaryReply
from localgate.gemini.routes import match_route
from localgate.pipeline import Reply
from localgate.policy import PolicySnapshot
from tests.pipeline.fakes import Completed, Gateway, MakeGateway, inbound, new_context
from tests.upstream.fakes import ScriptedUpstream, answer

STREAM = match_route("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent")


def run(gateway: Gateway, **kwargs: Any) -> Reply:
    return asyncio.run(gateway.pipeline.run(new_context(), inbound(**kwargs)))


def test_the_stages_run_in_the_order_of_the_design(make_gateway: MakeGateway) -> None:
    gateway = make_gateway(ScriptedUpstream("gemini"))

    reply = run(gateway, journal=gateway.journal)

    assert isinstance(reply, UnaryReply)
    assert gateway.journal == [
        "identity",
        "body",
        "limits",
        "redaction",
        "retrieval",
        "cache lookup",
        "audit request",
        "upstream gemini",
        "restore",
        "audit forwarded",  # durable before the answer goes out ...
        "permit released",  # ... then the capacity is given back ...
        "cache complete",  # ... and the answer may be stored
    ]


def test_a_policy_without_redaction_skips_the_stage(make_gateway: MakeGateway) -> None:
    """Not entered at all (no batch to wait for), the other stages as ever."""
    settings = Settings.model_validate({"proxy": {"redaction": {"enabled": False}}})
    gateway = make_gateway(ScriptedUpstream("gemini"), policies=PolicySnapshot.build(settings))

    reply = run(gateway, journal=gateway.journal)

    assert isinstance(reply, UnaryReply)
    assert "redaction" not in gateway.journal
    assert gateway.journal[:4] == ["identity", "body", "limits", "retrieval"]
    registry = gateway.metrics.registry
    count = "localgate_stage_duration_seconds_count"
    assert registry.get_sample_value(count, {"stage": "redaction"}) in (None, 0)
    assert registry.get_sample_value(count, {"stage": "identity"}) == 1


@dataclass(frozen=True)
class Ending:
    """One way a request can end, and what it must leave behind."""

    setup: Callable[[Gateway], None]
    outcome: Outcome
    status: int
    audited: bool = True  # the trail gets a completion record
    admitted: bool = True  # the limits handed out a permit
    key: str = "lg_good"
    body_failure: Exception | None = None


def _nothing(gateway: Gateway) -> None:
    return None


def _cached(gateway: Gateway) -> None:
    gateway.cache.stored = answer("stored earlier")


def _blocked(gateway: Gateway) -> None:
    gateway.redaction.error = InvalidArgument("personal data the policy blocks")


def _redactor_broken(gateway: Gateway) -> None:
    gateway.redaction.error = LocalgateError("Redaction failed inside localgate.")


def _retrieval_refused(gateway: Gateway) -> None:
    gateway.retrieval.error = NotFound("no such collection")


def _retrieval_defect(gateway: Gateway) -> None:
    gateway.retrieval.failure = RuntimeError("a bug")


def _upstream_down(gateway: Gateway) -> None:
    gateway.upstream.error = UpstreamUnreachable("could not connect")


def _trail_refuses(gateway: Gateway) -> None:
    gateway.audit.refuse_requests = True


ENDINGS = {
    "forwarded": Ending(_nothing, Outcome.FORWARDED, 200),
    "cache hit": Ending(_cached, Outcome.SERVED_FROM_CACHE, 200),
    "blocked by policy": Ending(_blocked, Outcome.BLOCKED_BY_POLICY, 400),
    "redactor failed": Ending(_redactor_broken, Outcome.REDACTION_FAILED, 500),
    "retrieval refused": Ending(_retrieval_refused, Outcome.RETRIEVAL_FAILED, 404),
    "internal error": Ending(_retrieval_defect, Outcome.INTERNAL_ERROR, 500),
    "upstream error": Ending(_upstream_down, Outcome.UPSTREAM_ERROR, 502),
    "unknown key": Ending(
        _nothing, Outcome.REFUSED, 401, audited=False, admitted=False, key="lg_bad"
    ),
    "client left during the body": Ending(
        _nothing,
        Outcome.CLIENT_DISCONNECTED,
        499,
        audited=False,
        admitted=False,
        body_failure=ClientClosedRequest("gone"),
    ),
    "trail declines the request record": Ending(
        _trail_refuses, Outcome.REFUSED, 503, audited=False
    ),
}


@pytest.mark.parametrize("ending", ENDINGS.values(), ids=ENDINGS.keys())
def test_every_ending_is_written_once(make_gateway: MakeGateway, ending: Ending) -> None:
    gateway = make_gateway(ScriptedUpstream("gemini"))
    ending.setup(gateway)
    ctx = new_context()
    raised: LocalgateError | None = None

    try:
        asyncio.run(gateway.pipeline.run(ctx, inbound(key=ending.key, failure=ending.body_failure)))
    except LocalgateError as exc:
        raised = exc

    assert ctx.outcome is ending.outcome
    assert (raised.code if raised else 200) == ending.status
    expected = [Completed("r1", ending.outcome, ending.status, answer_sent=False)]
    assert gateway.audit.completions == (expected if ending.audited else [])
    [record] = gateway.access_records()
    assert record["status"] == ending.status
    assert ("error" in record) is (ending.status != 200)
    assert gateway.requests_counted() == 1
    assert gateway.permits_released() == ([1] if ending.admitted else [])


def test_an_internal_error_tells_the_client_only_the_request_id(make_gateway: MakeGateway) -> None:
    gateway = make_gateway(ScriptedUpstream("gemini"))
    gateway.retrieval.failure = RuntimeError("secret internals")

    with pytest.raises(LocalgateError) as raised:
        run(gateway)

    assert "request id r1" in raised.value.message
    assert "secret internals" not in raised.value.message


def test_an_answer_whose_completion_cannot_be_written_is_withheld(
    make_gateway: MakeGateway,
) -> None:
    gateway = make_gateway(ScriptedUpstream("gemini"))
    gateway.audit.store_down = True
    ctx = new_context()

    with pytest.raises(ServiceUnavailable):
        asyncio.run(gateway.pipeline.run(ctx, inbound()))

    assert ctx.outcome is Outcome.WITHHELD
    assert gateway.audit.completions == [Completed("r1", Outcome.FORWARDED, 200, False)]
    [record] = gateway.access_records()
    assert (record["status"], record["error"]) == (503, "UNAVAILABLE")
    assert gateway.permits_released() == [1]
    assert "cache complete" not in gateway.journal  # an answer nobody got is not stored


def test_a_request_cancelled_in_flight_ends_and_gives_its_permit_back(
    make_gateway: MakeGateway,
) -> None:
    upstream = ScriptedUpstream("gemini", never_answer=True)
    gateway = make_gateway(upstream)
    ctx = new_context()

    async def scenario() -> None:
        task = asyncio.create_task(gateway.pipeline.run(ctx, inbound()))
        await upstream.called.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())

    assert gateway.audit.completions == [
        Completed("r1", Outcome.CLIENT_DISCONNECTED, 499, answer_sent=False)
    ]
    assert [r["status"] for r in gateway.access_records()] == [499]
    assert gateway.permits_released() == [1]


def test_the_local_embedder_is_on_record_as_answering_in_house(make_gateway: MakeGateway) -> None:
    gateway = make_gateway(ScriptedUpstream("local-embedder", local=True))
    ctx = new_context()

    asyncio.run(gateway.pipeline.run(ctx, inbound()))

    assert ctx.served_from == {"local": "local-embedder"}
    assert gateway.access_records()[0]["upstream"] == "local-embedder"


def test_the_attempt_record_reaches_the_access_log(make_gateway: MakeGateway) -> None:
    failing = ScriptedUpstream("first", error=UpstreamUnreachable("could not connect"))
    one = make_gateway(failing)
    two = make_gateway(
        ScriptedUpstream("first", error=UpstreamUnreachable("could not connect")),
        fallback=ScriptedUpstream("second"),
        max_attempts=2,
    )

    with pytest.raises(UpstreamUnreachable):
        run(one)
    run(two)

    [refused] = one.access_records()
    assert (refused["upstream"], "attempt" in refused) == ("first", False)
    [answered] = two.access_records()
    assert (answered["status"], answered["upstream"], answered["attempt"]) == (200, "second", 2)


# -- streams ------------------------------------------------------------------------


def stream_context() -> Any:
    return new_context(route=STREAM)


def test_a_stream_ends_after_its_last_event_before_its_end_goes_out(
    make_gateway: MakeGateway,
) -> None:
    upstream = ScriptedUpstream("gemini")
    gateway = make_gateway(upstream)
    received: list[Any] = []

    async def scenario() -> None:
        reply = await gateway.pipeline.run(stream_context(), inbound())
        assert isinstance(reply, StreamReply)
        async for event in reply.events:
            received.append(event)
            assert gateway.audit.completions == []  # not while events are still coming
        # The events are over; the front door sends the stream's end only now.
        assert gateway.audit.completions == [Completed("r1", Outcome.FORWARDED, 200, True)]
        assert len(gateway.access_records()) == 1
        await reply.close()

    asyncio.run(scenario())

    assert received == upstream.events
    assert gateway.audit.completions == [Completed("r1", Outcome.FORWARDED, 200, True)]
    assert [r["status"] for r in gateway.access_records()] == [200]
    assert gateway.permits_released() == [1]
    assert upstream.closed == 1
    assert gateway.journal[-4:] == [
        "finish stream",
        "cache complete",
        "audit forwarded",
        "permit released",
    ]


def test_a_stream_failing_midway_is_an_upstream_error(make_gateway: MakeGateway) -> None:
    upstream = ScriptedUpstream("gemini", fail_mid_stream=UpstreamUnreachable("broke off"))
    gateway = make_gateway(upstream)

    async def scenario() -> None:
        reply = await gateway.pipeline.run(stream_context(), inbound())
        assert isinstance(reply, StreamReply)
        try:
            with pytest.raises(UpstreamUnreachable):
                async for _ in reply.events:
                    pass
        finally:
            await reply.close()

    asyncio.run(scenario())

    assert gateway.audit.completions == [Completed("r1", Outcome.UPSTREAM_ERROR, 502, True)]
    [record] = gateway.access_records()
    assert (record["status"], record["error"]) == (502, "UNAVAILABLE")
    assert gateway.permits_released() == [1]
    assert "cache complete" not in gateway.journal


def test_a_client_leaving_mid_stream_is_recorded_as_client_disconnected(
    make_gateway: MakeGateway,
) -> None:
    upstream = ScriptedUpstream("gemini")
    gateway = make_gateway(upstream)

    async def scenario() -> None:
        upstream.hold = asyncio.Event()  # the second event never comes
        reply = await gateway.pipeline.run(stream_context(), inbound())
        assert isinstance(reply, StreamReply)
        await anext(reply.events)
        await reply.close()  # what the front door does when the client has gone

    asyncio.run(scenario())

    assert upstream.closed == 1
    assert gateway.audit.completions == [
        Completed("r1", Outcome.CLIENT_DISCONNECTED, 499, answer_sent=True)
    ]
    [record] = gateway.access_records()
    assert (record["status"], record["error"]) == (499, "CANCELLED")
    assert gateway.permits_released() == [1]
    assert "cache complete" not in gateway.journal


def test_a_defect_mid_stream_is_an_internal_error(make_gateway: MakeGateway) -> None:
    gateway = make_gateway(ScriptedUpstream("gemini"))
    gateway.redaction.event_failure = RuntimeError("a bug")

    async def scenario() -> None:
        reply = await gateway.pipeline.run(stream_context(), inbound())
        assert isinstance(reply, StreamReply)
        try:
            with pytest.raises(LocalgateError, match="request id r1"):
                await anext(reply.events)
        finally:
            await reply.close()

    asyncio.run(scenario())

    assert gateway.audit.completions == [Completed("r1", Outcome.INTERNAL_ERROR, 500, True)]
    assert [r["status"] for r in gateway.access_records()] == [500]
    assert gateway.permits_released() == [1]


def test_a_stream_refused_before_it_starts_is_an_upstream_error(make_gateway: MakeGateway) -> None:
    gateway = make_gateway(ScriptedUpstream("gemini", error=UpstreamUnreachable("down")))

    with pytest.raises(UpstreamUnreachable):
        asyncio.run(gateway.pipeline.run(stream_context(), inbound()))

    assert gateway.audit.completions == [Completed("r1", Outcome.UPSTREAM_ERROR, 502, False)]
    assert gateway.permits_released() == [1]


def test_a_stream_from_the_cache_is_one_event_and_stored_once(make_gateway: MakeGateway) -> None:
    upstream = ScriptedUpstream("gemini")
    gateway = make_gateway(upstream)
    gateway.cache.stored = answer("stored earlier")

    async def scenario() -> list[Any]:
        reply = await gateway.pipeline.run(stream_context(), inbound())
        assert isinstance(reply, StreamReply)
        try:
            return [event async for event in reply.events]
        finally:
            await reply.close()

    events = asyncio.run(scenario())

    assert events == [answer("stored earlier")]
    assert upstream.calls == []
    assert gateway.audit.completions == [
        Completed("r1", Outcome.SERVED_FROM_CACHE, 200, answer_sent=True)
    ]
    assert [r["cache"] for r in gateway.access_records()] == ["hit; layer=exact"]
    assert "cache complete" not in gateway.journal
