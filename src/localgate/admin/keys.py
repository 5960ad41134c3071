"""Tenant keys: create, list, revoke."""

from __future__ import annotations

from localgate.admin.closing import ClosingService
from localgate.config import Settings
from localgate.errors import InvalidArgument, NotFound, ServiceUnavailable
from localgate.identity import AdminKeyStore, ApiKeyRecord, IssuedKey, open_key_store
from localgate.state import StateDatabaseUnavailable

__all__ = ["ApiKeyRecord", "IssuedKey", "KeyAdmin"]


class KeyAdmin(ClosingService):
    """Manages the keys in the gateway's key store; a running gateway sees every change on
    its next request."""

    def __init__(self, store: AdminKeyStore) -> None:
        self._store = store

    @classmethod
    def open(cls, settings: Settings) -> KeyAdmin:
        """On the configured key store: PostgreSQL with ``database_url`` (every replica sees
        changes within a second), else ``data_dir/localgate.db`` (created if missing)."""
        try:
            return cls(open_key_store(settings, serving=False))
        except StateDatabaseUnavailable as exc:
            raise ServiceUnavailable(str(exc)) from exc

    def close(self) -> None:
        """Close the key store."""
        self._store.close()

    def create(self, tenant: str, label: str = "") -> IssuedKey:
        """A new key for ``tenant``: its secret is in the result only, never stored."""
        try:
            return self._store.create(tenant, label)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from exc

    def list(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        """Every key (of ``tenant``, if given), oldest first; ids and states, no secrets."""
        return self._store.list(tenant)

    def revoke(self, key_id: str) -> None:
        """Revoke a key (revoking it again is not an error); ``NotFound`` if there is none."""
        if not self._store.revoke(key_id):
            raise NotFound(f"no key with id {key_id}")
