"""Tenant policy: resolved once per configuration version, swapped whole on reload."""

from localgate.policy.reload import ConfigReloader, ReloadResult
from localgate.policy.snapshot import PolicySnapshot, TenantPolicy

__all__ = ["ConfigReloader", "PolicySnapshot", "ReloadResult", "TenantPolicy"]
