"""Recomputing a tenant's log and saying where, if anywhere, it was altered.

Checks, in order, stopping at the first problem:

- the signed items: every stored checkpoint that verifies under the log's key is this
  tenant's and sits in the row of its own size (else it was swapped for another); one that
  does not verify (inserted by someone with write access to the database, or signed by a
  replica with another key) anchors nothing: it is reported as foreign, and the valid
  ones still anchor the log;
- positions: sequence numbers run 0, 1, 2 … with no gap (a gap is a deleted record);
- each record: its header parses, names this tenant and this position (else it was
  moved: reordered), hashes to its stored leaf (else the header was modified), its
  lookup columns (kind, request_id, recorded_at) say what the header says, and each
  ciphertext hashes to the digest in the header (else the payload was modified);
- the tree: the Merkle root of the first N leaves equals every signed checkpoint of
  size N, from the database, the anchor or a signed tenant list (else the log was
  rewritten before N), and no checkpoint is larger than the log (else it was truncated
  since that checkpoint, or, with no record left, the whole log was deleted);
- the head: the writer's stored frontier (its size *and* its hashes) is the tree of the
  records (else records were inserted, deleted or rewritten behind its back);
- the anchor: every checkpoint it holds is in the database too;
- the tenant lists: a tenant with signed checkpoints is in the newest signed tenant list,
  and a tenant any list names still has its log.

Nothing here trusts an unsigned column: sizes and roots come from signatures, times
from headers that hash to their leaves. Requests without a completion record are
reported too (a lost answer record). Payload keys are never needed: hashes cover
ciphertexts, so a log whose payloads were crypto-shredded verifies like any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from localgate.audit.anchor import Anchor, TenantList, newest
from localgate.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointVerifier,
    note_text,
)
from localgate.audit.crypto import CipherSuite
from localgate.audit.merkle import Frontier, TreeHasher
from localgate.audit.records import PURGE_HEADER, parse_header
from localgate.audit.store import AuditReader, StoredRecord

__all__ = [
    "Problem",
    "TenantLists",
    "TenantReport",
    "Verification",
    "VerifyProgress",
    "purge_point",
    "verify_all",
    "verify_tenant",
]

# Re-reading the head after the records catches up with a writer that appends meanwhile;
# a writer faster than the reader for this many rounds makes the last comparison count.
_MAX_PASSES = 20
# How much earlier than the checkpoint it follows a record's time may honestly be: a batch
# in flight while the checkpoint was signed, replicas' clocks a little apart, a clock stepped
# back. Back-dating that matters to retention is years, not hours.
CLOCK_TOLERANCE = timedelta(hours=1)


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
    # Every checkpoint that verified, from the database and the anchor.
    signed: list[Checkpoint] = field(default_factory=list)
    # With a cutoff: the first record past the purge point whose (verified) time is not
    # before it; purge markers do not count. The log's size when every record is older.
    young_from: int = 0
    # Things worth a look that are not tampering by the threat model (see docs/audit.md).
    warnings: list[str] = field(default_factory=list)
    # Checkpoints and tenant lists stored in the database that the log's key did not sign:
    # they anchor nothing, and do not make the log fail (docs/shared-state.md).
    foreign: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem found."""
        return self.problem is None


@dataclass(slots=True)
class VerifyProgress:
    """How far a verification has come, for whoever watches it from another thread.

    ``total`` is what the logs' heads counted when it started; a live log grows meanwhile,
    so ``checked`` can end a little above it.
    """

    total: int = 0
    checked: int = 0


