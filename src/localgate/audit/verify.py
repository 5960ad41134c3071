"""Recomputing a tenant's log and saying where, if anywhere, it was altered.

Checks, in order, stopping at the first problem:

- positions: sequence numbers run 0, 1, 2 … with no gap (a gap is a deleted record);
- each record: its header parses, names this tenant and this position (else it was
  moved: reordered), hashes to its stored leaf (else the header was modified), and each
  ciphertext hashes to the digest in the header (else the payload was modified);
- the tree: the Merkle root of the first N leaves equals every signed checkpoint of
  size N (else the log was rewritten before N), and no checkpoint is larger than the
  log (else it was truncated since that checkpoint);
- the head: the writer's frontier counts as many records as there are (more rows than
  the writer wrote were inserted behind its back).

Requests without a completion record are reported too (a lost answer record).
Payload keys are never needed: hashes cover ciphertexts, so a log whose payloads were
crypto-shredded verifies like any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localgate.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointVerifier,
    note_text,
)
from localgate.audit.crypto import CipherSuite
from localgate.audit.merkle import Frontier, TreeHasher
from localgate.audit.records import parse_header
from localgate.audit.retention import purge_point
from localgate.audit.store import AuditReader

__all__ = ["Problem", "TenantReport", "verify_tenant"]


@dataclass(frozen=True, slots=True)
class Problem:
    """The first thing found wrong in a tenant's log."""

    seq: int | None
    how: str  # modified, deleted, inserted, reordered, truncated, rewritten, unsigned
    detail: str

    def __str__(self) -> str:
        where = f"record {self.seq}" if self.seq is not None else "the log"
        return f"{where}: {self.how}: {self.detail}"


@dataclass(slots=True)
class TenantReport:
    """What verification found for one tenant."""

    tenant: str
    records: int = 0
    checkpoints: int = 0
    problem: Problem | None = None
    unanswered: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem found."""
        return self.problem is None


def verify_tenant(
    reader: AuditReader,
    tenant: str,
    suite: CipherSuite,
    verifier: CheckpointVerifier | None,
    external: list[str] | None = None,
) -> TenantReport:
    """Verify one tenant's log against its stored and any ``external`` checkpoints."""
    report = TenantReport(tenant)
    hasher = suite.tree_hasher()
    checkpoints, problem = _checkpoints(reader, tenant, verifier, external or [])
    if problem is not None:
        report.problem = problem
        return report
    report.checkpoints = len(checkpoints)
    wanted = {checkpoint.size: checkpoint for checkpoint in checkpoints}
    purged_below = purge_point(reader, tenant, verifier)
    frontier = Frontier(hasher)
    requests: dict[str, int] = {}
    for record in reader.records(tenant):
        purged = record.header is None and record.seq == frontier.size and record.seq < purged_below
        # A legitimately purged record has only its leaf hash left; the tree covers it.
        if not purged:
            problem = _check_record(record, frontier.size, tenant, hasher, suite)
            if problem is not None:
                report.problem = problem
                return report
            if record.kind == "request":
                requests[record.request_id] = record.seq
            elif record.kind == "answer":
                requests.pop(record.request_id, None)
        frontier.append(record.leaf_hash)
        checkpoint = wanted.get(frontier.size)
        if checkpoint is not None and frontier.root() != checkpoint.root:
            report.problem = Problem(
                None,
                "rewritten",
                f"the first {checkpoint.size} records do not match the checkpoint signed "
                f"at {checkpoint.time.isoformat()}",
            )
            return report
    report.records = frontier.size
    largest = max(wanted, default=0)
    if largest > frontier.size:
        report.problem = Problem(
            frontier.size,
            "truncated",
            f"a checkpoint covers {largest} records but the log has {frontier.size}",
        )
        return report
    written = reader.frontier_size(tenant)
    if written < frontier.size:
        report.problem = Problem(
            written,
            "inserted",
            f"the gateway wrote {written} records but the log holds {frontier.size}",
        )
    elif written > frontier.size:
        report.problem = Problem(
            frontier.size,
            "deleted",
            f"the gateway wrote {written} records but the log holds {frontier.size}",
        )
    report.unanswered = sorted(requests, key=requests.__getitem__)
    return report


def _check_record(
    record: object, position: int, tenant: str, hasher: TreeHasher, suite: CipherSuite
) -> Problem | None:
    from localgate.audit.store import StoredRecord

    if not isinstance(record, StoredRecord):
        return Problem(position, "modified", "unreadable row")
    if record.seq != position:
        if record.seq > position:
            return Problem(position, "deleted", f"records {position}..{record.seq - 1} are missing")
        return Problem(record.seq, "inserted", "a second record with this position")
    if record.header is None:
        return Problem(position, "modified", "the header was removed")
    try:
        header = parse_header(record.header)
    except ValueError:
        return Problem(position, "modified", "the header is not valid JSON")
    if header.get("seq") != position or header.get("tenant") != tenant:
        return Problem(
            position,
            "reordered",
            f"the record at this position is record {header.get('seq')} of "
            f"{header.get('tenant')!r}",
        )
    if hasher.hash_leaf(record.header) != record.leaf_hash:
        return Problem(position, "modified", "the header does not match its leaf hash")
    # kind and request_id are columns for lookups; the signed truth is the header.
    if header.get("kind") != record.kind or header.get("request_id") != record.request_id:
        return Problem(
            position, "modified", "the kind or request_id column differs from the header"
        )
    for column, name in ((record.payload, "payload"), (record.original, "prompt")):
        digest = header.get(f"{name}_digest")
        if (column is None) != (digest is None):
            return Problem(position, "modified", f"the {name} was added or removed")
        if column is not None and suite.digest(column).hex() != digest:
            return Problem(position, "modified", f"the {name} ciphertext was changed")
    return None


def _checkpoints(
    reader: AuditReader,
    tenant: str,
    verifier: CheckpointVerifier | None,
    external: list[str],
) -> tuple[list[Checkpoint], Problem | None]:
    notes = [note for _, note in reader.checkpoints(tenant)] + external
    checkpoints = []
    for note in notes:
        try:
            checkpoint = verifier.verify(note) if verifier else Checkpoint.parse(note_text(note))
        except CheckpointError as exc:
            return [], Problem(None, "unsigned", f"a checkpoint does not verify: {exc}")
        if not checkpoint.origin.endswith(f"/audit/{tenant}"):
            continue
        checkpoints.append(checkpoint)
    return checkpoints, None
