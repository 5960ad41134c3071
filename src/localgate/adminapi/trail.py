"""The admin-action trail: who did what through the admin API, when, and why.

Its records go into the audit store as a log of their own, the pseudo-tenant ``_admin``
(no tenant can be named so: tenant names start with a letter or digit), with kind
``admin``. It is therefore chained, checkpointed, signed and verified like every tenant's
log: ``localgate audit verify`` checks it, and a changed or removed record shows there.

Records are written *before* the action they describe (a decryption before the payload
is read, a revocation before the key is revoked): an action the trail cannot record is
refused (503), never performed unrecorded. An action that then fails gets a second
record saying so. Reasons are stored as given; payloads and secrets never.

The CLI's payload reads (``localgate audit show|export --decrypt --reason``) go into the
same log through ``record_local``: actor the OS user, role ``cli``.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import Future
from typing import Any

from localgate.admin.operators import Operator
from localgate.audit.crypto import CipherSuite
from localgate.audit.records import ADMIN_LOG, PendingRecord
from localgate.audit.store import AuditStore, Receipt
from localgate.audit.trail import creates_keys, database, master_key
from localgate.config import Settings
from localgate.errors import ServiceUnavailable

__all__ = ["ADMIN_LOG", "CLI_ROLE", "AdminTrail"]

# The role recorded for the CLI: whoever runs it holds the master key, not an admin role.
CLI_ROLE = "cli"
# How long the CLI waits for its record to be durable before it gives up (and decrypts
# nothing).
_LOCAL_TIMEOUT_S = 60.0


class AdminTrail:
    """Appends admin actions to the ``_admin`` log and waits until each is durable."""

    def __init__(self, store: AuditStore) -> None:
        self._store = store

    @classmethod
    def open(cls, settings: Settings, *, create_keys: bool | None = None) -> AdminTrail:
        """On the configured audit store (its keys created beside an embedded store, as
        the gateway does on first start, unless ``create_keys`` is false); started, close
        it after."""
        create = creates_keys(settings) if create_keys is None else create_keys
        store = AuditStore(
            database(settings),
            master_key(settings, create=create),
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
        submitted = self._submit(
            operator.name,
            operator.role.value,
            action,
            actor_tenant=operator.tenant,
            target=target,
            reason=reason,
            outcome=outcome,
            request_id=request_id,
        )
        try:
            await asyncio.wrap_future(submitted)
        except Exception as exc:
            raise ServiceUnavailable(
                "The admin-action trail cannot record this action, so it was not performed."
            ) from exc

    def record_local(
        self,
        actor: str,
        action: str,
        *,
        target: dict[str, Any] | None = None,
        reason: str | None = None,
        outcome: str = "attempted",
    ) -> None:
        """Append an action taken on this machine (the CLI), role ``cli``, and wait until
        it is durable; ``ServiceUnavailable`` if it cannot be."""
        submitted = self._submit(
            actor, CLI_ROLE, action, target=target, reason=reason, outcome=outcome
        )
        try:
            submitted.result(timeout=_LOCAL_TIMEOUT_S)
        except Exception as exc:
            raise ServiceUnavailable(
                "The admin-action trail cannot record this action, so it was not performed."
            ) from exc

    def _submit(
        self,
        actor: str,
        role: str,
        action: str,
        *,
        actor_tenant: str | None = None,
        target: dict[str, Any] | None,
        reason: str | None,
        outcome: str,
        request_id: str | None = None,
    ) -> Future[Receipt]:
        fields: dict[str, Any] = {
            "actor": actor,
            "role": role,
            "action": action,
            "outcome": outcome,
        }
        if actor_tenant is not None:
            fields["actor_tenant"] = actor_tenant
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
        return self._store.submit(record)
