"""``python -m bench.stages --body pii-dense``: CPU per request, stage by stage, in process.

The gateway is built as ``localgate serve`` builds it (``create_app``, its lifespan run),
with its configuration (``--config``, else the built-in defaults) and a data directory
of its own; the fake Gemini upstream runs in a process of its own. Requests go straight
to the ASGI app, one after another, from this process's event loop (uvloop, as the
server uses): no HTTP parsing on the gateway's side (uvicorn's share is not in these
figures), no client in this process beyond handing over the body.

The CPU time of the event loop's thread (``time.thread_time``) is split at the stage
boundaries the pipeline already has (its stage timers, ``GatewayMetrics.stages``, the
same ones tracing's spans use) and at a few functions of the response path, each time
*exclusive* of the stages nested in it (detection inside redaction, the answer record
inside the completion). What falls outside every stage is "other Python around the
stages". The upstream call (the HTTP client's work, and decoding the answer) is shown
apart from the gateway's own stages. The other threads' CPU (the audit trail's writer,
the access log's writer) is measured per thread from ``/proc``.

Each figure is the median over ``--passes`` passes of ``--requests`` requests, after a
warm-up. CPU time moves less with other programs' load than wall time, but it does move
(on a busy two-CPU machine, by 10-20% between runs): compare two versions side by side,
run after run, or count instructions (callgrind). The timing itself costs about a
microsecond per timed stage, charged to the stage around it (mostly "pipeline"). For a
stream, opening it and decoding its events (the SSE decoder) are the upstream call; the
HTTP client's reading of the events after the first falls in "other Python around the
stages", with the per-event quality signals and the generators that carry each event
to the client. ``--events`` sets the events per streamed answer: the difference between
two runs, divided by the difference in events, is the CPU per event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.run import BODY_NAMES, MODEL, READY_DEADLINE_S, REPO, UPSTREAM_KEY, varying_bodies
from bench.servers import (
    ServerProcess,
    clean_environment,
    fake_upstream_command,
    free_ports,
    http_call,
)

__all__ = ["STAGES", "CpuStages", "main"]

# The rows of the table, in the order a request meets them.
STAGES = (
    ("front door", "request context, route match, header checks (endpoint)"),
    ("request parse", "reading the body, JSON parse and schema validation"),
    ("pipeline", "Pipeline.run outside its stages: route plan, quality signals, usage"),
    ("identity", "key check (pipeline stage timer)"),
    ("limits", "rate and quota limits (pipeline stage timer)"),
    ("redaction: detect", "Detector.detect: finding personal data"),
    ("redaction: rewrite", "the rest of the redaction stage: walking the body, placeholders"),
    ("retrieval", "pipeline stage timer"),
    ("cache", "lookup (pipeline stage timer)"),
    ("audit: request record", "pipeline stage timer"),
    ("answer copy", "the answer as sent upstream, kept for the audit trail and cache"),
    ("restoration", "placeholders back in the answer, thought signatures sealed"),
    ("audit: answer record", "the completion record, until it is durable"),
    ("completion", "access-log line, metrics, permit (rest of Completion.finish)"),
    ("response serialisation", "the answer (or each event) as JSON bytes"),
)
UPSTREAM = "upstream call"
OTHER = "other Python around the stages"


class CpuStages:
    """Accumulates the calling thread's CPU time per stage, exclusive of nested stages."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._stack: list[list[float]] = []  # per open stage: CPU spent in nested stages

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as ``name``."""
        frame = [0.0]
        self._stack.append(frame)
        started = time.thread_time()
        try:
            yield
        finally:
            elapsed = time.thread_time() - started
            self._stack.pop()
            self.totals[name] = self.totals.get(name, 0.0) + elapsed - frame[0]
            if self._stack:
                self._stack[-1][0] += elapsed

    def sync(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` timed as ``name``."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.stage(name):
                return function(*args, **kwargs)

        return timed

    def coroutine(
        self, name: str, function: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        """``function`` (a coroutine function) timed as ``name``, waits included: requests
        go one at a time, so the loop does nothing else meanwhile but this one's work."""

        async def timed(*args: Any, **kwargs: Any) -> Any:
            with self.stage(name):
                return await function(*args, **kwargs)

        return timed

    def timer(self, name: str) -> Callable[[], AbstractContextManager[None]]:
        """A stand-in for a pipeline stage timer (``GatewayMetrics.stages[...]``)."""
        return lambda: self.stage(name)

    def reset(self) -> None:
        """Forget what was counted (between passes)."""
        self.totals = {}


