"""Tenant policy: resolved once per configuration version, swapped whole on reload."""

from localgate.policy.reload import ConfigReloader, ReloadResult
from localgate.policy.routing import CompiledRoute, RoutingPolicy
from localgate.policy.snapshot import PolicySnapshot, TenantPolicy

__all__ = [
    "CompiledRoute",
    "ConfigReloader",
    "PolicySnapshot",
    "ReloadResult",
    "RoutingPolicy",
    "TenantPolicy",
]
