"""Audit trail benchmark: records/s, the request record's latency, verify time, and what
awaiting the completion record costs a request.

    python -m bench.audit --out docs/benchmarks-audit.md [--records N] [--verify-records N]
    python -m bench.audit --cpu-only --out FILE [--cpu-requests N] [--cpu-rounds N]

``--cpu-only`` measures the CPU the audit trail spends per request (the gateway's audit
stage on request contexts like the gateway's, the writer thread, and each part of the
writer's work) on SQLite and PostgreSQL; see ``cpu_section``.

Targets (from the audit-trail issue): at least 5,000 records/s sustained on SQLite; the
audit stage adds at most 1 ms at p50 with one request at a time; ``audit verify``
checks 1,000,000 records in at most 30 s. Everything runs in this process against a
fresh SQLite file in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import platform
import pstats
import secrets
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import PostgresDatabase, sqlite_at
from localgate.audit.records import PendingRecord
from localgate.audit.spool import Spool
from localgate.audit.stage import TrailAudit
from localgate.audit.store import AuditStore, Receipt
from localgate.audit.verify import verify_tenant
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.principal import Principal
from localgate.gemini.routes import match_route

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


# A customer-service prompt dense with personal data (about 2 KB in UTF-8), as the
# client sent it and as it left the gateway (placeholders), for the CPU measurement.
DENSE_ORIGINAL = (
    "客户张伟（手机 13812345678，备用 15900001111，身份证 110101199003074578）来电投诉："
    "他在 3 月 2 日下单的冰箱至今未送达，收货地址是北京市朝阳区建国路 88 号 SOHO 现代城 "
    "2 号楼 1203 室。Please draft an apology in English and Chinese to Mr. Zhang Wei "
    "(zhang.wei@example.com.cn, cc li.na@corp-example.cn) explaining the delay, offering a "
    "20% voucher, and confirming the new delivery window. 他的妻子李娜（电话 13698765432）"
    "周末在家，可以签收。Our colleague Wang Fang (wang.fang@corp-example.cn) handled the "
    "first call; 订单号 CN-2026-0302-77812，发票抬头为北京远航科技有限公司。请注意语气诚恳，"
    "并说明我们已经联系了上海市浦东新区张江路 500 号的仓库，预计 3 月 9 日送达。"
) * 2
DENSE_SENT = (
    "客户[PERSON_1]（手机 [CN_MOBILE_1]，备用 [CN_MOBILE_2]，身份证 [CN_RESIDENT_ID_1]）来电投诉："
    "他在 3 月 2 日下单的冰箱至今未送达，收货地址是[ADDRESS_1]。Please draft an apology in "
    "English and Chinese to Mr. [PERSON_1] ([EMAIL_1], cc [EMAIL_2]) explaining the delay, "
    "offering a 20% voucher, and confirming the new delivery window. 他的妻子[PERSON_2]（电话 "
    "[CN_MOBILE_3]）周末在家，可以签收。Our colleague [PERSON_3] ([EMAIL_3]) handled the "
    "first call; 订单号 CN-2026-0302-77812，发票抬头为[ORGANIZATION_1]。请注意语气诚恳，"
    "并说明我们已经联系了[ADDRESS_2]的仓库，预计 3 月 9 日送达。"
) * 2
DENSE_ANSWER = (
    '{"candidates":[{"content":{"role":"model","parts":[{"text":"尊敬的[PERSON_1]先生：'
    "非常抱歉您的冰箱未能按时送达。我们已联系仓库，新的送达时间为 3 月 9 日，届时[PERSON_2]"
    "女士可在家签收。随信附上 20% 优惠券。Dear Mr. [PERSON_1], we sincerely apologise for the "
    'delay...\\"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":'
    '512,"candidatesTokenCount":96,"totalTokenCount":608},"modelVersion":"gemini-2.5-flash"}'
).encode()
_CPU_ROUTE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
_REDACTED = {
    ("PERSON", "pseudonymize"): 3,
    ("CN_MOBILE", "pseudonymize"): 3,
    ("CN_RESIDENT_ID", "pseudonymize"): 1,
    ("EMAIL", "pseudonymize"): 3,
    ("ADDRESS", "pseudonymize"): 2,
    ("ORGANIZATION", "pseudonymize"): 1,
}


def gateway_context(number: int, tenant: str = "bench") -> RequestContext:
    """A request context as the audit stage sees it after redaction and an answer."""
    ctx = RequestContext(
        f"{number:032x}", _CPU_ROUTE, client="10.0.0.7", principal=Principal(tenant, "k1")
    )
    ctx.body = {
        "contents": [{"role": "user", "parts": [{"text": DENSE_SENT}]}],
        "generationConfig": {"temperature": 0.2},
    }
    ctx.original_texts = [DENSE_ORIGINAL]
    ctx.redaction_summary = dict(_REDACTED)
    ctx.upstream, ctx.attempt = "gemini", 1
    ctx.attempts = [{"upstream": "gemini", "status": 200, "latency_ms": 412.5}]
    ctx.model_version = "gemini-2.5-flash"
    ctx.usage_metadata = {"promptTokenCount": 512, "candidatesTokenCount": 96}
    ctx.answer_events = [DENSE_ANSWER]
    return ctx


# The writer's and the event loop's work in parts, by the functions that do them: their
# names before and after the writer took a batch's frontiers in one read and its rows,
# frontiers and COMMIT in one call (a part whose functions are absent reads 0).
WRITER_PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "header + canonical JSON": (("records.py", "canonical"), ("store.py", "_append:self")),
    "sealing (AES-GCM, ciphertext digest)": (("store.py", "_seal"),),
    "prompt HMAC, sent digest": (("crypto.py", "mac"), ("crypto.py", "digest<-_append")),
    "Merkle leaf + frontier": (
        ("merkle.py", "hash_leaf"),
        ("merkle.py", "append"),
        ("merkle.py", "to_bytes"),
    ),
    "BEGIN, locks, frontier read": (
        ("database.py", "begin<-_write"),
        ("database.py", "lock_logs<-_write"),
        ("store.py", "_frontier"),
        ("database.py", "open_logs"),
        ("merkle.py", "from_bytes<-_write"),
    ),
    "INSERT rows and frontiers": (
        ("store.py", "_insert"),
        ("database.py", "execute<-_write"),
        ("database.py", "write_and_commit-commit"),
    ),
    "COMMIT": (("database.py", "commit<-_write"), ("database.py", "commit<-write_and_commit")),
    "waking the waiters": (
        ("_base.py", "set_result"),
        ("_base.py", "set_running_or_notify_cancel"),
        ("store.py", "_settle"),
    ),
}
STAGE_PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "request record (stage)": (("stage.py", "record_request"),),
    "completion record (stage)": (("stage.py", "record_outcome"),),
}


def _part_seconds(stats: pstats.Stats, spec: tuple[tuple[str, str], ...]) -> float:
    """Seconds spent in a part: inclusive time of its functions (``name:self`` for a
    function's own time, ``name<-caller`` for the time of calls from ``caller`` only,
    ``name-callee`` for its time less that of its calls of ``callee``)."""
    total = 0.0
    table = stats.stats  # type: ignore[attr-defined]
    for (filename, _, function), (_, _, own, inclusive, callers) in table.items():
        for file_suffix, wanted in spec:
            if not filename.endswith(file_suffix):
                continue
            name, _, caller = wanted.partition("<-")
            name, _, callee = name.partition("-")
            name, _, mode = name.partition(":")
            if function != name:
                continue
            if caller:
                total += sum(
                    times[3] for (_, _, calling), times in callers.items() if calling == caller
                )
            elif callee:
                total += inclusive - _called_from(table, callee, function)
            else:
                total += own if mode == "self" else inclusive
    return total


def _called_from(table: dict[Any, Any], callee: str, caller: str) -> float:
    """Inclusive seconds of ``callee``'s calls made by ``caller``."""
    return float(
        sum(
            times[3]
            for (_, _, function), (*_, callers) in table.items()
            if function == callee
            for (_, _, calling), times in callers.items()
            if calling == caller
        )
    )