def _instrument(state: Mapping[str, Any], cpu: CpuStages, stack: ExitStack) -> None:
    """Put the CPU timers in at the pipeline's stage boundaries (undone by ``stack``)."""
    from localgate.frontdoor import body as body_module
    from localgate.frontdoor import endpoint as endpoint_module
    from localgate.gemini import framing
    from localgate.redaction.detector import Detector

    services = state["services"]
    pipeline = services.pipeline
    stages = services.metrics.stages
    names = {
        "identity": "identity",
        "limits": "limits",
        "redaction": "redaction: rewrite",
        "retrieval": "retrieval",
        "cache": "cache",
        "audit": "audit: request record",
        "upstream": UPSTREAM,
    }
    saved_stages = dict(stages)
    stages.update({key: cpu.timer(name) for key, name in names.items()})
    stack.callback(stages.update, saved_stages)

    def patch(owner: Any, attribute: str, replacement: Any) -> None:
        original = getattr(owner, attribute)
        setattr(owner, attribute, replacement)
        stack.callback(setattr, owner, attribute, original)

    patch(Detector, "detect", cpu.sync("redaction: detect", Detector.detect))
    read_json = body_module.IncomingRequest.read_json
    patch(body_module.IncomingRequest, "read_json", cpu.coroutine("request parse", read_json))
    from localgate.gemini.schemas import validate_body

    patch(endpoint_module, "validate_body", cpu.sync("request parse", validate_body))
    patch(pipeline, "run", cpu.coroutine("pipeline", pipeline.run))
    patch(pipeline, "_keep", cpu.sync("answer copy", pipeline._keep))
    redaction = pipeline.redaction
    for method in ("restore_answer", "restore_event", "finish_stream"):
        patch(redaction, method, cpu.sync("restoration", getattr(redaction, method)))
    completion = pipeline.completion
    patch(completion, "finish", cpu.coroutine("completion", completion.finish))
    audit = completion._audit
    patch(audit, "record_outcome", cpu.coroutine("audit: answer record", audit.record_outcome))
    patch(endpoint_module, "dump_json", cpu.sync("response serialisation", framing.dump_json))
    encode = framing.StreamEncoder.event
    patch(framing.StreamEncoder, "event", cpu.sync("response serialisation", encode))
    front = endpoint_module.GeminiEndpoint._handle
    patch(endpoint_module.GeminiEndpoint, "_handle", cpu.coroutine("front door", front))
    # A stream's events after the first are decoded while the response goes out: the
    # decoding is the upstream call's (taken whole per chunk, which the gateway does
    # anyway before it moves on).
    feed = framing.SseDecoder.feed

    def decoded(decoder: Any, chunk: bytes) -> list[Any]:
        return list(feed(decoder, chunk))

    patch(framing.SseDecoder, "feed", cpu.sync(UPSTREAM, decoded))


class _Gateway:
    """The ASGI app with its lifespan running, called request by request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self.state}
        self._task = asyncio.create_task(self.app(scope, self._inbox.get, self._outbox.put))
        await self._inbox.put({"type": "lifespan.startup"})
        message = await self._outbox.get()
        if message["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"the gateway did not start: {message}")

    async def stop(self) -> None:
        await self._inbox.put({"type": "lifespan.shutdown"})
        await self._outbox.get()
        if self._task is not None:
            await self._task

    async def call(self, path: str, query: bytes, body: bytes, key: str) -> tuple[int, bytes]:
        """POST ``body``; the status and the whole response body."""
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query,
            "root_path": "",
            "headers": [
                (b"host", b"127.0.0.1"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-goog-api-key", key.encode()),
            ],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8080),
            "state": dict(self.state),
        }
        given = False
        never: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await never  # the client stays; cancelled with the response's watcher

        status = 0
        chunks: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        never.cancel()
        return status, b"".join(chunks)


def _thread_cpu_s() -> dict[str, float]:
    """CPU seconds so far of every Python thread of this process but the calling one."""
    ticks = os.sysconf("SC_CLK_TCK")
    own = threading.get_native_id()
    found: dict[str, float] = {}
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None or tid == own:
            continue
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[thread.name] = (
            found.get(thread.name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
        )
    return found


async def _measure(
    gateway: _Gateway,
    cpu: CpuStages,
    *,
    stream: bool,
    body: Callable[[int], bytes],
    key: str,
    requests: int,
    passes: int,
    warmup: int,
) -> list[dict[str, float]]:
    """Per pass: µs per request for every stage, the upstream call, the rest, the total
    of the loop's thread, and each other thread."""
    path = MODEL + (":streamGenerateContent" if stream else ":generateContent")
    query = b"alt=sse" if stream else b""
    sent = 0
    for _ in range(warmup):
        status, answer = await gateway.call(path, query, body(sent), key)
        sent += 1
        if status != 200:
            raise RuntimeError(f"the gateway answered {status}: {answer[:300]!r}")
    results = []
    for _ in range(passes):
        # Made before the clock starts: each request its own text (bench.run.BODY_MARKER).
        bodies = [body(sent + number) for number in range(requests)]
        sent += requests
        cpu.reset()
        threads_before = _thread_cpu_s()
        started = time.thread_time()
        for this in bodies:
            with cpu.stage(OTHER):
                status, answer = await gateway.call(path, query, this, key)
            if status != 200:
                raise RuntimeError(f"the gateway answered {status}: {answer[:300]!r}")
        total = time.thread_time() - started
        threads_after = _thread_cpu_s()
        row = {name: seconds / requests * 1e6 for name, seconds in cpu.totals.items()}
        row["total (event loop thread)"] = total / requests * 1e6
        for name, seconds in threads_after.items():
            used = seconds - threads_before.get(name, 0.0)
            row[f"thread {name}"] = used / requests * 1e6
        results.append(row)
    return results


