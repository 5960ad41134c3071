"""The audit store: one writer thread, group commit, one Merkle log per tenant.

All writes go through one thread fed by a queue. It takes whatever has arrived, then
in one ``BEGIN IMMEDIATE`` transaction gives each record the next sequence number of
its tenant, encrypts it, appends its leaf to the tenant's Merkle frontier and stores
both; then one COMMIT makes the whole batch durable. Callers wait on a future: a
request record's future resolves only once its batch is on disk.

The frontier is read back inside every transaction, so a row that someone inserted by
hand makes the next insert fail loudly (and the gateway refuse requests) instead of
forking the log.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import Database
from localgate.audit.keyring import Keyring
from localgate.audit.merkle import Frontier
from localgate.audit.migrate import upgrade_schema
from localgate.audit.records import FORMAT_VERSION, PendingRecord, canonical

__all__ = [
    "AuditReader",
    "AuditStore",
    "Receipt",
    "StoreNotWritable",
    "StoredRecord",
    "associated_data",
]

logger = logging.getLogger("localgate.audit")

_MAX_BATCH = 1024
# Rows per INSERT statement: 9 parameters each, well under SQLite's 32,766 and
# PostgreSQL's 65,535 parameters per statement.
_ROWS_PER_INSERT = 256
# Read as bytes whatever type a row was altered to: a tampered row must be reported,
# not crash the verifier.
_BLOBS = (
    "CAST(recorded_at AS TEXT), CAST(header AS BLOB), CAST(payload AS BLOB), "
    "CAST(original AS BLOB), CAST(leaf_hash AS BLOB)"
)


@dataclass(frozen=True, slots=True)
class Receipt:
    """Where a record landed."""

    tenant: str
    seq: int
    leaf_hash: bytes


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A row as read back."""

    tenant: str
    seq: int
    kind: str
    request_id: str
    recorded_at: str  # a copy of the header's time, for queries; verify compares them
    header: bytes | None
    payload: bytes | None
    original: bytes | None
    leaf_hash: bytes


class StoreNotWritable(Exception):
    """The audit store cannot take records now; the message says why (for ``/readyz``)."""


@dataclass(frozen=True, slots=True)
class _Probe:
    """A writability check queued to the writer thread."""

    future: Future[None]
    commit: bool


_Item = tuple[PendingRecord, Future[Receipt]] | _Probe


