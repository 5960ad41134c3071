"""The admin-action trail: who did what through the admin API, when, and why.

Its records go into the audit store as a log of their own, the pseudo-tenant ``_admin``
(no tenant can be named so: tenant names start with a letter or digit), with kind
``admin``. It is therefore chained, checkpointed, signed and verified like every tenant's
log: ``localgate audit verify`` checks it, and a changed or removed record shows there.

Records are written *before* the action they describe (a decryption before the payload
is read, a revocation before the key is revoked): an action the trail cannot record is
refused (503), never performed unrecorded. An action that then fails gets a second
record saying so. Reasons are stored as given; payloads and secrets never.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from localgate.admin.operators import Operator
from localgate.audit.crypto import CipherSuite
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditStore
from localgate.audit.trail import creates_keys, database, master_key
from localgate.config import Settings
from localgate.errors import ServiceUnavailable

__all__ = ["ADMIN_LOG", "AdminTrail"]

ADMIN_LOG = "_admin"


class AdminTrail:
    """Appends admin actions to the ``_admin`` log and waits until each is durable."""

    def __init__(self, store: AuditStore) -> None:
        self._store = store

    @classmethod
    def open(cls, settings: Settings) -> AdminTrail:
        """On the configured audit store (its keys created beside an embedded store, as
        the gateway does on first start); started, close it after."""
        store = AuditStore(
            database(settings),
            master_key(settings, create=creates_keys(settings)),
            CipherSuite(settings.audit.suite),
            key_period=settings.audit.key_period,
            synchronous=settings.audit.synchronous.upper(),
        )
        store.start()
        return cls(store)

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._store.close()

    async def record(
        self,
        operator: Operator,
        action: str,
        *,
        target: dict[str, Any] | None = None,
        reason: str | None = None,
        outcome: str = "attempted",
        request_id: str | None = None,
    ) -> None:
        """Append one action; ``ServiceUnavailable`` if it cannot be made durable."""
        fields: dict[str, Any] = {
            "actor": operator.name,
            "role": operator.role.value,
            "action": action,
            "outcome": outcome,
        }
        if operator.tenant is not None:
            fields["actor_tenant"] = operator.tenant
        if target:
            fields["target"] = target
        if reason is not None:
            fields["reason"] = reason
        record = PendingRecord(
            tenant=ADMIN_LOG,
            kind="admin",
            request_id=request_id or uuid.uuid4().hex,
            fields=fields,
        )
        try:
            await asyncio.wrap_future(self._store.submit(record))
        except Exception as exc:
            raise ServiceUnavailable(
                "The admin-action trail cannot record this action, so it was not performed."
            ) from exc
