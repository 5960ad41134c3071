"""Audit trail benchmark: records/s, the request record's latency, verify time, and what
awaiting the completion record costs a request.

    python -m bench.audit --out docs/benchmarks-audit.md [--records N] [--verify-records N]

Targets (from the audit-trail issue): at least 5,000 records/s sustained on SQLite; the
audit stage adds at most 1 ms at p50 with one request at a time; ``audit verify``
checks 1,000,000 records in at most 30 s. Everything runs in this process against a
fresh SQLite file in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import secrets
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import PostgresDatabase, sqlite_at
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditStore, Receipt
from localgate.audit.verify import verify_tenant

ANSWER = (
    '{"candidates":[{"content":{"role":"model","parts":[{"text":"尊敬的[PERSON_1]，关于订单延误，'
    '我们深表歉意。"}]},"finishReason":"STOP"}],"usageMetadata":{"totalTokenCount":42}}'
).encode()
PAYLOAD = (
    '{"contents":[{"role":"user","parts":[{"text":"客户[PERSON_1]，手机[CN_MOBILE_1]，'
    '请起草一封道歉信，说明订单延误的原因并提出补偿方案。"}]}]}'
).encode()


def record(number: int, tenant: str = "bench") -> PendingRecord:
    """A request record shaped like the gateway's."""
    return PendingRecord(
        tenant=tenant,
        kind="request",
        request_id=f"{number:016x}",
        fields={
            "key_id": "0123456789abcdef",
            "client": "127.0.0.1",
            "route": "generateContent",
            "api_version": "v1beta",
            "model": "models/gemini-2.5-flash",
            "redaction": {"CN_MOBILE": {"pseudonymize": 1}, "PERSON": {"pseudonymize": 1}},
        },
        payload=PAYLOAD,
        sent=PAYLOAD,
        prompt=PAYLOAD,
    )


def open_store(folder: Path, name: str, synchronous: str, dsn: str | None = None) -> AuditStore:
    """A started store on a new SQLite file, or on PostgreSQL when ``dsn`` is given."""
    connect = (lambda: PostgresDatabase(dsn)) if dsn else sqlite_at(folder / f"{name}.db")
    store = AuditStore(
        connect,
        MasterKey(MasterKey.generate()),
        CipherSuite("standard"),
        synchronous=synchronous,
    )
    store.start()
    return store


def sustained(
    folder: Path, synchronous: str, count: int, in_flight: int, dsn: str | None = None
) -> float:
    """Records per second with at most ``in_flight`` records waiting at a time."""
    store = open_store(folder, f"sustained-{synchronous}-{in_flight}", synchronous, dsn)
    pending: list[Future[Receipt]] = []
    started = time.perf_counter()
    for number in range(count):
        pending.append(store.submit(record(number)))
        if len(pending) >= in_flight:
            pending.pop(0).result()
    for future in pending:
        future.result()
    elapsed = time.perf_counter() - started
    store.close()
    return count / elapsed


@contextlib.contextmanager
def postgres_schema(dsn: str) -> Iterator[str | None]:
    """A DSN into a fresh schema (dropped afterwards), or None if PostgreSQL is not there."""
    import psycopg

    try:
        admin = psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError:
        yield None
        return
    schema = f"lg_bench_{secrets.token_hex(4)}"
    admin.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{separator}options=-csearch_path%3D{schema}"
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


def stage_latency(folder: Path, synchronous: str, count: int) -> tuple[float, float]:
    """p50 and p99 of awaiting one request record at a time, as the gateway does (ms)."""
    store = open_store(folder, f"latency-{synchronous}", synchronous)

    async def measure() -> list[float]:
        times = []
        for number in range(count):
            started = time.perf_counter()
            await asyncio.wrap_future(store.submit(record(number)))
            times.append((time.perf_counter() - started) * 1000)
        return times

    times = sorted(asyncio.run(measure()))
    store.close()
    return statistics.median(times), times[int(len(times) * 0.99)]


def answer(number: int, tenant: str = "bench") -> PendingRecord:
    """A completion record shaped like the gateway's (the answer as payload)."""
    return PendingRecord(
        tenant=tenant,
        kind="answer",
        request_id=f"{number:016x}",
        fields={"route": "generateContent", "outcome": "forwarded", "status": 200},
        payload=ANSWER,
    )