def _describe(exc: BaseException) -> str:
    """A driver error in one line for operators: its type and message, never a record."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class AuditStore:
    """Appends records durably; reads them back for verification and export."""

    def __init__(
        self,
        connect: Callable[[], Database],
        master: MasterKey,
        suite: CipherSuite,
        *,
        key_period: str = "day",
        synchronous: str = "FULL",
    ) -> None:
        self._connect = connect
        self.suite = suite
        self.hasher = suite.tree_hasher()
        self._master = master
        self._key_period = key_period
        self._synchronous = synchronous
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._forget = threading.Event()
        # Why the last batch failed (None once one succeeds): read by readiness.
        self.last_failure: str | None = None
        # Told each batch's size and the seconds it took to write (on the writer thread).
        self.on_batch: Callable[[int, float], None] | None = None
        self._db = connect()
        upgrade_schema(self._db.sqlalchemy_url)
        self._check_suite()
        self.keyring = Keyring(self._db, master, suite)

    # -- writing ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread."""
        if self._db.dialect == "sqlite":
            self._db.execute(f"PRAGMA synchronous={self._synchronous}")
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Write what is queued, then stop."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None
        self._db.close()

    @property
    def writer_alive(self) -> bool:
        """Whether the writer thread is running (a dead one would leave records queued)."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, record: PendingRecord) -> Future[Receipt]:
        """Queue a record; the future resolves when it is durable (or fails)."""
        future: Future[Receipt] = Future()
        if not self.writer_alive:
            future.set_exception(RuntimeError("the audit writer is not running"))
        else:
            self._queue.put((record, future))
        return future

    def probe(self, *, commit: bool = False) -> Future[None]:
        """Check, on the writer thread between batches, that the store can be written.

        Takes the write lock and updates a row, then rolls back (nothing is written), or
        commits when ``commit`` (a no-op update: the one way to learn that a full disk
        has room again); then checks that the master key opens the stored data keys.
        The future fails with ``StoreNotWritable`` saying why.
        """
        future: Future[None] = Future()
        if not self.writer_alive:
            future.set_exception(StoreNotWritable("the audit writer thread has stopped"))
        else:
            self._queue.put(_Probe(future, commit))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch: list[tuple[PendingRecord, Future[Receipt]]] = []
            probes: list[_Probe] = []
            stop = False
            while True:
                if isinstance(item, _Probe):
                    probes.append(item)
                else:
                    batch.append(item)
                if len(batch) >= _MAX_BATCH:
                    break
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                item = more
            if batch:
                started = time.perf_counter()
                self._write(batch)
                if self.on_batch is not None:
                    self.on_batch(len(batch), time.perf_counter() - started)
            for probe in probes:
                self._probe(probe)
            if stop:
                return

    def _probe(self, probe: _Probe) -> None:
        if not probe.future.set_running_or_notify_cancel():
            return  # nobody waits for it any more
        try:
            self._db.begin()
            self._db.execute("UPDATE audit_meta SET value=value WHERE name='suite'")
            if probe.commit:
                self._db.commit()
            else:
                self._db.rollback()
        except Exception as exc:  # noqa: BLE001 - any driver error means "cannot write"
            if self._db.in_transaction:
                self._db.rollback()
            probe.future.set_exception(
                StoreNotWritable(f"the audit database cannot be written ({_describe(exc)})")
            )
            return
        if probe.commit:
            self.last_failure = None
        try:
            problem = self.keyring.unwrap_problem()
        except Exception as exc:  # noqa: BLE001 - the writer thread must live on
            problem = f"the audit data keys could not be read ({_describe(exc)})"
        if problem is not None:
            probe.future.set_exception(StoreNotWritable(problem))
        else:
            probe.future.set_result(None)

    def forget_keys(self) -> None:
        """Drop unwrapped data keys from memory (after retention destroyed some)."""
        self._forget.set()

    def _write(self, batch: list[tuple[PendingRecord, Future[Receipt]]]) -> None:
        # A future whose waiter was cancelled cannot take a result; its record is
        # written all the same (it was asked for), only nobody hears where it landed.
        waiting = [future.set_running_or_notify_cancel() for _, future in batch]
        if self._forget.is_set():
            self._forget.clear()
            self.keyring.forget()
        receipts: list[Receipt] = []
        try:
            self._db.begin()
            self._db.lock_logs([record.tenant for record, _ in batch])
            frontiers: dict[str, Frontier] = {}
            rows: list[tuple[Any, ...]] = []
            now = datetime.now(UTC)
            for record, _ in batch:
                frontier = frontiers.get(record.tenant)
                if frontier is None:
                    frontier = frontiers[record.tenant] = self._frontier(record.tenant)
                receipts.append(self._append(record, frontier, now, rows))
            self._insert(rows)
            for tenant, frontier in frontiers.items():
                self._db.execute(
                    "INSERT INTO audit_frontier (tenant, size, state) VALUES (?,?,?) "
                    "ON CONFLICT (tenant) DO UPDATE SET size=excluded.size, state=excluded.state",
                    (tenant, frontier.size, frontier.to_bytes()),
                )
            self._db.commit()
        except Exception as exc:
            logger.exception("audit batch of %d records failed", len(batch))
            if self._db.in_transaction:
                self._db.rollback()
            self.keyring.forget()
            self.last_failure = _describe(exc)
            for (_, future), wanted in zip(batch, waiting, strict=True):
                if wanted:
                    future.set_exception(exc)
            return
        self.last_failure = None
        for (_, future), wanted, receipt in zip(batch, waiting, receipts, strict=True):
            if wanted:
                future.set_result(receipt)

    def _frontier(self, tenant: str) -> Frontier:
        row = self._db.execute(
            "SELECT state FROM audit_frontier WHERE tenant=?", (tenant,)
        ).fetchone()
        return Frontier.from_bytes(self.hasher, row[0]) if row else Frontier(self.hasher)

    def _append(
        self,
        record: PendingRecord,
        frontier: Frontier,
        now: datetime,
        rows: list[tuple[Any, ...]],
    ) -> Receipt:
        seq = frontier.size
        tenant = record.tenant
        header: dict[str, Any] = {
            **record.fields,
            "v": FORMAT_VERSION,
            "suite": self.suite.name,
            "tenant": tenant,
            "seq": seq,
            "kind": record.kind,
            "request_id": record.request_id,
            "time": now.isoformat(timespec="microseconds"),
        }
        if record.prompt is not None or record.user is not None:
            _, mac_key = self.keyring.current(tenant, "hmac", "-")
            if record.prompt is not None:
                header["prompt_hmac"] = self.suite.mac(mac_key, record.prompt).hex()
            if record.user is not None:
                header["user_hmac"] = self.suite.mac(mac_key, record.user.encode()).hex()
        if record.sent is not None:
            header["sent_digest"] = self.suite.digest(record.sent).hex()
        period = now.strftime("%Y-%m-%d" if self._key_period == "day" else "%Y-%m")
        payload = self._seal(record.payload, tenant, "payload", period, seq, header)
        # Original prompts live hours, not days: their keys are hourly, so a 72-hour
        # window ends within the hour it should.
        hour = now.strftime("%Y-%m-%dT%H")
        original = self._seal(record.original, tenant, "prompt", hour, seq, header)
        raw = canonical(header)
        leaf = self.hasher.hash_leaf(raw)
        rows.append(
            (
                tenant,
                seq,
                record.kind,
                record.request_id,
                header["time"],
                raw,
                payload,
                original,
                leaf,
            )
        )
        frontier.append(leaf)
        return Receipt(tenant, seq, leaf)

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        """Insert a batch's rows, many per statement.

        One statement per row meant one round trip per record on PostgreSQL, and on
        SQLite one release of the GIL per record: under CPU load each release can cost
        the writer a whole switch interval (5 ms) before it runs again.
        """
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[start : start + _ROWS_PER_INSERT]
            self._db.execute(
                "INSERT INTO audit_log (tenant, seq, kind, request_id, recorded_at, header, "  # noqa: S608 - only placeholders are added
                "payload, original, leaf_hash) VALUES "
                + ",".join(["(?,?,?,?,?,?,?,?,?)"] * len(chunk)),
                [value for row in chunk for value in row],
            )

    def _seal(
        self,
        plaintext: bytes | None,
        tenant: str,
        purpose: str,
        period: str,
        seq: int,
        header: dict[str, Any],
    ) -> bytes | None:
        if plaintext is None:
            return None
        key_id, key = self.keyring.current(tenant, purpose, period)
        blob = self.suite.encrypt(key, plaintext, associated_data(tenant, seq, purpose))
        header[f"{purpose}_key"] = key_id
        header[f"{purpose}_digest"] = self.suite.digest(blob).hex()
        return blob

    def _check_suite(self) -> None:
        row = self._db.execute("SELECT value FROM audit_meta WHERE name='suite'").fetchone()
        if row is None:
            # Several processes may open a new store at once: the first insert wins, the
            # others change nothing, and every one then compares with what is stored.
            self._db.execute(
                "INSERT INTO audit_meta (name, value) VALUES ('suite', ?) "
                "ON CONFLICT (name) DO NOTHING",
                (self.suite.name,),
            )
            row = self._db.execute("SELECT value FROM audit_meta WHERE name='suite'").fetchone()
        if row is not None and row[0] != self.suite.name:
            raise ValueError(
                f"the audit log uses the '{row[0]}' suite; the configuration asks for "
                f"'{self.suite.name}'. A log keeps its suite for life."
            )

    # -- reading ------------------------------------------------------------------------

    def reader(self) -> AuditReader:
        """A read connection (safe beside the writer: WAL readers do not block)."""
        return AuditReader(self._connect())


def associated_data(tenant: str, seq: int, purpose: str) -> bytes:
    """What a ciphertext is bound to: its tenant, its position and its purpose."""
    return f"localgate-audit\x00{tenant}\x00{seq}\x00{purpose}".encode()


class AuditReader:
    """Reads the audit log (the CLI, verification, checkpointing)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

    def tenants(self) -> list[str]:
        """Every tenant with a log."""
        rows = self.db.execute(
            "SELECT tenant FROM audit_frontier UNION SELECT DISTINCT tenant FROM audit_log "
            "ORDER BY 1"
        ).fetchall()
        return [row[0] for row in rows]

    def known_tenants(self) -> set[str]:
        """Every tenant the database mentions anywhere: a log, a head or a checkpoint."""
        rows = self.db.execute(
            "SELECT tenant FROM audit_frontier UNION SELECT DISTINCT tenant FROM audit_log "
            "UNION SELECT DISTINCT tenant FROM audit_checkpoints"
        ).fetchall()
        return {row[0] for row in rows}

    def records(self, tenant: str, start: int = 0) -> Iterator[StoredRecord]:
        """A tenant's records in sequence order, from position ``start``."""
        cursor = self.db.execute(
            "SELECT tenant, seq, kind, request_id, " + _BLOBS + " "
            "FROM audit_log WHERE tenant=? AND seq >= ? ORDER BY seq",
            (tenant, start),
        )
        for row in cursor:
            yield StoredRecord(*row)

    def by_request(self, request_id: str) -> list[StoredRecord]:
        """The records of one request (request and answer)."""
        rows = self.db.execute(
            "SELECT tenant, seq, kind, request_id, " + _BLOBS + " "
            "FROM audit_log WHERE request_id=? ORDER BY tenant, seq",
            (request_id,),
        ).fetchall()
        return [StoredRecord(*row) for row in rows]

    def leaf_hashes(self, tenant: str, size: int) -> list[bytes]:
        """The first ``size`` leaf hashes of a tenant's log."""
        return self.leaf_hashes_between(tenant, 0, size)

    def leaf_hashes_between(self, tenant: str, start: int, end: int) -> list[bytes]:
        """Leaf hashes of positions ``start`` .. ``end - 1``."""
        rows = self.db.execute(
            "SELECT CAST(leaf_hash AS BLOB) FROM audit_log WHERE tenant=? AND seq >= ? "
            "AND seq < ? ORDER BY seq",
            (tenant, start, end),
        ).fetchall()
        return [row[0] for row in rows]

    def frontier_size(self, tenant: str) -> int:
        """How many records the writer says the tenant's log has."""
        row = self.db.execute(
            "SELECT size FROM audit_frontier WHERE tenant=?", (tenant,)
        ).fetchone()
        return int(row[0]) if row else 0

    def frontier_state(self, tenant: str) -> bytes | None:
        """The stored frontier of a tenant's log."""
        row = self.db.execute(
            "SELECT state FROM audit_frontier WHERE tenant=?", (tenant,)
        ).fetchone()
        return bytes(row[0]) if row else None

    def checkpoints(self, tenant: str) -> list[tuple[int, str]]:
        """(size, signed note) of every stored checkpoint, smallest first."""
        rows = self.db.execute(
            "SELECT size, note FROM audit_checkpoints WHERE tenant=? ORDER BY size", (tenant,)
        ).fetchall()
        return [(int(row[0]), str(row[1])) for row in rows]

    def signed_size(self, tenant: str) -> int:
        """The size of the largest stored checkpoint (0 if none): the records below it are
        covered by one (unverified here: ``verify`` checks the notes)."""
        row = self.db.execute(
            "SELECT MAX(size) FROM audit_checkpoints WHERE tenant=?", (tenant,)
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def add_checkpoint(self, tenant: str, size: int, note: str) -> bool:
        """Store a signed checkpoint; False if a row of that size was already there."""
        cursor = self.db.execute(
            "INSERT INTO audit_checkpoints (tenant, size, note, created_at) "
            "VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
            (tenant, size, note, datetime.now(UTC).isoformat(timespec="seconds")),
        )
        return int(cursor.rowcount) > 0

    def tenant_lists(self, newest: int | None = None) -> list[str]:
        """Every stored signed tenant list (see ``anchor.TenantList``), or the ``newest``.

        "Newest" goes by the unsigned ``created_at``: a hint for the checkpointer, which
        also carries names forward from elsewhere; verification reads them all.
        """
        # A database no writer has migrated to 0002 yet has none (verify does not migrate).
        exists = (
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='audit_tenant_lists'"
            if self.db.dialect == "sqlite"
            else "SELECT 1 WHERE to_regclass('audit_tenant_lists') IS NOT NULL"
        )
        if self.db.execute(exists).fetchone() is None:
            return []
        query = "SELECT note FROM audit_tenant_lists"
        if newest is not None:
            query += f" ORDER BY created_at DESC LIMIT {int(newest)}"
        rows = self.db.execute(query).fetchall()
        return [str(row[0]) for row in rows]

    def newest_tenant_lists(self) -> list[str]:
        """The few most recently stored tenant lists (several: created_at ties)."""
        return self.tenant_lists(newest=5)

    def add_tenant_list(self, note: str) -> None:
        """Store a signed tenant list."""
        digest = hashlib.sha256(note.encode("utf-8")).hexdigest()
        self.db.execute(
            "INSERT INTO audit_tenant_lists (digest, note, created_at) VALUES (?,?,?) "
            "ON CONFLICT DO NOTHING",
            (digest, note, datetime.now(UTC).isoformat(timespec="seconds")),
        )
