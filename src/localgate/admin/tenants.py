"""Tenants: those the configuration and the key store know, with their effective policy."""

from __future__ import annotations

from dataclasses import dataclass

from localgate.admin.keys import KeyAdmin
from localgate.config import Settings
from localgate.errors import NotFound
from localgate.identity.keys import TENANT_FORMAT
from localgate.policy.snapshot import PolicySnapshot

__all__ = [
    "CachePolicy",
    "LimitsPolicy",
    "PolicySummary",
    "RagPolicy",
    "RedactionPolicy",
    "RouteSummary",
    "RoutingSummary",
    "TenantAdmin",
    "TenantSummary",
    "is_tenant_name",
]


def is_tenant_name(name: str) -> bool:
    """Whether ``name`` can name a tenant: 1-64 letters, digits, '.', '_' or '-'."""
    return TENANT_FORMAT.match(name) is not None


@dataclass(frozen=True, slots=True)
class RedactionPolicy:
    """What happens to personal data in the tenant's requests."""

    enabled: bool
    default_action: str
    actions: dict[str, str]  # the types whose action differs from the default
    binary_data: str
    detect_names: bool
    scan_answers: bool


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """Whether and how the tenant's answers are cached."""

    enabled: bool
    exact: bool
    semantic: bool
    ttl_s: float


@dataclass(frozen=True, slots=True)
class RagPolicy:
    """Whether and from which collection the tenant's requests get retrieved passages."""

    enabled: bool
    collection: str | None
    top_k: int
    min_similarity: float


@dataclass(frozen=True, slots=True)
class LimitsPolicy:
    """A tenant's limits (None: no such limit) and the keys with limits of their own."""

    requests_per_minute: int | None
    tokens_per_minute: int | None
    tokens_per_day: int | None
    concurrent_requests: int | None
    priority: str
    queue_timeout_s: float
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RouteSummary:
    """A route that takes the tenant's requests: for which models (shell-style globs), to
    which upstreams in order, and the model asked for instead (None: the one requested)."""

    models: tuple[str, ...]
    chain: tuple[str, ...]
    model: str | None


@dataclass(frozen=True, slots=True)
class RoutingSummary:
    """Where the tenant's requests may go: its routes (first match wins), where the others
    go, and the upstreams it may reach at all (None: every one)."""

    routes: tuple[RouteSummary, ...]
    default_chain: tuple[str, ...]
    allowed_upstreams: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """A tenant's effective policy: the global settings with its own changes applied."""

    redaction: RedactionPolicy
    cache: CachePolicy
    rag: RagPolicy
    local_embeddings: bool
    limits: LimitsPolicy
    routing: RoutingSummary


@dataclass(frozen=True, slots=True)
class TenantSummary:
    """One tenant: where it is known from, its keys, its effective policy."""

    name: str
    configured: bool  # has a section under ``tenants:``; else the global policy applies
    active_keys: int
    revoked_keys: int
    policy: PolicySummary


class TenantAdmin:
    """Reads tenants from the configuration and the key store (it changes neither)."""

    def __init__(self, settings: Settings, keys: KeyAdmin) -> None:
        self._settings = settings
        self._keys = keys
        # Resolved as the gateway resolves it, so what is shown is what requests get.
        self._snapshot = PolicySnapshot.build(settings)

    def list(self) -> list[TenantSummary]:
        """Every tenant configured or holding a key (active or revoked), by name."""
        counts = self._key_counts()
        names = sorted(set(self._settings.tenants) | set(counts))
        return [self._summary(name, counts) for name in names]

    def get(self, name: str) -> TenantSummary:
        """One tenant; ``NotFound`` if neither the configuration nor a key names it."""
        counts = self._key_counts()
        if name not in self._settings.tenants and name not in counts:
            raise NotFound(f"no tenant {name!r} in the configuration or the key store")
        return self._summary(name, counts)

    def policy(self, name: str) -> PolicySummary:
        """The policy ``name``'s requests get (the global one for a tenant not configured)."""
        policy = self._snapshot.for_tenant(name)
        redaction, cache, rag, limits = policy.redaction, policy.cache, policy.rag, policy.limits
        return PolicySummary(
            redaction=RedactionPolicy(
                enabled=redaction.enabled,
                default_action=redaction.default_action,
                actions={
                    kind: action
                    for kind, action in sorted(redaction.actions.items())
                    if action != redaction.default_action
                },
                binary_data=redaction.binary_data,
                detect_names=redaction.detect_names,
                scan_answers=redaction.scan_answers,
            ),
            cache=CachePolicy(
                enabled=cache.enabled,
                exact=cache.exact,
                semantic=cache.semantic.enabled,
                ttl_s=cache.ttl_s,
            ),
            rag=RagPolicy(
                enabled=rag.enabled,
                collection=rag.collection,
                top_k=rag.top_k,
                min_similarity=rag.min_similarity,
            ),
            local_embeddings=policy.local_embeddings,
            limits=LimitsPolicy(
                requests_per_minute=limits.requests_per_minute,
                tokens_per_minute=limits.tokens_per_minute,
                tokens_per_day=limits.tokens_per_day,
                concurrent_requests=limits.concurrent_requests,
                priority=limits.priority or "normal",
                queue_timeout_s=limits.queue_timeout_s or 0.0,
                keys=tuple(sorted(limits.keys)),
            ),
            routing=RoutingSummary(
                routes=tuple(
                    RouteSummary(models=route.models, chain=route.chain, model=route.model)
                    for route in self._settings.routes
                    if not route.tenants or name in route.tenants
                ),
                default_chain=policy.routing.default_chain,
                allowed_upstreams=(
                    tuple(sorted(policy.routing.allowed))
                    if policy.routing.allowed is not None
                    else None
                ),
            ),
        )

    def _key_counts(self) -> dict[str, tuple[int, int]]:
        counts: dict[str, tuple[int, int]] = {}
        for record in self._keys.list():
            active, revoked = counts.get(record.tenant, (0, 0))
            if record.revoked_at is None:
                active += 1
            else:
                revoked += 1
            counts[record.tenant] = (active, revoked)
        return counts

    def _summary(self, name: str, counts: dict[str, tuple[int, int]]) -> TenantSummary:
        active, revoked = counts.get(name, (0, 0))
        return TenantSummary(
            name=name,
            configured=name in self._settings.tenants,
            active_keys=active,
            revoked_keys=revoked,
            policy=self.policy(name),
        )
