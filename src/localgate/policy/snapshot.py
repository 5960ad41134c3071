"""Each tenant's policy, resolved once from one configuration into an immutable snapshot.

The identity stage hands a request its tenant's ``TenantPolicy``; every later stage reads
its own section from there (redaction, cache, retrieval, local embeddings) and nothing
from the whole ``Settings``. A request keeps the policy it started with: a reload builds
a new snapshot and swaps it in, and requests in flight finish on the old one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import orjson

from localgate.config import (
    CacheSettings,
    RagSettings,
    RedactionRule,
    RedactionSettings,
    Settings,
    TenantLimitSettings,
)
from localgate.policy.routing import RoutingPolicy

__all__ = ["PolicySnapshot", "TenantPolicy", "config_hash"]

# Routing of a policy built without settings: everything to the default upstream.
_NO_ROUTING = RoutingPolicy()


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """What the stages apply to one tenant's requests, each stage reading its own section."""

    redaction: RedactionSettings
    # The configured custom rules: what they detect and what their own action is.
    redaction_rules: tuple[RedactionRule, ...]
    cache: CacheSettings
    rag: RagSettings
    local_embeddings: bool
    # Requests, tokens and concurrency: the tenant's own (limits.default for what it does
    # not set) and its keys' (localgate.limits reads them).
    limits: TenantLimitSettings = field(default_factory=TenantLimitSettings)
    # The configuration it was resolved from: its version in this process (1 at start, one
    # more per reload) and the hash of its effective settings, which the access log and the
    # audit record carry so a request can be tied to the configuration it ran under.
    version: int = 0
    config_hash: str = ""
    # Routes, model aliases and the upstreams this tenant may reach (the router's section).
    routing: RoutingPolicy = _NO_ROUTING
    # The tenant as metrics label it: a configured tenant's name, "other" for every tenant
    # the configuration does not name (a client cannot grow the metrics' label values).
    metrics_tenant: str = "other"

    @classmethod
    def resolve(
        cls, settings: Settings, tenant: str | None, version: int = 0, config_hash: str = ""
    ) -> TenantPolicy:
        """``tenant``'s policy under ``settings`` (None: the policy of unnamed tenants)."""
        name = tenant or ""
        return cls(
            redaction=settings.redaction_for(name) if tenant else settings.proxy.redaction,
            redaction_rules=settings.proxy.redaction_rules,
            cache=settings.cache_for(name),
            rag=settings.rag_for(name),
            local_embeddings=settings.local_embeddings_for(name),
            limits=settings.limits_for(name),
            version=version,
            config_hash=config_hash,
            routing=RoutingPolicy.resolve(settings, name),
            metrics_tenant=name or "other",
        )


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    """Every tenant's policy under one configuration version; never changed once built."""

    settings: Settings
    version: int
    hash: str
    source: str | None
    loaded_at: float
    default: TenantPolicy
    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        version: int = 1,
        source: str | None = None,
        loaded_at: float = 0.0,
    ) -> PolicySnapshot:
        """Resolve every configured tenant's policy (and the default) from ``settings``."""
        digest = config_hash(settings)
        return cls(
            settings=settings,
            version=version,
            hash=digest,
            source=source,
            loaded_at=loaded_at,
            default=TenantPolicy.resolve(settings, None, version, digest),
            tenants=MappingProxyType(
                {
                    name: TenantPolicy.resolve(settings, name, version, digest)
                    for name in settings.tenants
                }
            ),
        )

    def for_tenant(self, tenant: str) -> TenantPolicy:
        """``tenant``'s policy: its own if the configuration names it, else the default."""
        return self.tenants.get(tenant, self.default)

    def policies(self) -> list[TenantPolicy]:
        """The default policy and each named tenant's."""
        return [self.default, *self.tenants.values()]


def config_hash(settings: Settings) -> str:
    """A short digest of the effective configuration (file and environment; no secrets)."""
    dumped = settings.model_dump(mode="json")
    digest = hashlib.sha256(orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return digest[:16]
