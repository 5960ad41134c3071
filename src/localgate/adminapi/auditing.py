"""The audit operations of the admin API: search, metadata, decryption (on record first,
with its reason), proofs, verification and checkpoints."""

from __future__ import annotations

from typing import Any, Literal

from localgate.admin.audit import AuditVerification
from localgate.admin.audit_search import AuditQuery
from localgate.adminapi.models import (
    AuditRecordOut,
    AuditSearchParams,
    AuditSearchResult,
    CheckpointOut,
    CheckpointsOut,
    DecryptedOut,
    DecryptedRecord,
    ProofOut,
    RecordsOut,
    SignedOut,
    TenantVerification,
    VerifierKeyOut,
    VerifyJobOut,
    VerifyOut,
)
from localgate.adminapi.routing import Call
from localgate.adminapi.verifying import VerificationJob
from localgate.audit.checkpoint import note_signers, note_time

__all__ = [
    "decrypt_request",
    "list_checkpoints",
    "prove_request",
    "request_records",
    "search_audit",
    "sign_checkpoints",
    "start_verification",
    "verification_job",
    "verifier_key",
    "verify_audit",
]


async def search_audit(call: Call) -> AuditSearchResult:
    """Records matching the query, a page at a time."""
    q: AuditSearchParams = call.query
    after = (q.after_tenant, q.after_seq) if q.after_tenant and q.after_seq is not None else None
    query = AuditQuery(
        tenant=q.tenant,
        since=q.since,
        until=q.until,
        request_id=q.request_id,
        trace_id=q.trace_id,
        outcome=q.outcome,
        model=q.model,
        kind=q.kind,
        after=after,
        limit=q.limit,
    )
    found = await call.services.in_thread(call.services.search.search, query)
    records = [AuditRecordOut(**vars_of(r)) for r in found]
    following = None
    if len(found) == q.limit:
        following = {"after_tenant": found[-1].tenant, "after_seq": found[-1].seq}
    return AuditSearchResult(records=records, next=following)


def vars_of(record: Any) -> dict[str, Any]:
    """A slotted dataclass's fields."""
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


async def request_records(call: Call) -> RecordsOut:
    """The metadata of a request's records."""
    found = await call.services.in_thread(
        lambda: call.services.audit.records(call.path["request_id"])
    )
    return RecordsOut(
        records=[
            AuditRecordOut(
                tenant=r.tenant,
                seq=r.seq,
                kind=str(r.header.get("kind", "")),
                request_id=str(r.header.get("request_id", call.path["request_id"])),
                header=r.header,
            )
            for r in found
        ]
    )


async def decrypt_request(call: Call) -> DecryptedOut:
    """A request's decrypted records; the access is recorded, with its reason, first."""
    request_id = call.path["request_id"]
    audit = call.services.audit
    found = await call.services.in_thread(audit.records, request_id)
    await call.record(
        "audit.decrypt",
        target={"request_id": request_id, "tenants": sorted({r.tenant for r in found})},
        reason=call.body.reason,
    )
    records = await call.services.in_thread(lambda: audit.records(request_id, decrypt=True))
    return DecryptedOut(
        records=[
            DecryptedRecord(
                tenant=r.tenant,
                seq=r.seq,
                header=r.header,
                payload=r.decrypted.get("payload"),
                original_prompt=r.decrypted.get("original_prompt"),
            )
            for r in records
        ]
    )


async def prove_request(call: Call) -> ProofOut:
    """The proof bundle of one of a request's records."""
    proof = await call.services.in_thread(
        call.services.audit.prove, call.path["request_id"], call.query.kind
    )
    return ProofOut(**proof.as_json())


async def verifier_key(call: Call) -> VerifierKeyOut:
    """The public key checkpoints and proof bundles are checked with."""
    key = await call.services.in_thread(call.services.audit.verifier_key)
    name, key_id, _ = key.split("+", 2)
    return VerifierKeyOut(verifier_key=key, name=name, key_id=key_id)


async def verify_audit(call: Call) -> VerifyOut:
    """Verify every log (or one tenant's) as ``localgate audit verify`` does."""
    result = await call.services.in_thread(call.services.audit.verify, call.query.tenant)
    return _verify_out(result)


async def start_verification(call: Call) -> VerifyJobOut:
    """Start verifying in the background, unless a verification of the same logs is running
    (then that one's state is the answer)."""
    tenant = call.body.tenant
    jobs = call.services.verifications
    job = jobs.current(tenant)
    if job is None or not job.running:
        await call.record("audit.verify", target={"tenant": tenant})
        audit = call.services.audit
        job, _ = jobs.start(
            tenant, call.operator.name, lambda progress: audit.verify(tenant, progress=progress)
        )
    return _job_out(job, tenant)


async def verification_job(call: Call) -> VerifyJobOut:
    """The running or last background verification of every log (or one tenant's)."""
    tenant = call.query.tenant
    return _job_out(call.services.verifications.current(tenant), tenant)


def _job_out(job: VerificationJob | None, tenant: str | None) -> VerifyJobOut:
    if job is None:
        return VerifyJobOut(
            state="none",
            tenant=tenant,
            started_by=None,
            started_at=None,
            finished_at=None,
            checked=0,
            total=0,
            result=None,
            error=None,
        )
    state: Literal["running", "done", "failed"] = (
        "running" if job.running else "failed" if job.error is not None else "done"
    )
    return VerifyJobOut(
        state=state,
        tenant=job.tenant,
        started_by=job.started_by,
        started_at=job.started_at,
        finished_at=job.finished_at,
        checked=job.progress.checked,
        total=job.progress.total,
        result=_verify_out(job.result) if job.result is not None else None,
        error=job.error,
    )


def _verify_out(result: AuditVerification) -> VerifyOut:
    return VerifyOut(
        ok=result.ok,
        signatures_checked=result.signatures_checked,
        anchor_missing=result.anchor_missing,
        anchor_problems=result.anchor_problems,
        tenants=[
            TenantVerification(
                tenant=r.tenant,
                ok=r.ok,
                records=r.records,
                checkpoints=r.checkpoints,
                problem=str(r.problem) if r.problem else None,
                warnings=r.warnings,
            )
            for r in result.reports
        ],
    )


async def list_checkpoints(call: Call) -> CheckpointsOut:
    """Signed checkpoints."""
    found = await call.services.in_thread(call.services.search.checkpoints, call.query.tenant)
    return CheckpointsOut(
        checkpoints=[
            CheckpointOut(**vars_of(c), time=note_time(c.note), signers=note_signers(c.note))
            for c in found
        ]
    )


async def sign_checkpoints(call: Call) -> SignedOut:
    """Sign the head of every log that grew (the admin trail's own record included)."""
    await call.record("audit.checkpoint")
    signed = await call.services.in_thread(call.services.audit.checkpoint)
    return SignedOut(signed=[CheckpointOut(tenant=s.tenant, size=s.size, note="") for s in signed])
