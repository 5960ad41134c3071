"""The audit store: one writer thread, group commit, one Merkle log per tenant.

All writes go through one thread fed by a queue. It takes whatever has arrived, then
in one ``BEGIN IMMEDIATE`` transaction gives each record the next sequence number of
its tenant, encrypts it, appends its leaf to the tenant's Merkle frontier and stores
both; then one COMMIT makes the whole batch durable. Callers wait on a future: a
request record's future resolves only once its batch is on disk.

The gateway's event loop waits through ``append``: its futures live on the loop, and the
writer wakes the loop once per batch to settle all of them (not once per record, each
through a future of another thread: that was most of the audit trail's CPU on the event
loop's thread, and a fifth of the writer's).

The frontier is read back inside every transaction in which the database shows that
another connection (another worker process, a reader, someone by hand) has committed
since the writer's last one; otherwise the writer's own copy from that commit is the
stored one (SQLite's ``data_version``; PostgreSQL always reads). So a row that someone
inserted by hand makes the next insert fail loudly (and the gateway refuse requests)
instead of forking the log.
"""

from __future__ import annotations

import asyncio
import contextlib
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
# Group commit waits for more records only while at least this many other requests are in
# flight (as PostgreSQL's commit_siblings): with fewer, a wait mostly costs latency.
_SIBLINGS = 4
_INSERT_RECORD = (
    "INSERT INTO audit_log (tenant, seq, kind, request_id, recorded_at, header, payload, "
    "original, leaf_hash) VALUES (?,?,?,?,?,?,?,?,?)"
)
_UPDATE_FRONTIER = (
    "INSERT INTO audit_frontier (tenant, size, state) VALUES (?,?,?) "
    "ON CONFLICT (tenant) DO UPDATE SET size=excluded.size, state=excluded.state"
)
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


