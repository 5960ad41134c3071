"""Upstreams with ``redaction: false``: when a request may skip redaction, and the
dispatcher's promise that a request that skipped it never reaches an upstream that needs
it, by whatever way (a fallback, a plan built by hand, a split side)."""

from __future__ import annotations

import asyncio

import pytest

from localgate.config import Settings
from localgate.errors import ServiceUnavailable, UpstreamError
from localgate.exchange.context import RequestContext
from localgate.exchange.principal import Principal
from localgate.exchange.replies import UpstreamCall
from localgate.gemini.routes import match_route
from localgate.policy import PolicySnapshot
from localgate.upstream import Router, UpstreamDispatcher
from localgate.upstream.base import needs_redaction
from localgate.upstream.router import RoutePlan
from tests.upstream.fakes import ScriptedUpstream
from tests.upstream.test_dispatcher import upstream_error

GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
INHOUSE_MODEL = match_route("POST", "/v1beta/models/inhouse:generateContent")
MIXED_MODEL = match_route("POST", "/v1beta/models/mixed:generateContent")
SPLIT_MODEL = match_route("POST", "/v1beta/models/split:generateContent")


def in_house(name: str) -> ScriptedUpstream:
    upstream = ScriptedUpstream(name)
    upstream.redaction = False  # type: ignore[attr-defined]
    return upstream


POLICY = PolicySnapshot.build(
    Settings.model_validate(
        {
            "upstreams": {
                "a": {"kind": "openai", "base_url": "http://a:8000/v1", "redaction": False},
                "b": {"kind": "openai", "base_url": "http://b:8000/v1", "redaction": False},
                "eu": {"base_url": "http://eu.example"},
            },
            "routes": [
                {"models": "inhouse", "upstream": "a", "fallback": ["b"]},
                {"models": "mixed", "upstream": "a", "fallback": ["eu"]},
                {
                    "models": "split",
                    "upstream": "a",
                    "split": [{"upstream": "eu", "weight": 1}, {"weight": 1}],
                },
            ],
            "tenants": {"kept-in": {"upstreams": ["a"]}},
        }
    )
)


def router() -> Router:
    return Router(
        ScriptedUpstream("default"),
        named={"a": in_house("a"), "b": in_house("b"), "eu": ScriptedUpstream("eu")},
    )


def context() -> RequestContext:
    return RequestContext(request_id="r1", route=INHOUSE_MODEL, principal=Principal("acme", "k"))


def test_only_a_chain_of_in_house_upstreams_skips_redaction() -> None:
    policy = POLICY.default
    assert router().plan(INHOUSE_MODEL, policy).unredacted
    assert not router().plan(MIXED_MODEL, policy).unredacted
    assert not router().plan(GENERATE, policy).unredacted


def test_residency_can_make_a_mixed_chain_in_house_only() -> None:
    # kept-in may reach only a: the route's Gemini fallback is not a candidate at all.
    plan = router().plan(MIXED_MODEL, POLICY.for_tenant("kept-in"), tenant="kept-in")
    assert [u.name for u in plan.candidates] == ["a"]
    assert plan.unredacted


def test_each_side_of_a_split_decides_for_itself() -> None:
    policy = POLICY.default
    plans = [router().plan(SPLIT_MODEL, policy, tenant=f"t{n}") for n in range(40)]
    assert {p.candidates[0].name for p in plans} == {"a", "eu"}
    assert all(p.unredacted == (p.candidates[0].name == "a") for p in plans)


def test_a_plan_that_claims_to_skip_redaction_with_gemini_in_it_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="cannot skip"):
        RoutePlan(GENERATE, (in_house("a"), ScriptedUpstream("eu")), unredacted=True)


def test_anything_that_does_not_say_otherwise_needs_redaction() -> None:
    assert needs_redaction(ScriptedUpstream("x"))
    assert not needs_redaction(in_house("x"))


def test_an_unredacted_request_never_falls_back_to_an_upstream_that_needs_redaction() -> None:
    a = in_house("a")
    a.error = upstream_error(503)
    gemini = ScriptedUpstream("eu")
    dispatcher = UpstreamDispatcher(Router(gemini), max_attempts=5, attempts_per_upstream=1)
    ctx = context()
    ctx.redaction_skipped = "upstream policy: test"

    with pytest.raises(UpstreamError) as failed:  # the in-house server's own failure
        asyncio.run(dispatcher.unary(ctx, (a, gemini), UpstreamCall(route=INHOUSE_MODEL, body={})))

    assert gemini.calls == []
    assert ctx.attempts[-1] == {"upstream": "eu", "skipped": "not redacted"}
    assert failed.value.code == 503


def test_an_unredacted_request_with_only_gemini_left_is_refused_unsent() -> None:
    gemini = ScriptedUpstream("eu")
    dispatcher = UpstreamDispatcher(Router(gemini))
    ctx = context()
    ctx.redaction_skipped = "upstream policy: test"

    with pytest.raises(ServiceUnavailable, match="was not redacted"):
        asyncio.run(dispatcher.stream(ctx, (gemini,), UpstreamCall(route=INHOUSE_MODEL, body={})))

    assert gemini.calls == []


def test_a_redacted_request_may_go_anywhere() -> None:
    a = in_house("a")
    a.error = upstream_error(503)
    gemini = ScriptedUpstream("eu")
    dispatcher = UpstreamDispatcher(Router(gemini), max_attempts=5, attempts_per_upstream=1)

    asyncio.run(
        dispatcher.unary(context(), (a, gemini), UpstreamCall(route=INHOUSE_MODEL, body={}))
    )

    assert len(a.calls) == 1
    assert len(gemini.calls) == 1