@dataclass(slots=True)
class Verification:
    """Every tenant's report, and what is wrong with the anchor itself."""

    reports: list[TenantReport]
    anchor_problems: list[str]
    # Tenant lists in the database the log's key did not sign (reported, not failed).
    foreign_lists: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every tenant verified and the anchor holds nothing forged."""
        return not self.anchor_problems and all(report.ok for report in self.reports)


def verify_all(
    reader: AuditReader,
    suite: CipherSuite,
    verifier: CheckpointVerifier | None,
    anchor: Anchor | None = None,
    tenant: str | None = None,
    progress: VerifyProgress | None = None,
) -> Verification:
    """Verify every tenant the database, its tenant lists or the anchor know (or one);
    ``progress`` is kept up to date as records are checked."""
    lists = TenantLists(reader, verifier)
    if tenant is not None:
        names = {tenant}
    else:
        names = reader.known_tenants()
        for listed in lists.lists:
            names |= listed.tenants
        if anchor is not None:
            names |= anchor.tenants()
    anchor_problems = [f"{name}: {reason}" for name, reason in anchor.bad] if anchor else []
    if progress is not None:
        progress.total = sum(reader.frontier_size(name) for name in names)
    reports = [
        verify_tenant(reader, name, suite, verifier, anchor, lists=lists, progress=progress)
        for name in sorted(names)
    ]
    return Verification(reports, anchor_problems, lists.foreign)


class TenantLists:
    """The database's signed tenant lists, read once and re-read only when one seems missing.

    Each list names every tenant, and there is one per tenant added: reading them per
    tenant would cost O(tenants^2) notes, hence one reader shared by a whole verification.
    """

    def __init__(self, reader: AuditReader, verifier: CheckpointVerifier | None) -> None:
        self._reader = reader
        self._verifier = verifier
        self._opened: dict[str, TenantList] = {}
        self._foreign: set[str] = set()
        self.lists: list[TenantList] = []
        self.foreign: list[str] = []
        self.refresh()

    def refresh(self) -> None:
        """Read the lists again (a checkpointer may have signed one since)."""
        for note in self._reader.tenant_lists():
            if note in self._opened or note in self._foreign:
                continue
            try:
                self._opened[note] = TenantList.open(note, self._verifier)
            except CheckpointError as exc:
                # Not the log's: it names nothing (a list only ever adds names to check).
                self._foreign.add(note)
                self.foreign.append(f"a tenant list in the database does not verify: {exc}")
        self.lists = list(self._opened.values())

    def lists_newest(self, tenant: str) -> bool:
        """Whether the newest list names ``tenant`` (re-reading once if it does not)."""
        latest = newest(self.lists)
        if latest is not None and tenant in latest.tenants:
            return True
        self.refresh()
        latest = newest(self.lists)
        return latest is not None and tenant in latest.tenants


def verify_tenant(
    reader: AuditReader,
    tenant: str,
    suite: CipherSuite,
    verifier: CheckpointVerifier | None,
    anchor: Anchor | None = None,
    *,
    cutoff: datetime | None = None,
    lists: TenantLists | None = None,
    progress: VerifyProgress | None = None,
) -> TenantReport:
    """Verify one tenant's log against its stored checkpoints, tenant lists and ``anchor``.

    With ``cutoff``, also find the first record whose verified time is not before it
    (``young_from``), which is what purging decides from.
    """
    report = TenantReport(tenant)
    hasher = suite.tree_hasher()
    stored, problem = _stored_checkpoints(reader, tenant, verifier, report.foreign)
    if lists is None:
        lists = TenantLists(reader, verifier)
    if problem is not None:
        report.problem = problem
        return report
    external = anchor.checkpoints.get(tenant, []) if anchor else []
    report.signed = stored + external
    report.checkpoints = len(stored)
    wanted: dict[int, list[Checkpoint]] = {}
    for checkpoint in report.signed:
        wanted.setdefault(checkpoint.size, []).append(checkpoint)
    purged_below = purge_point(reader, tenant, verifier)
    walk = _Walk(tenant, hasher, suite, wanted, purged_below, cutoff, progress)
    problem = walk.run(reader)
    report.records = walk.frontier.size
    report.young_from = walk.frontier.size if walk.young_from is None else walk.young_from
    report.unanswered = sorted(walk.requests, key=walk.requests.__getitem__)
    report.problem = (
        problem
        or _truncation(wanted, walk.frontier.size)
        or walk.head_problem
        or _missing_from_database(tenant, stored, anchor)
        or _listing(tenant, stored, lists, anchor, walk.frontier.size)
    )
    if anchor is not None:
        anchored = anchor.sizes.get(tenant, {})
        extra = [checkpoint for checkpoint in stored if checkpoint.size not in anchored]
        if extra:
            report.warnings.append(
                f"{len(extra)} checkpoint(s) in the database are not in the anchor "
                f"{anchor.folder} (newest: {max(c.size for c in extra)} records): the export "
                "failed or lost a file"
            )
    return report


class _Walk:
    """One pass over a tenant's records: recompute the tree and check each record."""

    def __init__(
        self,
        tenant: str,
        hasher: TreeHasher,
        suite: CipherSuite,
        wanted: dict[int, list[Checkpoint]],
        purged_below: int,
        cutoff: datetime | None,
        progress: VerifyProgress | None = None,
    ) -> None:
        self.tenant = tenant
        self.progress = progress
        self.hasher = hasher
        self.suite = suite
        self.wanted = wanted
        self.purged_below = purged_below
        self.cutoff = cutoff
        self.frontier = Frontier(hasher)
        self.requests: dict[str, int] = {}
        self.young_from: int | None = None
        self.head_problem: Problem | None = None
        # The newest signed time of a checkpoint this position follows, and its size.
        self.floor: tuple[datetime, int] | None = None

    def run(self, reader: AuditReader) -> Problem | None:
        """Check every record, then the writer's stored head against the tree."""
        for _ in range(_MAX_PASSES):
            before = self.frontier.size
            for record in reader.records(self.tenant, before):
                problem = self._record(record)
                if problem is not None:
                    return problem
            # Read after the records: a writer commits rows and head together, so an
            # honest head is never behind the rows read before it.
            state = reader.frontier_state(self.tenant)
            column = reader.frontier_size(self.tenant)
            self.head_problem = self._head(state, column)
            # A head ahead of the rows means rows were deleted, or the writer appended
            # since they were read: reading on from here tells the two apart.
            ahead = self.head_problem is not None and self.head_problem.how == "deleted"
            if not ahead or self.frontier.size == before:
                return None
        return None

    def _record(self, record: StoredRecord) -> Problem | None:
        position = self.frontier.size
        purged = record.header is None and record.seq == position and position < self.purged_below
        # A legitimately purged record has only its leaf hash left; the tree covers it.
        if not purged:
            problem, header = _check_record(record, position, self.tenant, self.hasher, self.suite)
            if problem is not None:
                return problem
            problem = self._after_floor(header, position)
            if problem is not None:
                return problem
            if record.kind == "request":
                self.requests[record.request_id] = record.seq
            elif record.kind == "answer":
                self.requests.pop(record.request_id, None)
            if (
                self.cutoff is not None
                and self.young_from is None
                and record.kind != "purge"
                and not _older(header, self.cutoff)
            ):
                self.young_from = position
        self.frontier.append(record.leaf_hash)
        if self.progress is not None:
            self.progress.checked += 1
        signed = self.wanted.get(self.frontier.size)
        if signed:
            root = self.frontier.root()
            for checkpoint in signed:
                if root != checkpoint.root:
                    return Problem(
                        None,
                        "rewritten",
                        f"the first {checkpoint.size} records do not match the checkpoint "
                        f"signed at {checkpoint.time.isoformat()}",
                    )
                if self.floor is None or checkpoint.time > self.floor[0]:
                    self.floor = (checkpoint.time, checkpoint.size)
        return None

    def _after_floor(self, header: dict[str, Any], position: int) -> Problem | None:
        """A record appended after a checkpoint cannot have been written long before it.

        This catches records back-dated before they were signed (the Merkle tree cannot:
        the forgery is what got signed), which would otherwise look old to the purge.
        """
        if self.floor is None:
            return None
        signed_at, size = self.floor
        try:
            written = datetime.fromisoformat(str(header["time"]))
        except (KeyError, ValueError):
            return None
        if written.tzinfo is not None and written < signed_at - CLOCK_TOLERANCE:
            return Problem(
                position,
                "modified",
                f"its time {header['time']} is before the checkpoint of {size} records "
                f"signed at {signed_at.isoformat()}, which it follows",
            )
        return None

    def _head(self, state: bytes | None, column: int) -> Problem | None:
        """Whether the writer's stored frontier is exactly the recomputed one."""
        size = self.frontier.size
        if state is None:
            if size == 0:
                return None
            return Problem(None, "deleted", f"the log holds {size} records but its head is gone")
        try:
            written = Frontier.from_bytes(self.hasher, state)
        except ValueError as exc:
            return Problem(None, "modified", f"the writer's stored head is damaged: {exc}")
        if written.size < size:
            return Problem(
                written.size,
                "inserted",
                f"the gateway wrote {written.size} records but the log holds {size}",
            )
        if written.size > size:
            return Problem(
                size,
                "deleted",
                f"the gateway wrote {written.size} records but the log holds {size}",
            )
        if written != self.frontier:
            return Problem(
                None,
                "rewritten",
                f"the writer's stored head of {size} records is not the tree of the records",
            )
        if column != written.size:
            return Problem(
                None,
                "modified",
                f"audit_frontier.size says {column} but the writer's stored head counts {size}",
            )
        return None


