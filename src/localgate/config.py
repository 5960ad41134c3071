"""Configuration: one validated YAML file plus environment overrides for secrets and paths.

A bad file is rejected as a whole with every problem listed as ``field.path: reason``;
nothing is half-applied. Environment variables override the file:

- ``LOCALGATE_CONFIG``        path of the YAML file (when ``--config`` is not given)
- ``LOCALGATE_DATA_DIR``      ``data_dir``
- ``LOCALGATE_UPSTREAM_URL``  ``upstream.base_url``
- ``GEMINI_API_KEY``          the upstream's API key (wins over ``upstream.api_key_file``)
- ``LOCALGATE_CHROMA_TOKEN``  the Chroma server's token (with ``cache.chroma_url``)
- ``LOCALGATE_SIGNATURE_KEY`` the key that seals thought signatures (wins over
  ``proxy.signature_key_file``)
- ``LOCALGATE_REDIS_URL``     ``limits.redis_url``
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from localgate.errors import ConfigError
from localgate.secret import Secret

__all__ = [
    "BUILTIN_TYPES",
    "DEFAULT_UPSTREAM",
    "Action",
    "AuditSettings",
    "CacheSettings",
    "CircuitBreakerSettings",
    "EmbeddingSettings",
    "LimitSettings",
    "LimitsSettings",
    "LoggingSettings",
    "MaskSettings",
    "NamedUpstreamSettings",
    "ProxySettings",
    "RagSettings",
    "RedactionRule",
    "RedactionSettings",
    "RetrySettings",
    "RouteSettings",
    "SemanticCacheSettings",
    "ServerSettings",
    "Settings",
    "SplitSettings",
    "TelemetrySettings",
    "TenantCacheSettings",
    "TenantLimitSettings",
    "TenantRagSettings",
    "TenantRedactionSettings",
    "TenantSettings",
    "UpstreamSettings",
    "load_settings",
]

ENV_CONFIG = "LOCALGATE_CONFIG"
ENV_DATA_DIR = "LOCALGATE_DATA_DIR"
ENV_UPSTREAM_URL = "LOCALGATE_UPSTREAM_URL"
ENV_UPSTREAM_KEY = "GEMINI_API_KEY"
ENV_AUDIT_MASTER_KEY = "LOCALGATE_AUDIT_MASTER_KEY"
ENV_SIGNATURE_KEY = "LOCALGATE_SIGNATURE_KEY"
ENV_AUDIT_DSN = "LOCALGATE_AUDIT_POSTGRES_DSN"
ENV_CHROMA_TOKEN = "LOCALGATE_CHROMA_TOKEN"  # noqa: S105 - a variable's name, not a secret
ENV_REDIS_URL = "LOCALGATE_REDIS_URL"


class _Section(BaseModel):
    """A configuration section: unknown keys are errors, so typos do not pass silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Section):
    """Where the gateway listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    max_body_bytes: int = Field(20 * 1024 * 1024, gt=0)
    # The request line and headers together; larger gets 431. Google's front end takes
    # about as much; the SDK sends well under 1 KiB.
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    # From a connection's start (or a request's first byte) to the end of its headers, and
    # from there to the end of its body: a client that sends slower gets 408 and is
    # disconnected, so half-sent requests cannot hold connections open (slowloris).
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(60.0, gt=0)
    # Connections from one address that are still sending their request; a new one
    # beyond it is refused at once (503). 0: no limit. The addresses in trusted_proxies
    # are exempt: they carry many clients.
    max_pending_connections_per_ip: int = Field(128, ge=0)
    # How long an idle keep-alive connection stays open between requests.
    keep_alive_timeout_s: int = Field(5, ge=1)
    # On SIGTERM: /readyz answers 503 at once, new connections are still accepted for
    # drain_delay_s (for load balancers to notice), then requests and streams in flight
    # have up to drain_timeout_s to finish before the gateway exits.
    drain_delay_s: float = Field(0.0, ge=0)
    drain_timeout_s: float = Field(30.0, gt=0)
    # Addresses of reverse proxies whose X-Forwarded-For / X-Forwarded-Proto headers
    # are believed (the client address in access log and audit comes from them).
    # Empty: no one's; such headers are ignored and the peer address is recorded.
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError as exc:
                raise ValueError(f"{entry!r} is not an IP address, a network or '*'") from exc
        return value


class UpstreamSettings(_Section):
    """The default Gemini upstream."""

    base_url: str = "https://generativelanguage.googleapis.com"
    api_key_file: Path | None = None
    connect_timeout_s: float = Field(10.0, gt=0)
    timeout_s: float = Field(600.0, gt=0)
    max_connections: int = Field(256, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query or fragment")
        if parts.username or parts.password:
            raise ValueError(
                "must not contain a user name or password; the upstream key goes in "
                "GEMINI_API_KEY or upstream.api_key_file"
            )
        return value.rstrip("/")


class LoggingSettings(_Section):
    """Access log and process log."""

    access_log: Path | None = None
    level: Literal["debug", "info", "warning", "error"] = "info"


Sampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]


class TelemetrySettings(_Section):
    """OpenTelemetry traces (docs/observability.md); the OTEL_* variables override these."""

    # Also on when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) is set.
    enabled: bool = False
    service_name: str = Field("localgate", min_length=1)
    sampler: Sampler = "parentbased_always_on"
    sampler_arg: float = Field(1.0, ge=0, le=1)
    # The request's text after redaction as gen_ai.input.messages; never the original.
    record_redacted_text: bool = False


Action = Literal["pseudonymize", "mask", "block", "allow"]
BUILTIN_TYPES = (
    "CN_MOBILE", "CN_LANDLINE", "CN_RESIDENT_ID", "CN_BANK_CARD", "CN_USCC", "CN_PASSPORT",
    "CN_TRAVEL_PERMIT", "HK_ID", "TW_ID", "CN_LICENSE_PLATE", "EMAIL", "IPV4", "IPV6",
    "CREDIT_CARD", "US_SSN", "IBAN", "API_SECRET", "PERSON", "CN_ADDRESS",
)  # fmt: skip
_TYPE_NAME = r"^[A-Z][A-Z0-9_]*$"


class RedactionRule(_Section):
    """A custom redaction rule: an RE2 pattern, the type it reports, what to do with it."""

    pattern: str = Field(min_length=1)
    type: str = Field("CUSTOM", pattern=_TYPE_NAME)
    action: Action = "mask"
    replacement: str | None = None
    validator: Literal["luhn", "cn_resident_id", "uscc", "iban", "ipv4"] | None = None

    @field_validator("pattern")
    @classmethod
    def _linear_time(cls, value: str) -> str:
        # Imported when a rule is read: RE2 is not needed to start the CLI.
        from localgate.patterns import compile_pattern

        compile_pattern(value)
        return value


class MaskSettings(_Section):
    """How ``mask`` replaces a value: a fixed text, or keep a few characters at each end."""

    replacement: str = "[REDACTED]"
    keep_start: int = Field(0, ge=0)
    keep_end: int = Field(0, ge=0)
    fill: str = Field("*", min_length=1, max_length=1)


class RedactionSettings(_Section):
    """What happens to each type of personal data before a request leaves."""

    enabled: bool = True
    default_action: Action = "pseudonymize"
    actions: dict[str, Action] = Field(default_factory=dict)
    mask: MaskSettings = MaskSettings()
    binary_data: Literal["block", "allow"] = "block"
    detect_names: bool = True
    min_score: float = Field(0.5, gt=0, le=1)
    scan_answers: bool = False
    foreign_signatures: Literal["refuse", "drop"] = "refuse"


class TenantRedactionSettings(_Section):
    """A tenant's changes to the global redaction settings; unset fields inherit."""

    enabled: bool | None = None
    default_action: Action | None = None
    actions: dict[str, Action] = Field(default_factory=dict)
    mask: MaskSettings | None = None
    binary_data: Literal["block", "allow"] | None = None
    detect_names: bool | None = None
    min_score: float | None = Field(None, gt=0, le=1)
    scan_answers: bool | None = None
    foreign_signatures: Literal["refuse", "drop"] | None = None