def request_cycle(
    store: AuditStore, count: int, in_flight: int, *, durable_answer: bool
) -> tuple[float, float, float]:
    """p50 and p99 (ms) of the audit stage's share of a request, and requests/s.

    Each request awaits its request record, then writes its completion record: awaited
    before the answer goes out (``durable_answer``), or submitted and not awaited (how
    the gateway did it before). ``in_flight`` requests run at a time; the clock stops
    once every record is on disk, so the throughput of both is comparable.
    """
    per_worker = count // in_flight

    async def measure() -> tuple[list[float], float]:
        times: list[float] = []
        unawaited: list[Future[Receipt]] = []

        async def worker(first: int) -> None:
            for number in range(first, first + per_worker):
                started = time.perf_counter()
                await asyncio.wrap_future(store.submit(record(number)))
                completion = store.submit(answer(number))
                if durable_answer:
                    await asyncio.wrap_future(completion)
                else:
                    unawaited.append(completion)
                times.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker(index * per_worker) for index in range(in_flight)))
        for future in unawaited:
            await asyncio.wrap_future(future)
        return times, time.perf_counter() - started

    times, elapsed = asyncio.run(measure())
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)], len(times) / elapsed


def completion_cost(
    folder: Path, count: int, rounds: int, dsn: str | None = None
) -> list[tuple[str, int, str, float, float, float]]:
    """Today's unawaited completion beside the awaited one, alternating, in one store.

    Rows: (store, in flight, mode, p50 ms, p99 ms, requests/s), the median of ``rounds``.
    """
    rows = []
    name = "PostgreSQL" if dsn else "FULL"
    store = open_store(folder, "completion", "FULL", dsn)
    for in_flight in (1, 64):
        results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
        for _ in range(rounds):
            for durable in (False, True):
                results[durable].append(
                    request_cycle(store, count, in_flight, durable_answer=durable)
                )
        for durable, measured in results.items():
            p50 = statistics.median(m[0] for m in measured)
            p99 = statistics.median(m[1] for m in measured)
            rate = statistics.median(m[2] for m in measured)
            mode = "awaited (now)" if durable else "not awaited (before)"
            rows.append((name, in_flight, mode, p50, p99, rate))
            print(
                f"audit: completion {mode}, {name}, {in_flight} in flight: "
                f"p50 {p50:.3f} ms, p99 {p99:.3f} ms, {rate:,.0f} requests/s"
            )
    store.close()
    return rows


def verify_time(folder: Path, count: int) -> tuple[float, float]:
    """Seconds to write ``count`` records, and seconds to verify them."""
    store = open_store(folder, "verify", "NORMAL")
    started = time.perf_counter()
    batch: list[Future[Receipt]] = []
    for number in range(count):
        batch.append(store.submit(record(number)))
        if len(batch) >= 8192:
            for future in batch:
                future.result()
            batch = []
    for future in batch:
        future.result()
    written = time.perf_counter() - started
    reader = store.reader()
    store.close()
    started = time.perf_counter()
    report = verify_tenant(reader, "bench", CipherSuite("standard"), None)
    checked = time.perf_counter() - started
    reader.close()
    if not report.ok or report.records != count:
        raise SystemExit(f"verify failed: {report.problem}")
    return written, checked


def main() -> None:
    """Run every measurement and write the report."""
    parser = argparse.ArgumentParser(prog="python -m bench.audit")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--latency-records", type=int, default=2_000)
    parser.add_argument("--verify-records", type=int, default=1_000_000)
    parser.add_argument("--completion-requests", type=int, default=4_096)
    parser.add_argument("--completion-rounds", type=int, default=3)
    parser.add_argument(
        "--postgres-dsn",
        default=os.environ.get(
            "LOCALGATE_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
        ),
        help="PostgreSQL to measure too (skipped if it does not answer)",
    )
    parser.add_argument(
        "--completion-only",
        action="store_true",
        help="measure only the completion record awaited against not awaited",
    )
    args = parser.parse_args()
    if args.completion_only:
        completion_only(args)
        return
    with tempfile.TemporaryDirectory(prefix="localgate-audit-bench-") as name:
        folder = Path(name)
        rows = []
        for synchronous in ("FULL", "NORMAL"):
            for in_flight in (1, 64):
                rate = sustained(folder, synchronous, args.records, in_flight)
                rows.append((synchronous, in_flight, rate))
                print(f"audit: {synchronous} in flight {in_flight}: {rate:,.0f} records/s")
        for in_flight in (1, 64):
            with postgres_schema(args.postgres_dsn) as dsn:
                if dsn is None:
                    break
                rate = sustained(folder, "postgres", args.records, in_flight, dsn)
                rows.append(("PostgreSQL", in_flight, rate))
                print(f"audit: PostgreSQL in flight {in_flight}: {rate:,.0f} records/s")
        latency = {s: stage_latency(folder, s, args.latency_records) for s in ("FULL", "NORMAL")}
        print(f"audit: request record latency {latency}")
        completion = completion_cost(folder, args.completion_requests, args.completion_rounds)
        with postgres_schema(args.postgres_dsn) as dsn:
            if dsn is not None:
                completion += completion_cost(
                    folder, args.completion_requests, args.completion_rounds, dsn
                )
        written, checked = verify_time(folder, args.verify_records)
        print(
            f"audit: {args.verify_records:,} written in {written:.1f} s, "
            f"verified in {checked:.1f} s"
        )
    args.out.write_text(report(args, rows, latency, completion, written, checked), encoding="utf-8")
    print(f"audit: wrote {args.out}")