def _writer_clock() -> int:
    """The CPU clock of the audit writer thread (started by the store)."""
    for thread in threading.enumerate():
        if thread.name == "audit-writer" and thread.ident is not None:
            return time.pthread_getcpuclockid(thread.ident)
    raise RuntimeError("no audit writer thread")


def stage_cpu(
    folder: Path, count: int, in_flight: int, dsn: str | None, *, profile: bool
) -> tuple[float, float, dict[str, float]]:
    """CPU seconds per request of the event loop's thread and of the writer thread, for
    requests through the real audit stage (request record awaited, then the completion
    record awaited); with ``profile``, the seconds per request of each part (cProfile,
    thread CPU time: its own overhead inflates them, so only their shares are used)."""
    name = f"cpu-{in_flight}-{secrets.token_hex(3)}"
    store = open_store(folder, name, "FULL", dsn)
    master = MasterKey(MasterKey.generate())
    stage = TrailAudit(store, Spool(folder / f"{name}.spool", master))
    writer_profile = cProfile.Profile(time.thread_time)
    warm = [gateway_context(number) for number in range(64)]
    contexts = [gateway_context(number) for number in range(64, 64 + count)]

    async def run(batch: list[RequestContext]) -> None:
        queue = iter(batch)

        async def worker() -> None:
            for ctx in queue:
                await stage.record_request(ctx)
                await stage.record_outcome(ctx, Outcome.FORWARDED, 200)

        await asyncio.gather(*(worker() for _ in range(in_flight)))

    main_profile = cProfile.Profile(time.thread_time)
    parts: dict[str, float] = {}
    try:
        asyncio.run(run(warm))
        clock = _writer_clock()
        if profile:
            _profile_writer(store, writer_profile)
        main_before, writer_before = time.thread_time(), time.clock_gettime(clock)
        if profile:
            main_profile.enable()
        asyncio.run(run(contexts))
        if profile:
            main_profile.disable()
        main = (time.thread_time() - main_before) / count
        writer = (time.clock_gettime(clock) - writer_before) / count
    finally:
        store.close()
    if profile:
        for stats, table in (
            (pstats.Stats(writer_profile), WRITER_PARTS),
            (pstats.Stats(main_profile), STAGE_PARTS),
        ):
            for part, spec in table.items():
                parts[part] = _part_seconds(stats, spec) / count
        for label, measured in (("writer", writer_profile), ("main", main_profile)):
            table = pstats.Stats(measured).stats  # type: ignore[attr-defined]
            parts[f"{label} (profiled)"] = sum(row[2] for row in table.values()) / count
    return main, writer, parts


