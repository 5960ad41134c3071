"""TenantAdmin: tenants from the configuration and the key store, with effective policies."""

from __future__ import annotations

from pathlib import Path

import pytest

from localgate.admin.keys import KeyAdmin
from localgate.admin.tenants import (
    CachePolicy,
    LimitsPolicy,
    PolicySummary,
    RagPolicy,
    RedactionPolicy,
    RouteSummary,
    RoutingSummary,
    TenantAdmin,
    is_tenant_name,
)
from localgate.config import RagSettings, Settings, load_settings
from localgate.errors import NotFound

CONFIG = """\
proxy:
  redaction:
    actions: {EMAIL: mask}
cache: {ttl_s: 600}
rag: {top_k: 3}
upstreams:
  onprem: {base_url: "http://onprem.example"}
routes:
  - {models: ["gemma-*"], tenants: [acme], upstream: onprem}
  - {models: ["gemini-2.5-*"], upstream: default, fallback: [onprem], model: gemini-flash}
tenants:
  acme:
    upstreams: [onprem]
    redaction:
      default_action: mask
      actions: {PERSON: block, EMAIL: mask}
    cache: {enabled: true, semantic: true}
    rag: {enabled: true, collection: handbook, min_similarity: 0.2}
    local_embeddings: true
  globex:
    redaction: {enabled: false}
"""


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    config = tmp_path / "localgate.yaml"
    config.write_text(CONFIG)
    return load_settings(config, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})[0]


def test_tenants_come_from_the_configuration_and_the_keys(settings: Settings) -> None:
    with KeyAdmin.open(settings) as keys:
        keys.create("acme")
        keys.revoke(keys.create("acme").key_id)
        keys.create("zeta")
        found = TenantAdmin(settings, keys).list()

    assert [(t.name, t.configured, t.active_keys, t.revoked_keys) for t in found] == [
        ("acme", True, 1, 1),
        ("globex", True, 0, 0),
        ("zeta", False, 1, 0),
    ]


def test_the_policy_is_the_global_one_with_the_tenants_changes(settings: Settings) -> None:
    with KeyAdmin.open(settings) as keys:
        admin = TenantAdmin(settings, keys)
        acme = admin.get("acme").policy
        globex = admin.get("globex").policy
        unknown = admin.policy("nobody")

    # Only the types whose action differs from the tenant's default are listed.
    assert acme.redaction.default_action == "mask"
    assert acme.redaction.actions == {"PERSON": "block"}
    assert (acme.cache.enabled, acme.cache.exact, acme.cache.semantic) == (True, True, True)
    assert acme.cache.ttl_s == 600
    assert (acme.rag.enabled, acme.rag.collection, acme.rag.top_k) == (True, "handbook", 3)
    assert acme.rag.min_similarity == 0.2
    assert acme.local_embeddings is True
    assert globex.redaction.enabled is False
    assert globex.redaction.actions == {"EMAIL": "mask"}
    assert (globex.cache.enabled, globex.rag.enabled, globex.local_embeddings) == (
        False,
        False,
        False,
    )
    assert unknown == PolicySummary(
        redaction=RedactionPolicy(
            enabled=True,
            default_action="pseudonymize",
            actions={"EMAIL": "mask"},
            binary_data="block",
            detect_names=True,
            scan_answers=False,
        ),
        cache=CachePolicy(enabled=False, exact=True, semantic=False, ttl_s=600),
        rag=RagPolicy(
            enabled=False, collection=None, top_k=3, min_similarity=RagSettings().min_similarity
        ),
        local_embeddings=False,
        limits=LimitsPolicy(
            requests_per_minute=None,
            tokens_per_minute=None,
            tokens_per_day=None,
            concurrent_requests=None,
            priority="normal",
            queue_timeout_s=0.0,
            keys=(),
        ),
        routing=RoutingSummary(
            routes=(
                RouteSummary(
                    models=("gemini-2.5-*",), chain=("default", "onprem"), model="gemini-flash"
                ),
            ),
            default_chain=("default",),
            allowed_upstreams=None,
        ),
    )
    # Routes for other tenants are left out; residency limits the upstreams.
    assert [r.chain for r in acme.routing.routes] == [("onprem",), ("default", "onprem")]
    assert acme.routing.allowed_upstreams == ("onprem",)


def test_a_tenant_nobody_names_is_not_found(settings: Settings) -> None:
    with KeyAdmin.open(settings) as keys, pytest.raises(NotFound, match="no tenant 'nobody'"):
        TenantAdmin(settings, keys).get("nobody")


def test_tenant_names() -> None:
    assert is_tenant_name("acme.prod-1_a")
    assert not is_tenant_name("")
    assert not is_tenant_name("*")
    assert not is_tenant_name("a b")
