"""The whole gateway configuration and what it resolves per tenant."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from localgate.config.admin import AdminSettings
from localgate.config.audit import AuditSettings
from localgate.config.base import Section
from localgate.config.limits import (
    LIMIT_FALLBACKS,
    LimitSettings,
    LimitsSettings,
    TenantLimitSettings,
)
from localgate.config.openai import OpenAISettings
from localgate.config.quality import QualitySettings
from localgate.config.redaction import BUILTIN_TYPES, ProxySettings, RedactionSettings
from localgate.config.retrieval import CacheSettings, EmbeddingSettings, RagSettings
from localgate.config.server import LoggingSettings, ServerSettings, TelemetrySettings
from localgate.config.tenants import NO_TENANT_CHANGES, TenantSettings
from localgate.config.upstreams import (
    DEFAULT_UPSTREAM,
    UPSTREAM_NAME,
    CircuitBreakerSettings,
    NamedUpstreamSettings,
    RetrySettings,
    RouteSettings,
    UpstreamSettings,
)
from localgate.secret import Secret

__all__ = ["Settings"]


class Settings(Section):
    """The whole gateway configuration."""

    data_dir: Path = Path("data")
    # PostgreSQL for every piece of shared state (keys, the audit trail, the fingerprints of
    # the keys replicas share); None: SQLite files in data_dir. Not in repr: it may hold a
    # password.
    database_url: str | None = Field(None, repr=False)
    server: ServerSettings = ServerSettings()
    upstream: UpstreamSettings = UpstreamSettings()
    logging: LoggingSettings = LoggingSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    proxy: ProxySettings = ProxySettings()
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
    audit: AuditSettings = AuditSettings()
    cache: CacheSettings = CacheSettings()
    rag: RagSettings = RagSettings()
    embeddings: EmbeddingSettings = EmbeddingSettings()
    local_embeddings: bool = False
    # Named upstreams besides ``upstream`` (named default), and the routes to them.
    upstreams: dict[str, NamedUpstreamSettings] = Field(default_factory=dict)
    routes: tuple[RouteSettings, ...] = ()
    retries: RetrySettings = RetrySettings()
    circuit_breaker: CircuitBreakerSettings = CircuitBreakerSettings()
    limits: LimitsSettings = LimitsSettings()
    openai: OpenAISettings = OpenAISettings()
    quality: QualitySettings = QualitySettings()
    admin: AdminSettings = AdminSettings()
    # Resolved from GEMINI_API_KEY or upstream.api_key_file; never read from the YAML itself.
    upstream_api_key: Secret | None = Field(None, exclude=True)
    # From LOCALGATE_CHROMA_TOKEN: the Chroma server's token, sent as a bearer token.
    chroma_token: Secret | None = Field(None, exclude=True)
    # Each named upstream's key pool, from its api_key_env and api_key_file.
    upstream_keys: dict[str, tuple[Secret, ...]] = Field(default_factory=dict, exclude=True)

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    @model_validator(mode="before")
    @classmethod
    def _shared_database(cls, raw: Any) -> Any:
        """With ``database_url`` the audit trail lives in PostgreSQL too: on that database
        unless ``audit.postgres_dsn`` names another one."""
        if not isinstance(raw, dict) or not raw.get("database_url"):
            return raw
        audit = raw.get("audit")
        if isinstance(audit, AuditSettings):
            audit = audit.model_dump(exclude_unset=True)
        if audit is None:
            audit = {}
        if not isinstance(audit, dict):
            return raw  # the section's own validation says what is wrong
        if audit.get("store", "postgres") != "postgres":
            raise ValueError(
                "audit.store: with database_url set the audit trail is shared in PostgreSQL; "
                "remove audit.store (or database_url)"
            )
        audit = {**audit, "store": "postgres"}
        if not audit.get("postgres_dsn"):
            audit["postgres_dsn"] = raw["database_url"]
        return {**raw, "audit": audit}

    @model_validator(mode="after")
    def _known_types(self) -> Settings:
        known = set(BUILTIN_TYPES) | {rule.type for rule in self.proxy.redaction_rules}
        places = [("proxy.redaction.actions", self.proxy.redaction.actions)] + [
            (f"tenants.{name}.redaction.actions", tenant.redaction.actions)
            for name, tenant in self.tenants.items()
        ]
        for where, actions in places:
            for entity_type in actions:
                if entity_type not in known:
                    raise ValueError(
                        f"{where}.{entity_type}: unknown type; known types are "
                        + ", ".join(sorted(known))
                    )
        return self

    @model_validator(mode="after")
    def _routes_reach_known_upstreams(self) -> Settings:
        for name in self.upstreams:
            if name == DEFAULT_UPSTREAM:
                raise ValueError(
                    "upstreams.default: the upstream named default is the upstream: section"
                )
            if not re.fullmatch(UPSTREAM_NAME, name):
                raise ValueError(
                    f"upstreams.{name}: a name is lower-case letters, digits, '-' and '_'"
                )
        known = {DEFAULT_UPSTREAM, *self.upstreams}
        listed = ", ".join(sorted(known))
        for index, route in enumerate(self.routes):
            where = f"routes.{index}"
            named = [("upstream", route.upstream)]
            named += [("fallback", name) for name in route.fallback]
            named += [
                (f"split.{number}.upstream", side.upstream)
                for number, side in enumerate(route.split)
                if side.upstream is not None
            ]
            for field_name, name in named:
                if name not in known:
                    raise ValueError(
                        f"{where}.{field_name}: unknown upstream {name!r}; known: {listed}"
                    )
            seen: list[str] = []
            for name in route.chain:
                if name in seen:
                    cycle = " -> ".join([*seen[seen.index(name) :], name])
                    raise ValueError(
                        f"{where}.fallback: fallback cycle {cycle}; an upstream appears once "
                        "in a route"
                    )
                seen.append(name)
        for tenant, settings in self.tenants.items():
            for name in settings.upstreams or ():
                if name not in known:
                    raise ValueError(
                        f"tenants.{tenant}.upstreams: unknown upstream {name!r}; known: {listed}"
                    )
        return self

    @model_validator(mode="after")
    def _client_certificates_map_to_one_tenant(self) -> Settings:
        owners: dict[str, str] = {}
        for name, tenant in self.tenants.items():
            where = f"tenants.{name}"
            uses_certificates = tenant.authentication != "key"
            if uses_certificates and not tenant.client_certificates:
                raise ValueError(
                    f"{where}.client_certificates: authentication {tenant.authentication} "
                    "needs the certificates that identify the tenant"
                )
            if tenant.client_certificates and not uses_certificates:
                raise ValueError(
                    f"{where}.authentication: is key, so client_certificates are never "
                    "used; set certificate, key_or_certificate or key_and_certificate"
                )
            if uses_certificates and self.server.client_ca_file is None:
                raise ValueError(
                    f"{where}.authentication: {tenant.authentication} needs "
                    "server.client_ca_file (the CAs of the client certificates)"
                )
            for entry in tenant.client_certificates:
                other = owners.setdefault(entry, name)
                if other != name:
                    raise ValueError(
                        f"{where}.client_certificates: {entry!r} also identifies tenant "
                        f"{other!r}; a certificate identifies one tenant"
                    )
        return self

    @model_validator(mode="after")
    def _postgres_needs_a_dsn(self) -> Settings:
        if self.audit.store == "postgres" and not self.audit.postgres_dsn:
            raise ValueError(
                "audit.postgres_dsn: required when audit.store is postgres "
                "(or set LOCALGATE_AUDIT_POSTGRES_DSN)"
            )
        return self

    def redaction_for(self, tenant: str) -> RedactionSettings:
        """The global redaction settings with ``tenant``'s changes applied."""
        base = self.proxy.redaction
        tenant_settings = self.tenants.get(tenant)
        if tenant_settings is None:
            return base
        changes = tenant_settings.redaction.model_dump(exclude_unset=True, exclude={"actions"})
        changes = {name: value for name, value in changes.items() if value is not None}
        if "mask" in changes:
            changes["mask"] = tenant_settings.redaction.mask
        changes["actions"] = {**base.actions, **tenant_settings.redaction.actions}
        return base.model_copy(update=changes)

    def cache_for(self, tenant: str) -> CacheSettings:
        """The cache settings with ``tenant``'s changes applied."""
        base = self.cache
        changes = self._tenant(tenant).cache.model_dump(exclude_none=True)
        if "semantic" in changes:
            changes["semantic"] = base.semantic.model_copy(update={"enabled": changes["semantic"]})
        return base.model_copy(update=changes) if changes else base

    def rag_for(self, tenant: str) -> RagSettings:
        """The retrieval settings with ``tenant``'s changes applied."""
        changes = self._tenant(tenant).rag.model_dump(exclude_none=True)
        return self.rag.model_copy(update=changes) if changes else self.rag

    def local_embeddings_for(self, tenant: str) -> bool:
        """Whether ``tenant``'s embedContent calls are answered by the local embedder."""
        choice = self._tenant(tenant).local_embeddings
        return self.local_embeddings if choice is None else choice

    def upstreams_for(self, tenant: str) -> frozenset[str] | None:
        """The upstreams ``tenant``'s requests may reach (None: any)."""
        allowed = self._tenant(tenant).upstreams
        return None if allowed is None else frozenset(allowed)

    def max_attempts_of(self, route: RouteSettings | None) -> int:
        """The most attempts one request on ``route`` (None: no route matched) can make."""
        chains = [(DEFAULT_UPSTREAM,)] if route is None else [route.chain]
        if route is not None:
            chains += [route.chain_of(side) for side in route.split]
        retries = self.retries
        longest = max(len(chain) for chain in chains)
        return min(retries.max_attempts, longest * retries.attempts_per_upstream)

    def limits_for(self, tenant: str) -> TenantLimitSettings:
        """``tenant``'s limits: its own fields, unset ones from ``limits.default``; each
        configured key's limits with the class and queue fields inherited from those."""
        own = self._tenant(tenant).limits
        resolved = {
            **LIMIT_FALLBACKS.model_dump(),
            **self.limits.default.model_dump(exclude_none=True),
            **own.model_dump(exclude_none=True, exclude={"keys"}),
        }
        inherited = {
            name: resolved[name]
            for name in (
                "priority",
                "allow_priority_header",
                "queue_timeout_s",
                "default_output_tokens",
            )
        }
        keys = {
            key_id: LimitSettings(**{**inherited, **key.model_dump(exclude_none=True)})
            for key_id, key in own.keys.items()
        }
        return TenantLimitSettings(**resolved, keys=keys)

    def _tenant(self, tenant: str) -> TenantSettings:
        return self.tenants.get(tenant) or NO_TENANT_CHANGES

    @property
    def vector_store_path(self) -> Path:
        """Where the embedded ChromaDB keeps its files."""
        return self.cache.persist_path or self.data_dir / "chroma"

    @property
    def signature_key_path(self) -> Path:
        """The key that seals thought signatures (created on first start)."""
        return self.proxy.signature_key_file or self.data_dir / "signature-seal.key"

    @property
    def shared_state(self) -> bool:
        """Whether state is shared through PostgreSQL (``database_url``): then no key
        material is ever created at start, since every replica must hold the same."""
        return self.database_url is not None

    @property
    def state_db_path(self) -> Path:
        """The SQLite file holding keys and other gateway state."""
        return self.data_dir / "localgate.db"

    @property
    def audit_db_path(self) -> Path:
        """The SQLite file of the audit trail."""
        return self.audit.sqlite_path or self.data_dir / "audit.db"

    @property
    def audit_master_key_path(self) -> Path:
        """Where the audit master key is read (or created) when not in the environment."""
        return self.audit.master_key_file or self.data_dir / "audit-master.key"

    @property
    def audit_signing_key_path(self) -> Path:
        """The checkpoint signing key."""
        return self.audit.signing_key_file or self.data_dir / "audit-signing.key"

    @property
    def quality_state_path(self) -> Path:
        """Where the drift references are saved between runs (docs/quality.md)."""
        return self.data_dir / "quality-drift.json"

    @property
    def access_log_path(self) -> Path:
        """Where the JSON access log goes."""
        return self.logging.access_log or self.data_dir / "logs" / "access.log"