class ProxySettings(_Section):
    """Data-localization policy of the proxy."""

    enable_audit: bool = True
    redaction: RedactionSettings = RedactionSettings()
    redaction_rules: tuple[RedactionRule, ...] = ()
    signature_key_file: Path | None = None


class AuditSettings(_Section):
    """The tamper-evident audit trail (on when proxy.enable_audit is true)."""

    store: Literal["sqlite", "postgres"] = "sqlite"
    postgres_dsn: str | None = None
    sqlite_path: Path | None = None
    synchronous: Literal["full", "normal"] = "full"
    suite: Literal["standard", "sm"] = "standard"
    master_key_file: Path | None = None
    signing_key_file: Path | None = None
    sign_checkpoints: bool = True
    checkpoint_interval_s: float = Field(60.0, gt=0)
    checkpoint_export_dir: Path | None = None
    key_period: Literal["day", "month"] = "day"
    payload_retention_days: int = Field(90, ge=1)
    store_original_prompt: bool = False
    original_prompt_retention_hours: int = Field(72, ge=1)
    metadata_retention_days: int = Field(1095, ge=183)
    log_name: str = Field("localgate", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class EmbeddingSettings(_Section):
    """The local embedder behind the cache, retrieval and local ``embedContent`` answers."""

    provider: Literal["builtin", "sentence-transformers"] = "builtin"
    model_path: Path | None = None
    dimensions: int = Field(512, ge=64, le=8192)
    batch_size: int = Field(32, ge=1, le=1024)

    @model_validator(mode="after")
    def _model_on_disk(self) -> EmbeddingSettings:
        if self.provider != "sentence-transformers":
            return self
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ValueError(
                "embeddings.provider: sentence-transformers is not installed; install the "
                "semantic extra: .venv/bin/pip install -e '.[semantic]'"
            )
        if self.model_path is None:
            raise ValueError(
                "embeddings.model_path: required for provider sentence-transformers "
                "(a model directory on disk; nothing is downloaded)"
            )
        if not (self.model_path / "config.json").is_file():
            raise ValueError(
                f"embeddings.model_path: {self.model_path} is not a model directory "
                "(no config.json in it); nothing is downloaded, so the model must be on disk"
            )
        return self


class SemanticCacheSettings(_Section):
    """The similarity layer of the cache: which requests it may answer, and how close."""

    enabled: bool = False
    threshold: float = Field(0.98, gt=0, le=1)
    max_temperature: float = Field(0.0, ge=0)
    allow_tools: bool = False
    candidates: int = Field(8, ge=1, le=100)
    # Per tenant, entries kept in the in-memory index (0: none, every lookup asks the store).
    max_index_entries: int = Field(200_000, ge=0)


class CacheSettings(_Section):
    """Local vector cache, keyed on the redacted request; its store also holds RAG passages."""

    enabled: bool = False
    vector_store: Literal["chroma"] = "chroma"
    persist_path: Path | None = None
    chroma_url: str | None = None
    ttl_s: float = Field(86400.0, gt=0)
    timeout_s: float = Field(2.0, gt=0)
    exact: bool = True
    semantic: SemanticCacheSettings = SemanticCacheSettings()

    @field_validator("chroma_url")
    @classmethod
    def _chroma_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http:// or https:// URL with a host, e.g. http://chroma:8000"
            )
        return value.rstrip("/")


