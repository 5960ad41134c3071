"""A tenant's changes to the global policy."""

from __future__ import annotations

from localgate.config.base import Section
from localgate.config.limits import TenantLimitSettings
from localgate.config.redaction import TenantRedactionSettings
from localgate.config.retrieval import TenantCacheSettings, TenantRagSettings

__all__ = ["NO_TENANT_CHANGES", "TenantSettings"]


class TenantSettings(Section):
    """Per-tenant policy."""

    redaction: TenantRedactionSettings = TenantRedactionSettings()
    cache: TenantCacheSettings = TenantCacheSettings()
    rag: TenantRagSettings = TenantRagSettings()
    local_embeddings: bool | None = None
    # Data residency: the upstreams this tenant's requests may reach (None: any).
    upstreams: tuple[str, ...] | None = None
    limits: TenantLimitSettings = TenantLimitSettings()


NO_TENANT_CHANGES = TenantSettings()
