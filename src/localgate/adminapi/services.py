"""What the admin API's operations share, built in its lifespan."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from localgate.admin.audit import AuditAdmin
from localgate.admin.audit_search import AuditSearch
from localgate.admin.keys import KeyAdmin
from localgate.admin.operators import OperatorStore
from localgate.adminapi.link import GatewayLink
from localgate.adminapi.oidc import OidcLogin
from localgate.adminapi.sessions import LoginThrottle, SessionStore
from localgate.adminapi.sessions_postgres import PostgresLoginThrottle, PostgresSessionStore
from localgate.adminapi.trail import AdminTrail
from localgate.adminapi.verifying import VerificationJobs
from localgate.config import Settings
from localgate.redaction.detector import Detector

__all__ = ["AdminServices"]

T = TypeVar("T")


@dataclass
class AdminServices:
    """The admin services and the listener's own state.

    The key and operator stores hold one database connection each, used by one thread only
    (``in_store_thread``); slower work (audit reads, argon2, the vector store) runs in the
    default pool, so the event loop the data plane shares never waits for it.
    """

    settings: Settings
    source: Path | None
    operators: OperatorStore
    keys: KeyAdmin
    audit: AuditAdmin
    search: AuditSearch
    trail: AdminTrail
    sessions: SessionStore | PostgresSessionStore
    throttle: LoginThrottle | PostgresLoginThrottle
    store_thread: ThreadPoolExecutor
    link: GatewayLink
    oidc: OidcLogin | None = None
    detectors: dict[str | None, Detector] = field(default_factory=dict)
    verifications: VerificationJobs = field(default_factory=VerificationJobs)

    async def in_store_thread(self, call: Callable[..., T], *args: object) -> T:
        """Run ``call`` on the stores' thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.store_thread, functools.partial(call, *args))

    async def in_thread(self, call: Callable[..., T], *args: object) -> T:
        """Run ``call`` in the default pool."""
        return await asyncio.to_thread(call, *args)