# Who waits for a record: a future of any thread (``submit``), or one or two of an event
# loop (``append``), settled on that loop.
_Waiter = (
    Future[Receipt]
    | asyncio.Future[Receipt]
    | tuple[asyncio.Future[Receipt], asyncio.Future[Receipt]]
)
_Item = tuple[PendingRecord, _Waiter] | _Probe


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
        commit_delay_s: float = 0.0,
    ) -> None:
        self._connect = connect
        self.suite = suite
        self.hasher = suite.tree_hasher()
        self._master = master
        self._key_period = key_period
        self._synchronous = synchronous
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # Whether the writer thread runs: from ``start`` until ``_run`` returns or raises
        # (read on every append; ``Thread.is_alive`` cost a lock and two calls each time).
        self._running = False
        self._forget = threading.Event()
        # The AEAD of each data key in use, by key id (the writer thread's; dropped with
        # the keyring's cache).
        self._sealers: dict[str, Callable[[bytes, bytes], bytes]] = {}
        # Each tenant's frontier as the writer last committed it (the writer thread's):
        # used instead of reading it back while the database shows that no other
        # connection has committed since (``Database.open_logs``).
        self._frontiers: dict[str, Frontier] = {}
        # Why the last batch failed (None once one succeeds): read by readiness.
        self.last_failure: str | None = None
        # Told each batch's size and the seconds it took to write (on the writer thread).
        self.on_batch: Callable[[int, float], None] | None = None
        # Group commit's patience (``audit.commit_delay_ms``): while enough other requests
        # are in flight (``in_flight``, told by the gateway; read on the writer thread),
        # the writer waits up to this long for their records before it commits a batch.
        # Every request has at most one record queued at a time (it awaits each), so the
        # wait ends early once each request in flight has one in the batch.
        self.commit_delay_s = commit_delay_s
        self.in_flight: Callable[[], int] | None = None
        # While the writer waits, whoever queues a record counts it and wakes the writer
        # once ``_wake_after`` have come (``_enqueue``), instead of each record waking it:
        # a thread switch each, on the event loop's CPU.
        self._alarm = threading.Event()
        self._dozing = False
        self._arrivals = 0
        self._wake_after = 0
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
        self._running = True
        try:
            self._thread.start()
        except BaseException:
            self._running = False
            raise

    def close(self) -> None:
        """Write what is queued, then stop."""
        if self._thread is not None:
            self._queue.put(None)
            self._alarm.set()
            self._thread.join(timeout=30)
            self._thread = None
        self._db.close()

    @property
    def writer_alive(self) -> bool:
        """Whether the writer thread is running (a dead one would leave records queued)."""
        return self._running and self._thread is not None

    def submit(self, record: PendingRecord) -> Future[Receipt]:
        """Queue a record; the future resolves when it is durable (or fails)."""
        future: Future[Receipt] = Future()
        if not self.writer_alive:
            future.set_exception(RuntimeError("the audit writer is not running"))
        else:
            self._enqueue((record, future))
        return future

    def append(
        self, record: PendingRecord, waiter: asyncio.Future[Receipt] | None = None
    ) -> asyncio.Future[Receipt]:
        """Queue a record from the running event loop; the future resolves on that loop
        when the record is durable (or fails).

        Cancelling the future does not withdraw the record: it is written all the same.
        ``waiter``, another future of the loop, is settled alike in the same pass: one for
        a task to await, which its cancellation cancels, while the returned future still
        tells how the record fared (what ``asyncio.shield`` gives, without the loop
        iteration and the callbacks it adds per record).
        """
        future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        if not self.writer_alive:
            error = RuntimeError("the audit writer is not running")
            future.set_exception(error)
            if waiter is not None:
                waiter.set_exception(error)
        else:
            self._enqueue((record, future if waiter is None else (future, waiter)))
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
        try:
            self._serve()
        finally:
            self._running = False

    def _enqueue(self, item: _Item) -> None:
        """Queue a record; wake the writer if it waits for as many as have come."""
        self._queue.put(item)
        if self._dozing:
            # Not atomic across producer threads: a miscount wakes the writer early or
            # leaves it to its deadline, nothing else.
            self._arrivals += 1
            if self._arrivals >= self._wake_after:
                self._alarm.set()

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch: list[tuple[PendingRecord, _Waiter]] = []
            probes: list[_Probe] = []
            stop = self._gather(item, batch, probes)
            if not stop and self._siblings_coming(len(batch)):
                stop = self._wait_for_siblings(batch, probes)
            if batch:
                started = time.perf_counter()
                self._write(batch)
                if self.on_batch is not None:
                    self.on_batch(len(batch), time.perf_counter() - started)
            for probe in probes:
                self._probe(probe)
            if stop:
                return

    def _gather(
        self,
        item: _Item | None,
        batch: list[tuple[PendingRecord, _Waiter]],
        probes: list[_Probe],
    ) -> bool:
        """Add ``item`` (if any) and whatever else is queued to the batch; True if told to
        stop."""
        while True:
            if isinstance(item, _Probe):
                probes.append(item)
            elif item is not None:
                batch.append(item)
            if len(batch) >= _MAX_BATCH:
                return False
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                return False
            if more is None:
                return True
            item = more

    def _siblings_coming(self, batched: int) -> bool:
        """Whether enough requests in flight have no record in the batch yet to wait for."""
        return (
            self.commit_delay_s > 0
            and 0 < batched < _MAX_BATCH
            and self._others(batched) >= _SIBLINGS
        )

    def _others(self, batched: int) -> int:
        """Requests in flight without a record in a batch of ``batched``."""
        in_flight = self.in_flight
        return 0 if in_flight is None else in_flight() - batched

    def _wait_for_siblings(
        self, batch: list[tuple[PendingRecord, _Waiter]], probes: list[_Probe]
    ) -> bool:
        """Group commit: add the records that arrive within ``commit_delay_s`` (while
        enough requests in flight have none in the batch); True if told to stop."""
        deadline = time.monotonic() + self.commit_delay_s
        while True:
            # Woken after as many records as leave fewer than _SIBLINGS without one.
            self._wake_after = self._others(len(batch)) - _SIBLINGS + 1
            self._arrivals = 0
            self._alarm.clear()
            self._dozing = True
            try:
                # What was queued before the producers knew to count it.
                if self._gather(None, batch, probes):
                    return True
                wait = deadline - time.monotonic()
                if not self._siblings_coming(len(batch)) or wait <= 0:
                    return False
                self._alarm.wait(wait)
            finally:
                self._dozing = False
            # Round again: gather what came, and wait on while siblings are still due.

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

    def _write(self, batch: list[tuple[PendingRecord, _Waiter]]) -> None:
        # A future whose waiter was cancelled cannot take a result; its record is
        # written all the same (it was asked for), only nobody hears where it landed.
        waiting = [
            waiter.set_running_or_notify_cancel() if isinstance(waiter, Future) else True
            for _, waiter in batch
        ]
        if self._forget.is_set():
            self._forget.clear()
            self._forget_keys_now()
        receipts: list[Receipt] = []
        known = self._frontiers
        try:
            current, stored = self._db.open_logs([record.tenant for record, _ in batch], known)
            if not current:
                known.clear()
            frontiers: dict[str, Frontier] = {}
            rows: list[tuple[Any, ...]] = []
            now = _Now(datetime.now(UTC), self._key_period)
            for record, _ in batch:
                frontier = frontiers.get(record.tenant)
                if frontier is None:
                    frontier = known.get(record.tenant)
                    if frontier is None:
                        state = stored.get(record.tenant)
                        frontier = (
                            Frontier(self.hasher)
                            if state is None
                            else Frontier.from_bytes(self.hasher, state)
                        )
                    frontiers[record.tenant] = frontier
                receipts.append(self._append(record, frontier, now, rows))
            self._db.write_and_commit(
                [
                    (_INSERT_RECORD, rows),
                    (
                        _UPDATE_FRONTIER,
                        [(t, f.size, f.to_bytes()) for t, f in frontiers.items()],
                    ),
                ]
            )
        except Exception as exc:
            logger.exception("audit batch of %d records failed", len(batch))
            # Some frontiers may have taken leaves that were not committed.
            known.clear()
            if self._db.in_transaction:
                self._db.rollback()
            self._forget_keys_now()
            self.last_failure = _describe(exc)
            _settle(batch, waiting, None, exc)
            return
        known.update(frontiers)
        self.last_failure = None
        _settle(batch, waiting, receipts, None)

    def _append(
        self,
        record: PendingRecord,
        frontier: Frontier,
        now: _Now,
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
            "time": now.stamp,
        }
        if record.prompt is not None or record.user is not None:
            _, mac_key = self.keyring.current(tenant, "hmac", "-")
            if record.prompt is not None:
                header["prompt_hmac"] = self.suite.mac(mac_key, record.prompt).hex()
            if record.user is not None:
                header["user_hmac"] = self.suite.mac(mac_key, record.user.encode()).hex()
        if record.sent is not None:
            header["sent_digest"] = self.suite.digest(record.sent).hex()
        payload = original = None
        if record.payload is not None:
            payload = self._seal(record.payload, tenant, "payload", now.period, seq, header)
        if record.original is not None:
            # Original prompts live hours, not days: their keys are hourly, so a 72-hour
            # window ends within the hour it should.
            original = self._seal(record.original, tenant, "prompt", now.hour, seq, header)
        raw = canonical(header)
        leaf = self.hasher.hash_leaf(raw)
        rows.append(
            (tenant, seq, record.kind, record.request_id, now.stamp, raw, payload, original, leaf)
        )
        frontier.append(leaf)
        return Receipt(tenant, seq, leaf)

    def _forget_keys_now(self) -> None:
        """Drop unwrapped data keys (and their AEADs) from memory (writer thread)."""
        self.keyring.forget()
        self._sealers.clear()

    def _seal(
        self,
        plaintext: bytes,
        tenant: str,
        purpose: str,
        period: str,
        seq: int,
        header: dict[str, Any],
    ) -> bytes:
        key_id, key = self.keyring.current(tenant, purpose, period)
        seal = self._sealers.get(key_id)
        if seal is None:
            seal = self._sealers[key_id] = self.suite.sealer(key)
        blob = seal(plaintext, associated_data(tenant, seq, purpose))
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