def _profile_writer(store: AuditStore, profile: cProfile.Profile) -> None:
    """Profile the writer thread from its next batch on (set from inside that thread)."""
    done = threading.Event()

    def enable() -> None:
        profile.enable()
        done.set()

    # A probe runs on the writer thread between batches: wrap it to switch profiling on.
    original = store._probe

    def probe_then_enable(probe: Any) -> None:
        enable()
        store._probe = original  # type: ignore[method-assign]
        original(probe)

    store._probe = probe_then_enable  # type: ignore[method-assign]
    store.probe().result(timeout=60)
    done.wait(timeout=60)


def cpu_child(args: argparse.Namespace) -> None:
    """One CPU measurement in this process, printed as one JSON line (``--cpu-child``)."""
    import json

    results = []
    with tempfile.TemporaryDirectory(prefix="localgate-audit-bench-") as name:
        for profile in (False, True):
            with contextlib.ExitStack() as stack:
                dsn = None
                if args.cpu_store == "postgres":
                    # A schema each: every store has a master key of its own.
                    dsn = stack.enter_context(postgres_schema(args.postgres_dsn))
                    if dsn is None:
                        print(json.dumps(None))
                        return
                results.append(
                    stage_cpu(
                        Path(name), args.cpu_requests, args.cpu_in_flight, dsn, profile=profile
                    )
                )
    (main, writer, _), (_, _, parts) = results
    print(json.dumps({"main": main, "writer": writer, "parts": parts}))


CpuRow = tuple[str, str, int, dict[str, float]]


def cpu_compare(args: argparse.Namespace) -> list[CpuRow]:
    """Each (store, in flight) measured ``--cpu-rounds`` times in child processes,
    alternating this checkout's code with ``--baseline-src`` (if given); medians."""
    import json
    import sys

    here = Path(__file__).resolve().parent.parent
    versions = {"after": str(here / "src")}
    if args.baseline_src:
        versions = {"before": str(Path(args.baseline_src).resolve()), **versions}
    rows: list[CpuRow] = []
    for store in ("sqlite", "postgres"):
        for in_flight in (1, 64):
            measured: dict[str, list[dict[str, Any]]] = {label: [] for label in versions}
            for _ in range(args.cpu_rounds):
                for label, source in versions.items():
                    child = subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "bench.audit",
                            "--cpu-child",
                            "--out",
                            "-",
                            "--cpu-store",
                            store,
                            "--cpu-in-flight",
                            str(in_flight),
                            "--cpu-requests",
                            str(args.cpu_requests),
                            "--postgres-dsn",
                            args.postgres_dsn,
                        ],
                        capture_output=True,
                        text=True,
                        check=True,
                        cwd=here,
                        env={**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{here}"},
                    )
                    result = json.loads(child.stdout.strip().splitlines()[-1])
                    if result is not None:
                        measured[label].append(result)
            for label, results in measured.items():
                if not results:
                    continue
                row = _median_cpu(results)
                rows.append((store, label, in_flight, row))
                print(
                    f"audit cpu: {store} {label} in flight {in_flight}: "
                    f"main {row['main'] * 1e6:.0f} µs, writer {row['writer'] * 1e6:.0f} µs"
                )
    return rows