def _older(header: dict[str, Any], cutoff: datetime) -> bool:
    try:
        return datetime.fromisoformat(str(header["time"])) < cutoff
    except (KeyError, ValueError, TypeError):
        return False  # a record whose time does not read is never old enough to purge


def _truncation(wanted: dict[int, list[Checkpoint]], size: int) -> Problem | None:
    largest = max(wanted, default=0)
    if largest <= size:
        return None
    checkpoint = wanted[largest][0]
    if size == 0:
        return Problem(
            None,
            "deleted",
            f"the whole log is missing, but a checkpoint signed at "
            f"{checkpoint.time.isoformat()} covers {largest} records",
        )
    return Problem(
        size, "truncated", f"a checkpoint covers {largest} records but the log has {size}"
    )


def _missing_from_database(
    tenant: str, stored: list[Checkpoint], anchor: Anchor | None
) -> Problem | None:
    if anchor is None:
        return None
    held = {checkpoint.size for checkpoint in stored}
    files = anchor.sizes.get(tenant, {})
    for size in sorted(set(files) - held):
        name = f"{tenant}/{files[size].name}"
        try:
            checkpoint = anchor.open(tenant, size)
        except CheckpointError as exc:
            return Problem(None, "unsigned", f"the anchor's {name} does not verify: {exc}")
        return Problem(
            None,
            "deleted",
            f"the anchor's checkpoint of {checkpoint.size} records signed at "
            f"{checkpoint.time.isoformat()} is missing from the database",
        )
    return None


