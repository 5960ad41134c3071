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
- ``LOCALGATE_DATABASE_URL``  ``database_url`` (shared state in PostgreSQL)
- ``LOCALGATE_CHROMA_URL``    ``cache.chroma_url``
"""

from __future__ import annotations

from localgate.config.admin import AdminSettings, OidcSettings
from localgate.config.audit import AuditSettings
from localgate.config.limits import LimitSettings, LimitsSettings, Priority, TenantLimitSettings
from localgate.config.loading import (
    ENV_AUDIT_DSN,
    ENV_AUDIT_MASTER_KEY,
    ENV_CHROMA_TOKEN,
    ENV_CHROMA_URL,
    ENV_CONFIG,
    ENV_DATA_DIR,
    ENV_DATABASE_URL,
    ENV_REDIS_URL,
    ENV_SIGNATURE_KEY,
    ENV_UPSTREAM_KEY,
    ENV_UPSTREAM_URL,
    load_settings,
)
from localgate.config.openai import OpenAISettings
from localgate.config.quality import DriftSettings, PromptDriftSettings, QualitySettings
from localgate.config.redaction import (
    BUILTIN_TYPES,
    Action,
    MaskSettings,
    ProxySettings,
    RedactionRule,
    RedactionSettings,
    TenantRedactionSettings,
)
from localgate.config.retrieval import (
    CacheSettings,
    EmbeddingSettings,
    RagSettings,
    SemanticCacheSettings,
    TenantCacheSettings,
    TenantRagSettings,
)
from localgate.config.server import (
    ClientCertificates,
    LoggingSettings,
    Sampler,
    ServerSettings,
    TelemetrySettings,
    resolve_workers,
)
from localgate.config.settings import Settings
from localgate.config.tenants import CERTIFICATE_MATCH, Authentication, TenantSettings
from localgate.config.upstreams import (
    DEFAULT_UPSTREAM,
    CircuitBreakerSettings,
    EgressSettings,
    NamedUpstreamSettings,
    RetrySettings,
    RouteSettings,
    SplitSettings,
    UpstreamSettings,
)

__all__ = [
    "BUILTIN_TYPES",
    "CERTIFICATE_MATCH",
    "DEFAULT_UPSTREAM",
    "ENV_AUDIT_DSN",
    "ENV_AUDIT_MASTER_KEY",
    "ENV_CHROMA_TOKEN",
    "ENV_CHROMA_URL",
    "ENV_CONFIG",
    "ENV_DATABASE_URL",
    "ENV_DATA_DIR",
    "ENV_REDIS_URL",
    "ENV_SIGNATURE_KEY",
    "ENV_UPSTREAM_KEY",
    "ENV_UPSTREAM_URL",
    "Action",
    "AdminSettings",
    "AuditSettings",
    "Authentication",
    "CacheSettings",
    "CircuitBreakerSettings",
    "ClientCertificates",
    "DriftSettings",
    "EgressSettings",
    "EmbeddingSettings",
    "LimitSettings",
    "LimitsSettings",
    "LoggingSettings",
    "MaskSettings",
    "NamedUpstreamSettings",
    "OidcSettings",
    "OpenAISettings",
    "Priority",
    "PromptDriftSettings",
    "ProxySettings",
    "QualitySettings",
    "RagSettings",
    "RedactionRule",
    "RedactionSettings",
    "RetrySettings",
    "RouteSettings",
    "Sampler",
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
    "resolve_workers",
]
