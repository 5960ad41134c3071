"""Roles and what each may do: the table docs/admin-api.md shows.

Duties are separated: the admin runs the gateway but neither issues keys nor reads the
audit trail; security manages tenants and their keys; only the auditor reads the trail and
decrypts payloads; a tenant-admin sees its own tenant's keys and usage and nothing else.
"""

from __future__ import annotations

from enum import StrEnum

from localgate.admin.operators import Role

__all__ = ["GRANTS", "Permission", "Role", "allowed"]


class Permission(StrEnum):
    """One kind of operation."""

    WHOAMI = "whoami"
    TENANTS_READ = "tenants.read"
    KEYS_READ = "keys.read"
    KEYS_WRITE = "keys.write"
    USAGE_READ = "usage.read"  # counts of requests and tokens, no contents
    AUDIT_STATUS = "audit.status"  # verification status, checkpoints: health, no contents
    AUDIT_READ = "audit.read"  # search, metadata, proofs
    AUDIT_DECRYPT = "audit.decrypt"
    AUDIT_SIGN = "audit.sign"
    CACHE_READ = "cache.read"  # the answer cache and the retrieval collections
    CACHE_WRITE = "cache.write"
    CONFIG_READ = "config.read"  # configuration, upstreams and their circuits
    CONFIG_WRITE = "config.write"  # reload
    REDACT = "redact"
    OPERATORS_READ = "operators.read"
    OPERATORS_WRITE = "operators.write"


_ALL_READERS = {Permission.WHOAMI, Permission.TENANTS_READ}
_USAGE = {Permission.USAGE_READ}

GRANTS: dict[Role, frozenset[Permission]] = {
    Role.ADMIN: frozenset(
        _ALL_READERS
        | _USAGE
        | {
            Permission.AUDIT_STATUS,
            Permission.AUDIT_SIGN,
            Permission.CACHE_READ,
            Permission.CACHE_WRITE,
            Permission.CONFIG_READ,
            Permission.CONFIG_WRITE,
            Permission.REDACT,
            Permission.OPERATORS_READ,
            Permission.OPERATORS_WRITE,
        }
    ),
    Role.SECURITY: frozenset(
        _ALL_READERS
        | _USAGE
        | {
            Permission.KEYS_READ,
            Permission.KEYS_WRITE,
            Permission.AUDIT_STATUS,
            Permission.CACHE_READ,
            Permission.CACHE_WRITE,
            Permission.CONFIG_READ,
            Permission.REDACT,
        }
    ),
    Role.AUDITOR: frozenset(
        _ALL_READERS
        | {
            Permission.AUDIT_STATUS,
            Permission.AUDIT_READ,
            Permission.AUDIT_DECRYPT,
            Permission.AUDIT_SIGN,
        }
    ),
    # Scoped to its tenant by the operations (routing.Call.tenant_scope).
    Role.TENANT_ADMIN: frozenset(
        _ALL_READERS | _USAGE | {Permission.KEYS_READ, Permission.KEYS_WRITE}
    ),
    Role.VIEWER: frozenset(
        _ALL_READERS
        | _USAGE
        | {
            Permission.KEYS_READ,
            Permission.AUDIT_STATUS,
            Permission.CACHE_READ,
            Permission.CONFIG_READ,
        }
    ),
}


def allowed(role: Role, permission: Permission) -> bool:
    """Whether ``role`` may perform operations needing ``permission``."""
    return permission in GRANTS[role]
