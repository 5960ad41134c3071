"""Tenant keys: create, list, revoke."""

from __future__ import annotations

from localgate.admin.closing import ClosingService
from localgate.config import Settings
from localgate.errors import InvalidArgument, NotFound
from localgate.identity.keys import ApiKeyRecord, IssuedKey, SqliteKeyStore

__all__ = ["ApiKeyRecord", "IssuedKey", "KeyAdmin"]


class KeyAdmin(ClosingService):
    """Manages the keys in the gateway's key store; a running gateway sees every change on
    its next request."""

    def __init__(self, store: SqliteKeyStore) -> None:
        self._store = store

    @classmethod
    def open(cls, settings: Settings) -> KeyAdmin:
        """On the key store of ``settings.data_dir`` (created if missing); close it after."""
        return cls(SqliteKeyStore(settings.state_db_path))

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
