"""The router: which upstreams may answer, per route and tenant."""

from __future__ import annotations

import pytest

from localgate.config import Settings
from localgate.gemini.routes import GeminiRoute, match_route
from localgate.policy import PolicySnapshot
from localgate.upstream import Router
from tests.upstream.fakes import ScriptedUpstream

EMBED = match_route("POST", "/v1beta/models/gemini-embedding-001:embedContent")
BATCH_EMBED = match_route("POST", "/v1beta/models/gemini-embedding-001:batchEmbedContents")
GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
STREAM = match_route("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent")
COUNT = match_route("POST", "/v1beta/models/gemini-2.5-flash:countTokens")
LIST = match_route("GET", "/v1beta/models")

GEMINI = ScriptedUpstream("gemini")
LOCAL = ScriptedUpstream("local-embedder", local=True)
# acme keeps its embeddings local; globex does not.
POLICIES = PolicySnapshot.build(
    Settings.model_validate({"tenants": {"acme": {"local_embeddings": True}}})
)
ACME, GLOBEX = POLICIES.for_tenant("acme"), POLICIES.for_tenant("globex")


def router() -> Router:
    """The gateway's router, with a local embedder."""
    return Router(GEMINI, LOCAL)


@pytest.mark.parametrize("route", [EMBED, BATCH_EMBED])
def test_embeddings_of_a_tenant_that_keeps_them_local_stay_in_house(route: GeminiRoute) -> None:
    assert router().candidates(route, ACME) == (LOCAL,)


@pytest.mark.parametrize("route", [EMBED, BATCH_EMBED])
def test_embeddings_of_other_tenants_go_to_gemini(route: GeminiRoute) -> None:
    assert router().candidates(route, GLOBEX) == (GEMINI,)


@pytest.mark.parametrize("route", [GENERATE, STREAM, COUNT, LIST])
def test_everything_but_embeddings_goes_to_gemini_also_for_that_tenant(
    route: GeminiRoute,
) -> None:
    assert router().candidates(route, ACME) == (GEMINI,)


def test_without_a_policy_or_a_local_embedder_embeddings_go_to_gemini() -> None:
    assert router().candidates(EMBED, None) == (GEMINI,)
    assert Router(GEMINI, None).candidates(EMBED, ACME) == (GEMINI,)


def test_candidates_never_mix_upstreams_inside_and_outside_the_gateway() -> None:
    routing = router()
    for route in (EMBED, BATCH_EMBED, GENERATE, STREAM, COUNT, LIST):
        for principal in (ACME, GLOBEX, None):
            candidates = routing.candidates(route, principal)
            assert candidates
            assert len({upstream.local for upstream in candidates}) == 1


def test_every_configured_upstream_is_listed_for_readiness() -> None:
    assert router().upstreams == (GEMINI, LOCAL)
    assert Router(GEMINI).upstreams == (GEMINI,)