class RagSettings(_Section):
    """Retrieval over the tenant's own documents, done locally."""

    enabled: bool = False
    collection: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
    top_k: int = Field(4, ge=1, le=50)
    min_similarity: float = Field(0.25, ge=0, le=1)
    chunk_chars: int = Field(1000, ge=100, le=100_000)
    chunk_overlap: int = Field(100, ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> RagSettings:
        if self.chunk_overlap >= self.chunk_chars:
            raise ValueError("rag.chunk_overlap: must be smaller than rag.chunk_chars")
        return self


class TenantCacheSettings(_Section):
    """A tenant's changes to the cache settings; unset fields inherit."""

    enabled: bool | None = None
    ttl_s: float | None = Field(None, gt=0)
    exact: bool | None = None
    semantic: bool | None = None


class TenantRagSettings(_Section):
    """A tenant's changes to the retrieval settings; unset fields inherit."""

    enabled: bool | None = None
    collection: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
    top_k: int | None = Field(None, ge=1, le=50)
    min_similarity: float | None = Field(None, ge=0, le=1)


# -- traffic limits (docs/traffic.md) --------------------------------------------------

Priority = Literal["low", "normal", "high"]


class LimitSettings(_Section):
    """Limits of one tenant or key; an unset field inherits (a key's from its tenant's
    own limits only for the class and queue fields: a key's counters are its own)."""

    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    tokens_per_day: int | None = Field(None, ge=1)
    concurrent_requests: int | None = Field(None, ge=1)
    # The class of the request in the admission queue, and whether the client may pick
    # one with the x-localgate-priority header.
    priority: Priority | None = None
    allow_priority_header: bool | None = None
    # How long a request waits for a concurrency slot before 429 (0: refused at once).
    queue_timeout_s: float | None = Field(None, ge=0, le=600)
    # The output tokens reserved for a request that sets no generationConfig.maxOutputTokens.
    default_output_tokens: int | None = Field(None, ge=0)


class TenantLimitSettings(LimitSettings):
    """A tenant's limits, and those of some of its keys (by key id) on top of them."""

    keys: dict[str, LimitSettings] = Field(default_factory=dict)


# What a tenant gets for the class and queue fields that neither it nor limits.default set.
_LIMIT_FALLBACKS = LimitSettings(
    priority="normal", allow_priority_header=False, queue_timeout_s=0, default_output_tokens=2048
)


class LimitsSettings(_Section):
    """Per-tenant request, token and concurrency limits, and where they are counted."""

    # memory: counted in this process; redis: shared by every replica on one Redis.
    backend: Literal["memory", "redis"] = "memory"
    redis_url: str | None = None
    # Redis unreachable: closed refuses with 503; open admits, counting in this process.
    on_backend_error: Literal["closed", "open"] = "closed"
    # How long a replica's reservation outlives it if it dies (renewed while in flight).
    lease_s: float = Field(30.0, ge=1, le=3600)
    # Requests waiting for a concurrency slot, per tenant; beyond it, 429 at once.
    max_queue: int = Field(100, ge=0)
    default: LimitSettings = _LIMIT_FALLBACKS

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss", "unix") or not (parts.hostname or parts.path):
            raise ValueError(
                "must be a redis://, rediss:// or unix:// URL, e.g. redis://redis:6379/0"
            )
        return value

    @model_validator(mode="after")
    def _redis_needs_a_url(self) -> LimitsSettings:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError(
                "limits.redis_url: required when limits.backend is redis "
                "(or set LOCALGATE_REDIS_URL)"
            )
        return self


class TenantSettings(_Section):
    """Per-tenant policy."""

    redaction: TenantRedactionSettings = TenantRedactionSettings()
    cache: TenantCacheSettings = TenantCacheSettings()
    rag: TenantRagSettings = TenantRagSettings()
    local_embeddings: bool | None = None
    # Data residency: the upstreams this tenant's requests may reach (None: any).
    upstreams: tuple[str, ...] | None = None
    limits: TenantLimitSettings = TenantLimitSettings()


# -- upstreams and routing ---------------------------------------------------------------

_UPSTREAM_NAME = r"^[a-z][a-z0-9_-]{0,62}$"
_ENV_NAME = r"^[A-Z_][A-Z0-9_]*$"
# The upstream the ``upstream:`` section describes.
DEFAULT_UPSTREAM = "default"


class NamedUpstreamSettings(_Section):
    """An upstream under ``upstreams.<name>``; built at start (changes need a restart)."""

    kind: Literal["gemini", "vertex"] = "gemini"
    # Required for gemini; for vertex, default https://{location}-aiplatform.googleapis.com.
    base_url: str | None = None
    # Vertex AI: the project, the region, and the service account's JSON key file.
    project: str | None = Field(None, pattern=r"^[a-z][a-z0-9-]{4,61}[a-z0-9]$")
    location: str | None = Field(None, pattern=r"^[a-z]+(?:-[a-z]+[0-9]+)?$")
    credentials_file: Path | None = None
    # Environment variables holding its Google API keys, and files holding one key per
    # line: every key found joins the upstream's pool, used round-robin.
    api_key_env: tuple[str, ...] = ()
    api_key_file: tuple[Path, ...] = ()
    connect_timeout_s: float = Field(10.0, gt=0)
    timeout_s: float = Field(600.0, gt=0)
    max_connections: int = Field(256, gt=0)
    # A key the upstream answered 429 is left out of the rotation for the upstream's
    # Retry-After, or this long when it gave none.
    key_cooldown_s: float = Field(60.0, gt=0)

    @field_validator("api_key_env", "api_key_file", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _what_its_kind_needs(self) -> NamedUpstreamSettings:
        if self.kind == "gemini":
            if self.base_url is None:
                raise ValueError("base_url is required for kind: gemini")
            if self.project or self.location or self.credentials_file:
                raise ValueError(
                    "project, location and credentials_file are for kind: vertex upstreams"
                )
            return self
        missing = [
            name
            for name in ("project", "location", "credentials_file")
            if getattr(self, name) is None
        ]
        if missing:
            raise ValueError(f"{missing[0]} is required for kind: vertex")
        if self.api_key_env or self.api_key_file:
            raise ValueError("api_key_env and api_key_file are for kind: gemini upstreams")
        return self

    @property
    def url(self) -> str:
        """The base URL: as configured, or Vertex AI's regional endpoint."""
        return self.base_url or f"https://{self.location}-aiplatform.googleapis.com"

    @field_validator("api_key_env")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not re.fullmatch(_ENV_NAME, name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(
                "must not have a query, a fragment or credentials; keys go in api_key_env "
                "or api_key_file"
            )
        return value.rstrip("/")


class SplitSettings(_Section):
    """One side of a route's weighted split (a canary, an A/B test): another upstream, another
    model, or both; what it leaves out is the route's own (a side naming neither is the
    control group)."""

    upstream: str | None = None
    model: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
    weight: int = Field(ge=0, le=1_000_000)


class RouteSettings(_Section):
    """One entry of ``routes:``: which requests it takes and where they go."""

    # Model names (without ``models/``), shell-style globs: gemini-2.5-*, *embedding*.
    models: tuple[str, ...] = ("*",)
    # Only these tenants' requests; empty: everyone's.
    tenants: tuple[str, ...] = ()
    upstream: str = DEFAULT_UPSTREAM
    # Tried in order when the upstream fails (unreachable, 429, 500, 503, 504, open circuit).
    fallback: tuple[str, ...] = ()
    # The model actually asked for: an alias (gemini-flash) or a pinned version.
    model: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
    # Weighted sides (canary, A/B); a tenant (or, with sticky: user, each x-localgate-user)
    # always gets the same side while the weights stay.
    split: tuple[SplitSettings, ...] = ()
    sticky: Literal["tenant", "user"] = "tenant"

    @model_validator(mode="after")
    def _some_weight(self) -> RouteSettings:
        if self.split and not sum(side.weight for side in self.split):
            raise ValueError("split: the weights add up to 0")
        return self

    @field_validator("models", "tenants", "fallback", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("models")
    @classmethod
    def _some_models(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or any(not pattern for pattern in value):
            raise ValueError("needs at least one model name or glob")
        return value

    @property
    def chain(self) -> tuple[str, ...]:
        """The upstream, then its fallbacks, in the order they are tried."""
        return (self.upstream, *self.fallback)

    def chain_of(self, side: SplitSettings) -> tuple[str, ...]:
        """The chain of one side of the split: its upstream, then the route's fallbacks
        (without its own upstream again)."""
        first = side.upstream or self.upstream
        return (first, *(name for name in self.fallback if name != first))


class RetrySettings(_Section):
    """How often and how fast a failed upstream call is tried again, here or elsewhere."""

    # Attempts one request may make, over all of its upstreams (1: no retry, no fallback).
    max_attempts: int = Field(3, ge=1, le=10)
    # Attempts on one upstream before the next one in the route's fallback list is tried.
    attempts_per_upstream: int = Field(2, ge=1, le=10)
    # Exponential backoff with full jitter between attempts on the same upstream.
    backoff_initial_s: float = Field(0.25, ge=0)
    backoff_max_s: float = Field(4.0, ge=0)
    # An upstream that asks for a longer wait (Retry-After) is not waited for: the next
    # upstream is tried, or the client gets the upstream's answer.
    max_wait_s: float = Field(10.0, ge=0)
    # Retries to an upstream stay within this fraction of its requests over the last
    # budget_window_s, plus budget_min_retries: a failing upstream is not hammered.
    budget_ratio: float = Field(0.2, ge=0, le=1)
    budget_window_s: float = Field(10.0, gt=0)
    budget_min_retries: int = Field(3, ge=0)


class CircuitBreakerSettings(_Section):
    """When an upstream is skipped for a while (per upstream, per process)."""

    enabled: bool = True
    # Open when at least this fraction of the calls in the window failed ...
    failure_ratio: float = Field(0.5, gt=0, le=1)
    window_s: float = Field(30.0, gt=0)
    # ... and the window holds at least this many calls.
    min_requests: int = Field(10, ge=1)
    # Then skip the upstream this long, and let one probe through.
    open_s: float = Field(30.0, gt=0)


class Settings(_Section):
    """The whole gateway configuration."""

    data_dir: Path = Path("data")
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
    # Resolved from GEMINI_API_KEY or upstream.api_key_file; never read from the YAML itself.
    upstream_api_key: Secret | None = Field(None, exclude=True)
    # From LOCALGATE_CHROMA_TOKEN: the Chroma server's token, sent as a bearer token.
    chroma_token: Secret | None = Field(None, exclude=True)
    # Each named upstream's key pool, from its api_key_env and api_key_file.
    upstream_keys: dict[str, tuple[Secret, ...]] = Field(default_factory=dict, exclude=True)

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

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
            if not re.fullmatch(_UPSTREAM_NAME, name):
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
            **_LIMIT_FALLBACKS.model_dump(),
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
        return self.tenants.get(tenant) or _NO_TENANT_CHANGES

    @property
    def vector_store_path(self) -> Path:
        """Where the embedded ChromaDB keeps its files."""
        return self.cache.persist_path or self.data_dir / "chroma"

    @property
    def signature_key_path(self) -> Path:
        """The key that seals thought signatures (created on first start)."""
        return self.proxy.signature_key_file or self.data_dir / "signature-seal.key"

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
    def access_log_path(self) -> Path:
        """Where the JSON access log goes."""
        return self.logging.access_log or self.data_dir / "logs" / "access.log"


_NO_TENANT_CHANGES = TenantSettings()


def load_settings(
    path: Path | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Settings, Path | None]:
    """Load, override from the environment and validate; returns the settings and the file used.

    Raises ``ConfigError`` listing every problem found.
    """
    env = os.environ if environ is None else environ
    if path is None and env.get(ENV_CONFIG):
        path = Path(env[ENV_CONFIG])
    source = str(path) if path else "<defaults>"
    raw = _read_yaml(path) if path else {}
    if "upstream_api_key" in raw or "chroma_token" in raw:
        raise ConfigError(
            source,
            [
                "upstream_api_key: not allowed in the file; "
                "use GEMINI_API_KEY or upstream.api_key_file"
            ],
        )
    _apply_environment(raw, env)
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(err) for err in exc.errors()]) from exc
    key = _upstream_key(settings, env, source)
    token = env.get(ENV_CHROMA_TOKEN, "").strip()
    updates: dict[str, Any] = {
        "upstream_api_key": key,
        "chroma_token": Secret(token) if token else None,
        "upstream_keys": _named_upstream_keys(settings, env, source),
    }
    return settings.model_copy(update=updates), path


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file: {exc.strerror}"]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(str(path), [f"not valid YAML{where}: {problem}"]) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), ["the top level must be a mapping of sections"])
    return data


def _apply_environment(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    if env.get(ENV_DATA_DIR):
        raw["data_dir"] = env[ENV_DATA_DIR]
    if env.get(ENV_AUDIT_DSN):
        audit = raw.get("audit")
        if audit is None:
            audit = raw["audit"] = {}
        if isinstance(audit, dict):
            audit["postgres_dsn"] = env[ENV_AUDIT_DSN]
    if env.get(ENV_REDIS_URL):
        limits = raw.get("limits")
        if limits is None:
            limits = raw["limits"] = {}
        if isinstance(limits, dict):
            limits["redis_url"] = env[ENV_REDIS_URL]
    if env.get(ENV_UPSTREAM_URL):
        upstream = raw.get("upstream")
        if upstream is None:
            upstream = raw["upstream"] = {}
        if isinstance(upstream, dict):
            upstream["base_url"] = env[ENV_UPSTREAM_URL]


def _upstream_key(settings: Settings, env: Mapping[str, str], source: str) -> Secret | None:
    from_env = env.get(ENV_UPSTREAM_KEY, "").strip()
    if from_env:
        return Secret(from_env)
    key_file = settings.upstream.api_key_file
    if key_file is None:
        return None
    try:
        value = key_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            source, [f"upstream.api_key_file: cannot read {key_file}: {exc.strerror}"]
        ) from exc
    if not value:
        raise ConfigError(source, [f"upstream.api_key_file: {key_file} is empty"])
    return Secret(value)


def _named_upstream_keys(
    settings: Settings, env: Mapping[str, str], source: str
) -> dict[str, tuple[Secret, ...]]:
    """Each named upstream's keys: its environment variables', then its files' lines."""
    pools: dict[str, tuple[Secret, ...]] = {}
    for name, upstream in settings.upstreams.items():
        keys = [env.get(var, "").strip() for var in upstream.api_key_env]
        for index, key_file in enumerate(upstream.api_key_file):
            where = f"upstreams.{name}.api_key_file.{index}"
            try:
                lines = key_file.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise ConfigError(
                    source, [f"{where}: cannot read {key_file}: {exc.strerror}"]
                ) from exc
            if not any(line.strip() for line in lines):
                raise ConfigError(source, [f"{where}: {key_file} is empty"])
            keys += [line.strip() for line in lines]
        pools[name] = tuple(Secret(key) for key in dict.fromkeys(keys) if key)
    return pools


_REASONS = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than_equal": "must be <= {le}",
    "extra_forbidden": "unknown setting",
    "missing": "is required",
}


def _describe(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "<top level>"
    template = _REASONS.get(error["type"])
    ctx = {
        name: f"{value:g}" if isinstance(value, float) else value
        for name, value in (error.get("ctx") or {}).items()
    }
    if template is not None:
        reason = template.format(**ctx)
    elif error["type"] == "value_error":
        reason = str(ctx.get("error", error["msg"]))
        head, _, rest = reason.partition(": ")
        # A check of a whole section (or file) names the field it is about.
        if rest and (not error["loc"] or head.startswith(f"{where}.")):
            where, reason = head, rest
    else:
        reason = str(error["msg"])
        reason = reason[:1].lower() + reason[1:]
    return f"{where}: {reason}"