def _listing(
    tenant: str,
    stored: list[Checkpoint],
    lists: TenantLists,
    anchor: Anchor | None,
    size: int,
) -> Problem | None:
    """A tenant list that names a vanished log, or a signed log missing from the lists."""
    every = lists.lists + (anchor.lists if anchor else [])
    named = [item for item in every if tenant in item.tenants]
    if named and size == 0:
        first = min(named, key=lambda item: item.time)
        return Problem(
            None,
            "deleted",
            f"the whole log is missing, but the tenant list signed at "
            f"{first.time.isoformat()} names this tenant",
        )
    # The checkpoints were read before the lists: a list is committed with the checkpoints
    # it covers, so an honest newest list always names a tenant that has some.
    if stored and not lists.lists_newest(tenant):
        latest = newest(lists.lists)
        where = f"of {latest.time.isoformat()}" if latest else "(the database holds none)"
        return Problem(
            None,
            "deleted",
            f"the log has signed checkpoints but is not in the newest signed tenant list "
            f"{where}: tenant lists were deleted or replaced by older ones (a log from before "
            "tenant lists: run `localgate audit checkpoint` once)",
        )
    return None


def _check_record(
    record: StoredRecord, position: int, tenant: str, hasher: TreeHasher, suite: CipherSuite
) -> tuple[Problem | None, dict[str, Any]]:
    if record.seq != position:
        if record.seq > position:
            return Problem(
                position, "deleted", f"records {position}..{record.seq - 1} are missing"
            ), {}
        return Problem(record.seq, "inserted", "a second record with this position"), {}
    if record.header is None:
        return Problem(position, "modified", "the header was removed"), {}
    try:
        header = parse_header(record.header)
    except ValueError:
        return Problem(position, "modified", "the header is not valid JSON"), {}
    if header.get("seq") != position or header.get("tenant") != tenant:
        return Problem(
            position,
            "reordered",
            f"the record at this position is record {header.get('seq')} of "
            f"{header.get('tenant')!r}",
        ), header
    if hasher.hash_leaf(record.header) != record.leaf_hash:
        return Problem(position, "modified", "the header does not match its leaf hash"), header
    # kind, request_id and recorded_at are columns for lookups; the signed truth is the header.
    if header.get("kind") != record.kind or header.get("request_id") != record.request_id:
        return Problem(
            position, "modified", "the kind or request_id column differs from the header"
        ), header
    if header.get("time") != record.recorded_at:
        return Problem(
            position, "modified", "the recorded_at column differs from the header's time"
        ), header
    for column, name in ((record.payload, "payload"), (record.original, "prompt")):
        digest = header.get(f"{name}_digest")
        if (column is None) != (digest is None):
            return Problem(position, "modified", f"the {name} was added or removed"), header
        if column is not None and suite.digest(column).hex() != digest:
            return Problem(position, "modified", f"the {name} ciphertext was changed"), header
    return None, header


