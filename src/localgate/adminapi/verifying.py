"""Verification as a background job: one at a time per scope (one log, or every log), its
progress readable while it runs, its result kept with the time it was computed.

A full ``verify`` reads every record, O(n): too slow to run on every page load once a log
is large, so the console starts a job and shows how far it has come instead. Jobs live in
this listener's process (each replica runs its own); the job's thread runs to its end even
if the listener stops meanwhile, as ``localgate audit verify`` would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from localgate.admin.audit import AuditVerification
from localgate.audit.verify import VerifyProgress

__all__ = ["VerificationJob", "VerificationJobs"]

logger = logging.getLogger("localgate.adminapi")

Run = Callable[[VerifyProgress], AuditVerification]


@dataclass
class VerificationJob:
    """One verification: of ``tenant``'s log, or of every log (``tenant`` None)."""

    tenant: str | None
    started_by: str
    started_at: datetime
    progress: VerifyProgress = field(default_factory=VerifyProgress)
    finished_at: datetime | None = None
    result: AuditVerification | None = None
    error: str | None = None  # why it could not run (no audit log, a store down)

    @property
    def running(self) -> bool:
        """Neither finished nor failed yet."""
        return self.finished_at is None


class VerificationJobs:
    """The jobs of one listener: at most one running per scope, the last one kept."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._jobs: dict[str | None, VerificationJob] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def current(self, tenant: str | None) -> VerificationJob | None:
        """The running job of this scope, else its last one; None if it never ran."""
        return self._jobs.get(tenant)

    def start(self, tenant: str | None, by: str, run: Run) -> tuple[VerificationJob, bool]:
        """A new job running ``run`` in a worker thread, unless one of this scope is running:
        then that one. Whether a new one was started."""
        running = self._jobs.get(tenant)
        if running is not None and running.running:
            return running, False
        job = VerificationJob(tenant, by, self.now())
        self._jobs[tenant] = job
        task = asyncio.create_task(self._run(job, run), name=f"verify {tenant or '*'}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job, True

    async def _run(self, job: VerificationJob, run: Run) -> None:
        try:
            job.result = await asyncio.to_thread(run, job.progress)
        # Any failure is reported on the job (never raised into the loop): the listener goes on.
        except Exception as exc:  # noqa: BLE001
            logger.warning("admin API: the verification of %s failed: %s", job.tenant or "*", exc)
            job.error = getattr(exc, "message", None) or type(exc).__name__
        finally:
            job.finished_at = self.now()

    async def wait(self) -> None:
        """Until every running job has finished (for tests and an orderly shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def now(self) -> datetime:
        """The time by this listener's clock, as jobs are stamped."""
        return datetime.fromtimestamp(self._clock(), UTC).replace(microsecond=0)