def completion_section(
    args: argparse.Namespace, completion: list[tuple[str, int, str, float, float, float]]
) -> list[str]:
    """The Markdown section comparing the completion record awaited and not awaited."""
    return [
        "## Awaiting the completion record before the answer goes out",
        "",
        "The audit stage's share of one request: await the request record, then write the "
        "completion record. *Not awaited* is how the gateway did it before (the answer went "
        "out while its completion record was still queued: a `kill -9` in that window lost "
        "it); *awaited* is how it does it now (a unary answer goes out, and a stream ends, "
        "once its completion record is on disk). Both in one run, alternating, in the same "
        f"store (SQLite with `synchronous: full`, or PostgreSQL); the median of "
        f"{args.completion_rounds} rounds of {args.completion_requests:,} requests. "
        "Requests/s counts until every record is on disk.",
        "",
        "| store | requests in flight | completion record | p50 ms | p99 ms | requests/s |",
        "|---|---:|---|---:|---:|---:|",
        *(
            f"| {store} | {flight} | {mode} | {p50:.3f} | {p99:.3f} | {rate:,.0f} |"
            for store, flight, mode, p50, p99, rate in completion
        ),
        "",
    ]


def completion_only(args: argparse.Namespace) -> None:
    """Only the completion comparison, as a Markdown section in ``--out``."""
    with tempfile.TemporaryDirectory(prefix="localgate-audit-bench-") as name:
        folder = Path(name)
        completion = completion_cost(folder, args.completion_requests, args.completion_rounds)
        with postgres_schema(args.postgres_dsn) as dsn:
            if dsn is not None:
                completion += completion_cost(
                    folder, args.completion_requests, args.completion_rounds, dsn
                )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = completion_section(args, completion)
    lines.insert(
        2,
        f"`python -m bench.audit --completion-only --out {args.out}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, localgate at {commit or 'unknown'}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end.\n",
    )
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print(f"audit: wrote {args.out}")


def report(
    args: argparse.Namespace,
    rows: list[tuple[str, int, float]],
    latency: dict[str, tuple[float, float]],
    completion: list[tuple[str, int, str, float, float, float]],
    written: float,
    checked: float,
) -> str:
    """The Markdown report."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    best_full = max(rate for sync, _, rate in rows if sync == "FULL")
    postgres = [rate for sync, _, rate in rows if sync == "PostgreSQL"]
    postgres_line = (
        f"On PostgreSQL (same machine, default settings: every commit durable): "
        f"**{max(postgres):,.0f} records/s** with 64 in flight (target ≥ 3,000: "
        f"{'met' if max(postgres) >= 3000 else 'missed'})."
        if postgres
        else "PostgreSQL was not reachable for this run."
    )
    lines = [
        "# Audit trail benchmark",
        "",
        f"`python -m bench.audit --out {args.out}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"localgate at {commit or 'unknown'}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs. The store writes to a fresh SQLite file (WAL) in a temporary "
        "folder; each record is a request record shaped like the gateway's (header with "
        f"redaction counts, HMAC'd prompt, {len(PAYLOAD)}-byte payload encrypted with "
        "AES-256-GCM, Merkle leaf appended to the tenant's frontier).",
        "",
        "## Records per second (one writer thread, group commit)",
        "",
        "| store / synchronous | records waiting at most | records/s |",
        "|---|---:|---:|",
        *(f"| {sync} | {flight} | {rate:,.0f} |" for sync, flight, rate in rows),
        "",
        f"With 64 records in flight (as under 64 concurrent requests), group commit puts many "
        f"records in one transaction: **{best_full:,.0f} records/s with every batch fsynced** "
        f"(target ≥ 5,000: {'met' if best_full >= 5000 else 'missed'}). One record at a time "
        "pays a whole commit (an fsync with `synchronous: full`) per record.",
        "",
        postgres_line,
        "",
        "## The request record's latency (one request at a time)",
        "",
        "| synchronous | p50 ms | p99 ms |",
        "|---|---:|---:|",
        *(f"| {sync} | {p50:.3f} | {p99:.3f} |" for sync, (p50, p99) in latency.items()),
        "",
        f"The gateway awaits the request record before forwarding: this is what the audit "
        f"stage adds to a request at concurrency 1 (target ≤ 1 ms at p50: "
        f"{'met' if latency['FULL'][0] <= 1 else 'missed'} with `synchronous: full`). The "
        "completion record of a unary answer is awaited too (next section).",
        "",
        *completion_section(args, completion),
        "## Verification",
        "",
        f"{args.verify_records:,} records written in {written:.1f} s; `verify` (every header, "
        f"ciphertext digest and the Merkle root) took **{checked:.1f} s** "
        f"(target ≤ 30 s: {'met' if checked <= 30 else 'missed'}).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
