"""Background verification jobs: one at a time per scope, progress readable meanwhile, the
result kept with its time, a failure reported on the job."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from localgate.admin.audit import AuditVerification
from localgate.adminapi.verifying import VerificationJobs
from localgate.audit.verify import VerifyProgress
from localgate.errors import FailedPrecondition
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S


def _verification() -> AuditVerification:
    return AuditVerification(
        signatures_checked=True,
        anchor_dir=Path("/anchor"),
        anchor_missing=None,
        anchor_problems=[],
        reports=[],
    )


def test_one_job_per_scope_runs_at_a_time_and_shows_its_progress() -> None:
    release = threading.Event()
    halfway = threading.Event()

    def run(progress: VerifyProgress) -> AuditVerification:
        progress.total, progress.checked = 10, 4
        halfway.set()
        assert release.wait(INFRASTRUCTURE_TIMEOUT_S)
        progress.checked = 10
        return _verification()

    async def scenario() -> None:
        jobs = VerificationJobs(clock=lambda: 1_900_000_000.0)
        first, started = jobs.start(None, "alice", run)
        assert started
        await asyncio.to_thread(halfway.wait, INFRASTRUCTURE_TIMEOUT_S)
        again, started_again = jobs.start(None, "bob", run)
        other, other_started = jobs.start("acme", "bob", lambda progress: _verification())
        assert again is first
        assert not started_again
        assert other_started
        assert other is not first
        assert jobs.current(None) is first
        running_then = first.running
        assert running_then
        assert (first.progress.checked, first.progress.total) == (4, 10)
        release.set()
        await jobs.wait()
        assert not first.running
        assert first.result is not None
        assert first.progress.checked == 10
        assert first.started_by == "alice"
        assert first.finished_at is not None
        assert first.finished_at.timestamp() == 1_900_000_000.0
        # Finished: the next start is a new job.
        second, started_second = jobs.start(None, "bob", lambda progress: _verification())
        assert started_second
        assert second is not first
        await jobs.wait()

    asyncio.run(scenario())


def test_a_job_that_cannot_run_says_why() -> None:
    def run(progress: VerifyProgress) -> AuditVerification:
        raise FailedPrecondition("there is no audit log here yet")

    async def scenario() -> None:
        jobs = VerificationJobs()
        job, _ = jobs.start("acme", "alice", run)
        await jobs.wait()
        assert job.result is None
        assert job.error == "there is no audit log here yet"
        assert not job.running

    asyncio.run(scenario())