def _stored_checkpoints(
    reader: AuditReader, tenant: str, verifier: CheckpointVerifier | None, foreign: list[str]
) -> tuple[list[Checkpoint], Problem | None]:
    """The stored checkpoints the log's key signed; the others are described in ``foreign``.

    A checkpoint the key did not sign proves nothing either way, so it cannot make the log
    fail (else anyone with write access to the database, or a replica with a stray key,
    could make verification unusable for good: the table is append-only).
    """
    checkpoints = []
    for size, note in reader.checkpoints(tenant):
        try:
            checkpoint = verifier.verify(note) if verifier else Checkpoint.parse(note_text(note))
        except CheckpointError as exc:
            foreign.append(f"the checkpoint row of {size} records does not verify: {exc}")
            continue
        if not checkpoint.origin.endswith(f"/audit/{tenant}"):
            return [], Problem(
                None, "modified", f"a checkpoint of {checkpoint.origin!r} is stored as this log's"
            )
        if checkpoint.size != size:
            return [], Problem(
                None,
                "modified",
                f"the checkpoint row of {size} records holds the checkpoint of {checkpoint.size}",
            )
        checkpoints.append(checkpoint)
    if foreign and not checkpoints:
        # Not one is the log's: the verifier key is not the log's, or every checkpoint the
        # signer stored was replaced. Either way nothing here anchors the log.
        return [], Problem(
            None,
            "unsigned",
            f"none of the {len(foreign)} stored checkpoint(s) verifies under the log's key "
            f"(the wrong verifier key, or all forged): {foreign[0]}",
        )
    return checkpoints, None


def purge_point(reader: AuditReader, tenant: str, verifier: CheckpointVerifier | None) -> int:
    """Below which position the tenant's records may legitimately be erased.

    Only markers whose note verifies count (any marker when ``verifier`` is None).
    """
    point = 0
    rows = reader.db.execute(
        "SELECT CAST(header AS BLOB) FROM audit_log WHERE tenant=? AND kind='purge'", (tenant,)
    ).fetchall()
    for (raw,) in rows:
        try:
            fields = parse_header(raw)
            note = str(fields["note"])
            text = verifier.open_note(note) if verifier else note_text(note)
            lines = dict(line.split(" ", 1) for line in text.splitlines()[1:] if " " in line)
            if not text.startswith(PURGE_HEADER) or lines.get("tenant") != tenant:
                continue
            point = max(point, int(lines["purged_below"]))
        except (KeyError, TypeError, ValueError):
            continue
    return point