def _table(passes: list[dict[str, float]]) -> list[str]:
    keys = [name for name, _ in STAGES]
    own = [name for name in keys if any(name in row for row in passes)]
    extra = sorted({name for row in passes for name in row if name.startswith("thread ")})

    def median(name: str) -> float:
        return statistics.median(row.get(name, 0.0) for row in passes)

    gateway = sum(median(name) for name in own) + median(OTHER)
    lines = [
        "| stage | CPU µs/request | share of the gateway's own |",
        "| --- | ---: | ---: |",
    ]
    lines += [
        f"| {name} | {median(name):.1f} | {median(name) / gateway:.0%} |"
        for name in own
        if median(name) >= 0.05
    ]
    lines += [
        f"| {OTHER} | {median(OTHER):.1f} | {median(OTHER) / gateway:.0%} |",
        f"| **the gateway's own, event loop thread** | **{gateway:.1f}** | 100% |",
        f"| {UPSTREAM} (HTTP client, answer decoding; apart) | {median(UPSTREAM):.1f} | |",
        f"| total, event loop thread | {median('total (event loop thread)'):.1f} | |",
    ]
    lines += [f"| {name} | {median(name):.1f} | |" for name in extra if median(name) >= 0.05]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the table (and write it with ``--out``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__)
    parser.add_argument("--body", choices=BODY_NAMES, default="pii-dense")
    parser.add_argument("--config", type=Path, default=None, help="localgate configuration")
    parser.add_argument("--stream", action="store_true", help="streamGenerateContent (SSE)")
    parser.add_argument("--requests", type=int, default=1000, help="requests per pass")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument("--json", type=Path, default=None, help="also write the passes here")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another version's src directory (e.g. from `git worktree add`): measure it and "
        "this one in turn, --rounds times, and print both side by side",
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds with --baseline")
    parser.add_argument(
        "--events",
        type=int,
        default=None,
        help="with --stream: events per streamed answer (default: the fake upstream's usual "
        "three, as in bench.run); run with two values to get the CPU per event",
    )
    parser.add_argument(
        "--bare",
        action="store_true",
        help="no timers and no table: --warmup plus --requests requests, then exit; for an "
        "instruction count per request, run it under `valgrind --tool=callgrind` with two "
        "--requests values and divide the difference",
    )
    args = parser.parse_args(argv)
    arguments = list(argv) if argv is not None else sys.argv[1:]
    if args.baseline is not None:
        return _compare(args, arguments)
    body = varying_bodies(args.body)
    with tempfile.TemporaryDirectory(prefix="localgate-stages-") as tmp, ExitStack() as stack:
        (port,) = free_ports(1)
        upstream = ServerProcess(
            "fake upstream",
            fake_upstream_command(port, stream_events=args.events),
            env=clean_environment(),
            cwd=REPO,
            log_path=Path(tmp) / "upstream.log",
        )
        stack.callback(upstream.stop)
        upstream.start()
        upstream.wait_ready(
            lambda: http_call(port, "GET", "/v1beta/models", timeout_s=2)[0] == 200,
            READY_DEADLINE_S,
        )
        passes = _run(args, Path(tmp), f"http://127.0.0.1:{port}", body)
    if args.bare:
        return 0
    what = "streamGenerateContent (SSE)" if args.stream else "generateContent"
    if args.stream and args.events is not None:
        what += f", {args.events} events per answer"
    config = args.config or "the built-in defaults"
    lines = [
        f"CPU per request by stage: {what}, body {args.body}, {config}; median of "
        f"{args.passes} passes of {args.requests} requests.",
        "",
        *_table(passes),
    ]
    print("\n".join(lines))
    if args.out is not None:
        command = " ".join(["python -m bench.stages", *arguments])
        args.out.write_text(
            "# CPU per request by stage\n\n"
            f"Generated by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; re-run to "
            "refresh. How it is measured: the docstring of `bench/stages.py`. Before/after "
            "comparisons of the speed work: docs/benchmarks-history.md.\n\n"
            + "\n".join(lines)
            + "\n"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(passes, indent=1))
    return 0