def _median_cpu(results: list[dict[str, Any]]) -> dict[str, float]:
    """Median totals, and each part as its share of the profiled thread times the
    unprofiled thread's median CPU."""
    row = {
        "main": statistics.median(r["main"] for r in results),
        "writer": statistics.median(r["writer"] for r in results),
    }
    for part in (*WRITER_PARTS, *STAGE_PARTS):
        thread = "writer" if part in WRITER_PARTS else "main"
        shares = [r["parts"].get(part, 0.0) / r["parts"][f"{thread} (profiled)"] for r in results]
        row[part] = statistics.median(shares) * row[thread]
    return row


def cpu_section(args: argparse.Namespace, rows: list[CpuRow]) -> list[str]:
    """The Markdown section on CPU per request."""
    labels = [label for label in ("before", "after") if any(row[1] == label for row in rows)]
    columns = [
        (store, label, flight)
        for store in ("sqlite", "postgres")
        for flight in (1, 64)
        for label in labels
    ]
    table = {(store, label, flight): row for store, label, flight, row in rows}
    present = [c for c in columns if c in table]
    names = {"sqlite": "SQLite full", "postgres": "PostgreSQL"}
    header = (
        "| µs of CPU per request | "
        + " | ".join(
            f"{names[s]}, {f} in flight{', ' + label if len(labels) > 1 else ''}"
            for s, label, f in present
        )
        + " |"
    )
    lines = [
        "## CPU per request",
        "",
        f"`python -m bench.audit --cpu-only --out …` with {args.cpu_requests:,} requests per "
        f"run, the median of {args.cpu_rounds} runs"
        + (
            f", each version in its own process, alternating (*before*: the code in "
            f"`{args.baseline_src}`; *after*: this checkout's)"
            if len(labels) > 1
            else ""
        )
        + ". A request is the real audit stage (`TrailAudit`) on a request context like the "
        f"gateway's: a {len(DENSE_SENT.encode())}-byte redacted prompt with 13 placeholders, "
        "its original text HMAC'd, the request record awaited, then the completion record "
        f"({len(DENSE_ANSWER)}-byte answer) awaited. *Event loop* and *writer* are the CPU "
        "time of those two threads (their CPU clocks, so other load on the machine does not "
        "count); the parts are each one's share in a cProfile run (thread CPU time) times "
        "the unprofiled total: indicative, as the profiler weighs many small calls more.",
        "",
        header,
        "|---|" + "---:|" * len(present),
    ]
    body = [
        ("event loop thread, total", "main"),
        *((p, p) for p in STAGE_PARTS),
        ("writer thread, total", "writer"),
        *((p, p) for p in WRITER_PARTS),
    ]
    for title, key in body:
        cells = " | ".join(f"{table[c][key] * 1e6:.1f}" for c in present)
        bold = "**" if key in ("main", "writer") else ""
        lines.append(f"| {bold}{title}{bold} | {cells} |")
    lines.append("")
    return lines


def cpu_only(args: argparse.Namespace) -> None:
    """Only the CPU per request, as a Markdown section in ``--out``."""
    rows = cpu_compare(args)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = cpu_section(args, rows)
    lines.insert(
        2,
        f"On {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, localgate at {commit or 'unknown'}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end.\n",
    )
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print(f"audit: wrote {args.out}")


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
    parser.add_argument("--cpu-only", action="store_true", help="measure only CPU per request")
    parser.add_argument("--cpu-requests", type=int, default=2_048)
    parser.add_argument("--cpu-rounds", type=int, default=3)
    parser.add_argument(
        "--baseline-src",
        help="another checkout's src/ to measure beside this one (--cpu-only), alternating",
    )
    parser.add_argument("--cpu-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-store", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    parser.add_argument("--cpu-in-flight", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu_child:
        cpu_child(args)
        return
    if args.cpu_only:
        cpu_only(args)
        return
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
