"""Group commit's patience (``audit.commit_delay_ms``): the writer waits for the records of
the other requests in flight, and only for them.

Every request has at most one record queued at a time, so a batch that holds a record of
every request in flight can grow no more: the wait ends there, or at the delay, or when
the store closes. The tests learn that the writer is deciding whether to wait from the
``in_flight`` count it asks for, never from the clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from pydantic import ValidationError

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import sqlite_at
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditStore, Receipt
from localgate.audit.trail import AuditTrail
from localgate.config import Settings
from localgate.observability.metrics import GatewayMetrics
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

# Longer than any test runs: a wait that does not end early fails the test.
FOREVER_S = 3600.0


class InFlight:
    """The gateway's count of requests in flight, as the writer reads it; ``asked`` is set
    once the writer has asked (it has gathered a batch and decides whether to wait)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.asked = threading.Event()

    def __call__(self) -> int:
        self.asked.set()
        return self.count


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[tuple[AuditStore, list[int]]]:
    """A started store waiting ``FOREVER_S`` for siblings, and the sizes of its batches."""
    store = AuditStore(
        sqlite_at(tmp_path / "audit.db"),
        MasterKey(MasterKey.generate()),
        CipherSuite("standard"),
        commit_delay_s=FOREVER_S,
    )
    batches: list[int] = []
    store.on_batch = lambda size, _seconds: batches.append(size)
    store.start()
    try:
        yield store, batches
    finally:
        store.close()


def record(number: int) -> PendingRecord:
    return PendingRecord("acme", "request", f"r-{number}", {"n": number}, payload=b"x")


def writer_holding_first(store: AuditStore, in_flight: int) -> Future[Receipt]:
    """Record 0 submitted with ``in_flight`` requests in flight, once the writer holds it
    and has asked how many there are."""
    counted = store.in_flight = InFlight(in_flight)
    first = store.submit(record(0))
    assert counted.asked.wait(INFRASTRUCTURE_TIMEOUT_S)
    return first


def test_records_of_the_requests_in_flight_share_one_commit(
    opened: tuple[AuditStore, list[int]],
) -> None:
    store, batches = opened
    first = writer_holding_first(store, 6)
    # The writer holds record 0: five requests in flight have none in the batch yet.
    others = [store.submit(record(n)) for n in range(1, 6)]
    receipts = [f.result(timeout=INFRASTRUCTURE_TIMEOUT_S) for f in [first, *others]]

    assert [r.seq for r in receipts] == [0, 1, 2, 3, 4, 5]
    # The wait ended when fewer than four requests without a record were left (the
    # third record), long before the delay: the rest made the next batch.
    assert batches[0] >= 3
    assert sum(batches) == 6


def test_a_request_with_few_others_in_flight_is_committed_at_once(
    opened: tuple[AuditStore, list[int]],
) -> None:
    store, batches = opened
    for count in (1, 4):  # alone; three others, one short of a wait
        in_flight = store.in_flight = InFlight(count)
        store.submit(record(count)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
        assert in_flight.asked.is_set()
    assert batches == [1, 1]


def test_without_a_count_of_requests_the_writer_never_waits(
    opened: tuple[AuditStore, list[int]],
) -> None:
    store, batches = opened  # in_flight unset: the CLI's and the tools' stores
    store.submit(record(0)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
    assert batches == [1]


def test_the_wait_ends_after_the_delay(tmp_path: Path) -> None:
    store = AuditStore(
        sqlite_at(tmp_path / "audit.db"),
        MasterKey(MasterKey.generate()),
        CipherSuite("standard"),
        commit_delay_s=0.01,
    )
    store.in_flight = InFlight(100)  # records that never come
    store.start()
    try:
        receipt = store.submit(record(0)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
    finally:
        store.close()
    assert receipt.seq == 0


def test_closing_during_the_wait_writes_the_batch(opened: tuple[AuditStore, list[int]]) -> None:
    store, batches = opened
    waiting = writer_holding_first(store, 100)
    reader = store.reader()
    store.close()
    try:
        assert waiting.result(timeout=INFRASTRUCTURE_TIMEOUT_S).seq == 0
        assert [r.request_id for r in reader.records("acme")] == ["r-0"]
    finally:
        reader.close()
    assert batches == [1]


def test_a_probe_during_the_wait_is_answered_after_the_batch(
    opened: tuple[AuditStore, list[int]],
) -> None:
    store, batches = opened
    first = writer_holding_first(store, 6)
    probe = store.probe()
    # The probe joins the wait; two more records leave three requests without one.
    others = [store.submit(record(n)) for n in (1, 2)]
    receipts = [f.result(timeout=INFRASTRUCTURE_TIMEOUT_S) for f in [first, *others]]
    assert probe.result(timeout=INFRASTRUCTURE_TIMEOUT_S) is None
    assert [r.seq for r in receipts] == [0, 1, 2]
    assert batches == [3]


def test_the_gateway_counts_its_requests_for_the_writer(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {"data_dir": str(tmp_path), "audit": {"commit_delay_ms": 7.5}}
    )
    metrics = GatewayMetrics()
    trail = AuditTrail.open(settings, metrics)
    try:
        store = trail.store
        assert store.commit_delay_s == pytest.approx(0.0075)
        assert store.in_flight is not None
        metrics.in_flight = 9
        assert store.in_flight() == 9
    finally:
        trail.store.close()


@pytest.mark.parametrize("delay", [-1, 101, "soon"])
def test_a_commit_delay_out_of_range_is_refused(delay: object) -> None:
    with pytest.raises(ValidationError, match="commit_delay_ms"):
        Settings.model_validate({"audit": {"commit_delay_ms": delay}})