class _Now:
    """A batch's time, and what records and keys take from it: formatted once a batch."""

    __slots__ = ("hour", "period", "stamp")

    def __init__(self, now: datetime, key_period: str) -> None:
        self.stamp = now.isoformat(timespec="microseconds")
        # The payload keys' period (day or month) and the original prompts' hour.
        self.period = self.stamp[:10] if key_period == "day" else self.stamp[:7]
        self.hour = self.stamp[:13]


def _settle(
    batch: list[tuple[PendingRecord, _Waiter]],
    waiting: list[bool],
    receipts: list[Receipt] | None,
    error: BaseException | None,
) -> None:
    """Tell a batch's waiters where their records landed (``receipts``) or ``error``.

    Futures of an event loop are settled by one callback per loop and batch: one wake-up
    of that loop instead of one per record.
    """
    loops: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Receipt], Receipt | None]]]
    loops = {}
    for index, ((_, waiter), wanted) in enumerate(zip(batch, waiting, strict=True)):
        receipt = receipts[index] if receipts is not None else None
        if isinstance(waiter, Future):
            if not wanted:
                continue
            if receipt is not None:
                waiter.set_result(receipt)
            elif error is not None:
                waiter.set_exception(error)
        elif isinstance(waiter, tuple):
            settled = loops.setdefault(waiter[0].get_loop(), [])
            settled.append((waiter[0], receipt))
            settled.append((waiter[1], receipt))
        else:
            loops.setdefault(waiter.get_loop(), []).append((waiter, receipt))
    for loop, settled in loops.items():
        # A closed loop raises RuntimeError: nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle_on_loop, settled, error)


def _settle_on_loop(
    settled: list[tuple[asyncio.Future[Receipt], Receipt | None]], error: BaseException | None
) -> None:
    for future, receipt in settled:
        if future.done():
            continue  # cancelled: the record was written all the same
        if receipt is not None:
            future.set_result(receipt)
        elif error is not None:
            future.set_exception(error)


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