def _compare(args: argparse.Namespace, arguments: list[str]) -> int:
    """This version against ``--baseline``, each in a process of its own, in turn."""
    options: list[str] = []
    skip = False
    for word in arguments:  # the same options, minus those of the comparison itself
        if skip:
            skip = False
        elif word in _COMPARISON_OPTIONS:
            skip = True
        elif not word.startswith(tuple(f"{option}=" for option in _COMPARISON_OPTIONS)):
            options.append(word)
    versions = {"before": args.baseline.resolve(), "after": REPO / "src"}
    passes: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="localgate-stages-") as tmp:
        for round_number in range(1, args.rounds + 1):
            for label, src in versions.items():
                out = Path(tmp) / f"{label}-{round_number}.json"
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(REPO)])}
                command = [sys.executable, "-m", "bench.stages", *options, "--json", str(out)]
                subprocess.run(command, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
                passes[label] += json.loads(out.read_text())
                print(f"bench.stages: round {round_number}, {label} measured", file=sys.stderr)
    lines = [
        f"CPU µs per request by stage: {args.baseline} (before) against {REPO / 'src'} "
        f"(after), measured in turn, {args.rounds} rounds of {args.passes} passes of "
        f"{args.requests} requests each; medians of the passes.",
        "",
        *_comparison(passes["before"], passes["after"]),
    ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


_COMPARISON_OPTIONS = ("--baseline", "--rounds", "--out", "--json")


def _comparison(before: list[dict[str, float]], after: list[dict[str, float]]) -> list[str]:
    """The before/after table: every stage, their sum, the upstream call, the threads."""

    def median(rows: list[dict[str, float]], name: str) -> float:
        return statistics.median(row.get(name, 0.0) for row in rows)

    lines = ["| stage | before | after | change |", "| --- | ---: | ---: | ---: |"]
    totals = [0.0, 0.0]
    for name in [*(name for name, _ in STAGES), OTHER]:
        old, new = median(before, name), median(after, name)
        totals[0] += old
        totals[1] += new
        lines.append(f"| {name} | {old:.1f} | {new:.1f} | {new - old:+.1f} |")
    lines.append(
        f"| **the gateway's own** | **{totals[0]:.1f}** | **{totals[1]:.1f}** | "
        f"**{totals[1] - totals[0]:+.1f}** |"
    )
    threads = sorted({name for row in before + after for name in row if name.startswith("thread ")})
    for name in [UPSTREAM, "total (event loop thread)", *threads]:
        old, new = median(before, name), median(after, name)
        if old >= 0.05 or new >= 0.05:
            lines.append(f"| {name} | {old:.1f} | {new:.1f} | {new - old:+.1f} |")
    return lines


def _run(
    args: argparse.Namespace, tmp: Path, upstream_url: str, body: Callable[[int], bytes]
) -> list[dict[str, float]]:
    import uvloop

    from localgate.app import create_app
    from localgate.config import load_settings
    from localgate.identity import SqliteKeyStore

    environ = {
        "LOCALGATE_DATA_DIR": str(tmp / "data"),
        "LOCALGATE_UPSTREAM_URL": upstream_url,
        "GEMINI_API_KEY": UPSTREAM_KEY,
    }
    settings = load_settings(args.config, environ)[0]
    store = SqliteKeyStore(settings.state_db_path)
    key = store.create("bench", "stages").key.reveal()
    store.close()

    async def measure() -> list[dict[str, float]]:
        gateway = _Gateway(create_app(settings))
        await gateway.start()
        cpu = CpuStages()
        try:
            if args.bare:
                path = MODEL + (":streamGenerateContent" if args.stream else ":generateContent")
                for this in [body(number) for number in range(args.warmup + args.requests)]:
                    status, answer = await gateway.call(
                        path, b"alt=sse" if args.stream else b"", this, key
                    )
                    if status != 200:
                        raise RuntimeError(f"the gateway answered {status}: {answer[:300]!r}")
                return []
            with ExitStack() as undo:
                _instrument(gateway.state, cpu, undo)
                return await _measure(
                    gateway,
                    cpu,
                    stream=args.stream,
                    body=body,
                    key=key,
                    requests=args.requests,
                    passes=args.passes,
                    warmup=args.warmup,
                )
        finally:
            await gateway.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(measure())


if __name__ == "__main__":
    sys.exit(main())
