"""The router: which upstreams may answer, per route and tenant."""

from __future__ import annotations

import pytest

from localgate.config import Settings
from localgate.errors import PermissionDenied, ServiceUnavailable
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


# -- routes, aliases, residency ---------------------------------------------------------

EU = ScriptedUpstream("eu")
US = ScriptedUpstream("us")
ROUTED = PolicySnapshot.build(
    Settings.model_validate(
        {
            "upstreams": {
                "eu": {"base_url": "http://eu.example"},
                "us": {"base_url": "http://us.example"},
            },
            "routes": [
                {"models": "gemini-flash", "model": "gemini-2.5-flash", "fallback": ["eu"]},
                {"models": ["gemini-2.5-pro*"], "tenants": ["acme"], "upstream": "eu"},
                {"models": "gemini-2.5-*", "upstream": "us", "fallback": ["eu", "default"]},
            ],
            "tenants": {"acme": {"upstreams": ["eu", "default"]}, "solo": {"upstreams": ["us"]}},
        }
    )
)


def routed() -> Router:
    return Router(GEMINI, LOCAL, named={"eu": EU, "us": US})


def test_an_alias_is_resolved_to_the_model_sent_upstream() -> None:
    route = match_route("POST", "/v1beta/models/gemini-flash:generateContent")

    plan = routed().plan(route, ROUTED.for_tenant("globex"), tenant="globex")

    assert plan.route.model == "models/gemini-2.5-flash"
    assert plan.route.upstream_path == "v1beta/models/gemini-2.5-flash:generateContent"
    assert plan.candidates == (GEMINI, EU)


def test_the_first_matching_route_wins_and_tenant_routes_apply_only_to_their_tenants() -> None:
    pro = match_route("POST", "/v1beta/models/gemini-2.5-pro:generateContent")
    # initech has no section under tenants:, so the default policy, but a route of its own.
    own = PolicySnapshot.build(
        Settings.model_validate(
            {
                "upstreams": {"eu": {"base_url": "http://eu.example"}},
                "routes": [{"models": "*", "tenants": ["initech"], "upstream": "eu"}],
            }
        )
    )
    assert routed().candidates(pro, own.for_tenant("initech"), tenant="initech") == (EU,)
    assert routed().candidates(pro, own.for_tenant("globex"), tenant="globex") == (GEMINI,)

    assert routed().candidates(pro, ROUTED.for_tenant("acme"), tenant="acme") == (EU,)
    assert routed().candidates(pro, ROUTED.for_tenant("globex"), tenant="globex") == (
        US,
        EU,
        GEMINI,
    )


def test_residency_removes_the_upstreams_a_tenant_may_not_reach() -> None:
    # globex's route is us -> eu -> default; acme may reach only eu and default.
    flash = match_route("POST", "/v1beta/models/gemini-2.5-flash-lite:generateContent")

    assert routed().candidates(flash, ROUTED.for_tenant("acme"), tenant="acme") == (EU, GEMINI)


def test_residency_that_leaves_nothing_refuses_and_says_why() -> None:
    alias = match_route("POST", "/v1beta/models/gemini-flash:generateContent")

    with pytest.raises(PermissionDenied, match="data-residency") as refused:
        routed().plan(alias, ROUTED.for_tenant("solo"), tenant="solo")

    assert "routes.0: default, eu" in refused.value.message
    assert "may reach us" in refused.value.message


def test_requests_no_route_takes_go_to_the_default_upstream() -> None:
    assert routed().candidates(LIST, ROUTED.for_tenant("globex")) == (GEMINI,)
    with pytest.raises(PermissionDenied):
        routed().candidates(LIST, ROUTED.for_tenant("solo"))


def test_a_route_to_an_upstream_not_running_is_unavailable_until_a_restart() -> None:
    pro = match_route("POST", "/v1beta/models/gemini-2.5-pro:generateContent")

    with pytest.raises(ServiceUnavailable, match="restart"):
        Router(GEMINI).plan(pro, ROUTED.for_tenant("acme"), tenant="acme")


def test_local_embeddings_stay_local_whatever_the_routes_say() -> None:
    keeps_local = PolicySnapshot.build(
        Settings.model_validate(
            {
                "local_embeddings": True,
                "upstreams": {"us": {"base_url": "http://us.example"}},
                "routes": [{"models": "*", "upstream": "us"}],
            }
        )
    ).default

    assert routed().candidates(EMBED, keeps_local) == (LOCAL,)


# -- canary splits ----------------------------------------------------------------------

SPLIT = PolicySnapshot.build(
    Settings.model_validate(
        {
            "upstreams": {"eu": {"base_url": "http://eu.example"}},
            "routes": [
                {
                    "models": "gemini-flash",
                    "model": "gemini-2.5-flash",
                    "fallback": ["eu"],
                    "split": [{"weight": 90}, {"model": "gemini-3-flash", "weight": 10}],
                },
                {
                    "models": "gemini-2.5-pro",
                    "sticky": "user",
                    "split": [{"weight": 1}, {"upstream": "eu", "weight": 1}],
                },
            ],
        }
    )
)
FLASH = match_route("POST", "/v1beta/models/gemini-flash:generateContent")
PRO = match_route("POST", "/v1beta/models/gemini-2.5-pro:generateContent")


def test_a_split_sends_each_tenant_to_one_side_in_the_configured_proportion() -> None:
    policy = SPLIT.default
    models = [
        routed().plan(FLASH, policy, tenant=f"tenant-{n}").route.model_id for n in range(2000)
    ]

    assert set(models) == {"gemini-2.5-flash", "gemini-3-flash"}
    assert 120 <= models.count("gemini-3-flash") <= 280  # 10% of 2000, give or take
    again = [routed().plan(FLASH, policy, tenant=f"tenant-{n}").route.model_id for n in range(50)]
    assert again == models[:50]  # sticky: the same tenant, the same side
    plan = routed().plan(FLASH, policy, tenant="tenant-1")
    assert plan.candidates == (GEMINI, EU)  # a model split keeps the route's chain


def test_a_split_sticky_per_user_keeps_each_user_on_one_upstream() -> None:
    policy = SPLIT.default
    chains = {
        user: routed().plan(PRO, policy, tenant="acme", user=user).candidates
        for user in (f"user-{n}" for n in range(200))
    }

    assert set(chains.values()) == {(GEMINI,), (EU,)}
    for user, chain in list(chains.items())[:20]:
        assert routed().plan(PRO, policy, tenant="other", user=user).candidates == chain
