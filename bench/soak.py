"""``python -m bench.soak --requests 500000 --out docs/benchmarks-soak.md``: does memory stay flat?

Starts the fake Gemini upstream and localgate (its built-in defaults unless ``--config``:
redaction and the audit trail on) on free loopback ports, pinned like ``bench.run``
pins them, and sends ``--requests`` requests with wrk in batches of ``--batch`` seconds.
Every request differs from the one before (a running number in a mobile number, an
e-mail address or a question; the redactor replaces the first two and the answer path
restores them), across two models, unary and streamed. After each batch it reads
the gateway's resident memory (and its child processes', e.g. the embedded vector
store's) from ``/proc``, then judges: after the first ``--warmup`` requests, does it
stay within 10% of where it was? The run is bounded: it stops after ``--max-minutes``
even if fewer requests were sent, and says so in the report.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.machine import Machine, describe_machine
from bench.memory import FLAT_TOLERANCE, MemorySample, Verdict, children, judge, rss_kib
from bench.run import CpuLayout
from bench.servers import (
    BenchError,
    ServerProcess,
    clean_environment,
    create_tenant_key,
    fake_upstream_command,
    free_ports,
    http_call,
    pinned,
    stopping_cleanly,
)
from bench.wrk import WrkError, WrkResult, lua_script, lua_string, run_wrk, wrk_command

__all__ = ["main", "render_report", "soak_script", "thinned"]

REPO = Path(__file__).resolve().parents[1]
UPSTREAM_KEY = "bench-upstream-key"  # the fake upstream accepts any key
READY_DEADLINE_S = 60.0
DEFAULT_BATCH_S = 15
DEFAULT_CONNECTIONS = 64
DEFAULT_MAX_MINUTES = 30.0
# The report's sample table is thinned to about this many rows (the warm-up's end, the
# highest sample and the last are always shown).
_TABLE_ROWS = 40
_FLASH = "/v1beta/models/gemini-2.5-flash"
_PRO = "/v1beta/models/gemini-2.5-pro"
# One request in four is streamed; one in four goes to a second model.
PATHS = (
    f"{_FLASH}:generateContent",
    f"{_PRO}:generateContent",
    f"{_FLASH}:generateContent",
    f"{_FLASH}:streamGenerateContent?alt=sse",
)
# ``{n}`` becomes the request's running number (8 digits), so no two requests of a run
# are alike: the redactor finds a new mobile number, e-mail address and order each time.
TEMPLATES = (
    '{"contents":[{"role":"user","parts":[{"text":"客户张伟，手机138{n}，请问话费余额多少？"}]}]}',
    '{"contents":[{"role":"user","parts":[{"text":"Please write to customer{n}@example.com '
    'about order {n} today."}]}],"generationConfig":{"temperature":0}}',
    '{"systemInstruction":{"parts":[{"text":"Be brief."}]},"contents":[{"role":"user",'
    '"parts":[{"text":"Compare plan A and plan B"}]},{"role":"model","parts":[{"text":'
    '"A is cheaper."}]},{"role":"user","parts":[{"text":"And question {n}?"}]}]}',
)


@dataclass(frozen=True, slots=True)
class SoakOptions:
    """The command line's knobs."""

    out: Path
    requests: int
    warmup: int
    batch_s: int
    connections: int
    max_minutes: float
    config: Path | None


@dataclass(frozen=True, slots=True)
class Batch:
    """One wrk run and the memory sample taken right after it."""

    wrk: WrkResult
    sample: MemorySample

    @property
    def errors(self) -> int:
        """Failed requests: socket errors and answers other than 2xx."""
        return self.wrk.socket_errors + self.wrk.non_2xx


def soak_script(headers: Mapping[str, str], first: int) -> str:
    """The wrk script: each request the next of ``TEMPLATES`` and ``PATHS`` with its own
    running number, counting from ``first``."""
    templates = ", ".join(
        "{" + ", ".join(lua_string(piece) for piece in template.split("{n}")) + "}"
        for template in TEMPLATES
    )
    paths = ", ".join(lua_string(path) for path in PATHS)
    request = f"""
local templates = {{{templates}}}
local paths = {{{paths}}}
local counter = {first}
request = function()
  counter = counter + 1
  local number = string.format("%08d", counter % 100000000)
  local body = table.concat(templates[counter % #templates + 1], number)
  return wrk.format("POST", paths[counter % #paths + 1], nil, body)
end
"""
    first_body = TEMPLATES[0].replace("{n}", "00000000").encode()
    return lua_script("POST", first_body, headers) + request


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak and write the report; 0 on success."""
    options = _parse_args(argv)
    if shutil.which("wrk") is None:
        print("bench: wrk is not installed (Debian/Ubuntu: apt-get install wrk)", file=sys.stderr)
        return 2
    return stopping_cleanly(lambda: _run(options))


def _run(options: SoakOptions) -> int:
    started = datetime.now(UTC)
    machine = describe_machine(REPO)
    with tempfile.TemporaryDirectory(prefix="localgate-soak-") as tmp:
        soak = Soak(Path(tmp), options, machine)
        batches, idle = soak.run()
    samples = [idle, *(batch.sample for batch in batches)]
    try:
        verdict = judge(samples, options.warmup)
    except ValueError as exc:
        raise BenchError(f"cannot judge the run: {exc}") from exc
    report = render_report(
        options=options,
        machine=machine,
        when=started,
        batches=batches,
        idle=idle,
        verdict=verdict,
    )
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(report, encoding="utf-8")
    print(f"bench: wrote {options.out}", file=sys.stderr)
    print(f"bench: {_summary(verdict)}", file=sys.stderr)
    if sum(batch.errors for batch in batches):
        print("bench: some requests failed; see the report", file=sys.stderr)
        return 1
    return 0


class Soak:
    """One soak run in a temporary directory: the two servers, the check, the batches."""

    def __init__(self, tmp: Path, options: SoakOptions, machine: Machine) -> None:
        self.tmp = tmp
        self.options = options
        self.layout = CpuLayout.plan(machine.usable_cpus)
        self._headers: dict[str, str] = {}

    def run(self) -> tuple[list[Batch], MemorySample]:
        """Start both servers, check the answers, send the batches; the batches and the
        sample taken before the first request."""
        with ExitStack() as stack:
            gateway, port = self._start(stack)
            idle = MemorySample(0, 0.0, rss_kib(gateway.pid), _children_kib(gateway.pid))
            self._verify(port)
            batches: list[Batch] = []
            deadline = time.monotonic() + self.options.max_minutes * 60
            begun = time.monotonic()
            sent = 0
            while sent < self.options.requests and time.monotonic() < deadline:
                gateway.check_alive()
                script = self.tmp / "soak.lua"
                script.write_text(soak_script(self._headers, sent))
                result = self._wrk(port, script)
                sent += result.requests
                sample = MemorySample(
                    requests=sent,
                    elapsed_s=time.monotonic() - begun,
                    rss_kib=rss_kib(gateway.pid),
                    children_kib=_children_kib(gateway.pid),
                )
                batches.append(Batch(result, sample))
                _progress(_describe(batches[-1], self.options.requests))
                if batches[-1].errors:
                    raise BenchError(f"{batches[-1].errors} requests failed in the last batch")
            gateway.check_alive()
            return batches, idle

    def _start(self, stack: ExitStack) -> tuple[ServerProcess, int]:
        python = sys.executable
        upstream_port, gateway_port = free_ports(2)
        upstream_url = f"http://127.0.0.1:{upstream_port}"
        base_env = clean_environment()
        gateway_env = {
            "LOCALGATE_UPSTREAM_URL": upstream_url,
            "GEMINI_API_KEY": UPSTREAM_KEY,
            "LOCALGATE_DATA_DIR": str(self.tmp / "data"),
        }
        if self.options.config is not None:
            gateway_env["LOCALGATE_CONFIG"] = str(self.options.config.resolve())
        localgate = str(Path(python).parent / "localgate")
        key = create_tenant_key(localgate, {**base_env, **gateway_env})
        upstream = self._server(
            stack,
            "fake upstream",
            fake_upstream_command(upstream_port, python=python),
            base_env,
            self.layout.load,
        )
        probe = TEMPLATES[0].replace("{n}", "00000000").encode()
        upstream.wait_ready(
            lambda: http_call(upstream_port, "POST", PATHS[0], probe, timeout_s=5)[0] == 200,
            READY_DEADLINE_S,
        )
        gateway = self._server(
            stack,
            "localgate",
            [localgate, "serve", "--port", str(gateway_port)],
            {**base_env, **gateway_env},
            self.layout.proxy,
        )
        gateway.wait_ready(
            lambda: http_call(gateway_port, "GET", "/readyz", timeout_s=5)[0] == 200,
            READY_DEADLINE_S,
        )
        self._headers = {"content-type": "application/json", "x-goog-api-key": key}
        return gateway, gateway_port

    def _server(
        self,
        stack: ExitStack,
        name: str,
        command: list[str],
        env: Mapping[str, str],
        cpus: tuple[int, ...] | None,
    ) -> ServerProcess:
        log = self.tmp / f"{name.replace(' ', '-')}.log"
        server = ServerProcess(name, pinned(command, cpus), env=env, cwd=REPO, log_path=log)
        stack.callback(server.stop)
        server.start()
        return server

    def _verify(self, port: int) -> None:
        """Every request shape is answered, and the mobile number comes back restored."""
        for template in TEMPLATES:
            body = template.replace("{n}", "12345678").encode()
            for path in PATHS:
                status, _, answer = http_call(port, "POST", path, body, self._headers, 30)
                if status != 200:
                    raise BenchError(f"localgate answered {status} to {path}: {answer[:300]!r}")
        body = TEMPLATES[0].replace("{n}", "12345678").encode()
        _, _, answer = http_call(port, "POST", PATHS[0], body, self._headers, 30)
        if "13812345678" not in answer.decode():
            raise BenchError(f"the mobile number was not restored in the answer: {answer!r}")

    def _wrk(self, port: int, script: Path) -> WrkResult:
        command = wrk_command(
            f"http://127.0.0.1:{port}{PATHS[0]}",
            script,
            connections=self.options.connections,
            duration_s=self.options.batch_s,
            cpus=self.layout.load,
        )
        try:
            return run_wrk(command, timeout_s=self.options.batch_s + 60)[0]
        except WrkError as exc:
            raise BenchError(str(exc)) from exc


def _children_kib(pid: int) -> int:
    total = 0
    for child in children(pid):
        try:
            total += rss_kib(child)
        except (OSError, ValueError):
            continue  # ended between listing and reading
    return total


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def _summary(verdict: Verdict) -> str:
    state = "flat" if verdict.flat else "NOT flat"
    return (
        f"resident memory {state} after the warm-up: {_mib(verdict.baseline.total_kib)} MiB "
        f"at {verdict.baseline.requests:,} requests, {_mib(verdict.end.total_kib)} MiB at "
        f"{verdict.end.requests:,} ({verdict.end_growth:+.1%}; peak {verdict.peak_growth:+.1%}; "
        f"trend {verdict.slope_kib_per_100k / 1024:+.2f} MiB per 100,000 requests, "
        f"{verdict.late_slope_kib_per_100k / 1024:+.2f} over the later half)"
    )


def _describe(batch: Batch, target: int) -> str:
    sample = batch.sample
    return (
        f"{sample.requests:>9,} / {target:,} requests  {batch.wrk.rps:7,.0f} req/s  "
        f"RSS {_mib(sample.rss_kib)} MiB"
        + (f" + children {_mib(sample.children_kib)} MiB" if sample.children_kib else "")
        + (f"  ERRORS {batch.errors}" if batch.errors else "")
    )


def _progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def render_report(
    *,
    options: SoakOptions,
    machine: Machine,
    when: datetime,
    batches: Sequence[Batch],
    idle: MemorySample,
    verdict: Verdict,
) -> str:
    """The soak's Markdown report."""
    sent = batches[-1].sample.requests if batches else 0
    minutes = (batches[-1].sample.elapsed_s if batches else 0.0) / 60
    errors = sum(batch.errors for batch in batches)
    config = f"`{options.config}`" if options.config else "its built-in defaults"
    complete = (
        f"It sent {sent:,} requests in {minutes:.1f} min."
        if sent >= options.requests
        else f"It stopped at the time limit ({options.max_minutes:g} min) after {sent:,} of "
        f"the {options.requests:,} requests asked for: the verdict covers only those."
    )
    holds = "yes" if verdict.flat else "**no**"
    shown = thinned(batches, verdict)
    out = [
        "# Soak benchmark: resident memory under sustained load",
        "",
        f"Generated by `make bench` (`{_command(options)}`) on {when:%Y-%m-%d %H:%M} UTC, "
        f"localgate at {machine.commit}, Python {machine.python}, {machine.nproc} CPUs "
        f"({machine.cpu_model}), {machine.wrk}. Every figure below comes from that one run; "
        "re-run to refresh, rather than editing by hand.",
        "",
        f"localgate ran with {config} (redaction and the audit trail on, the cache off "
        f"unless the configuration turns it on) in front of the fake Gemini upstream, on "
        f"loopback. wrk sent the requests in batches of {options.batch_s} s over "
        f"{options.connections} connections; each request has its own running number in a "
        "mobile number, an e-mail address or a question (the redactor replaces them and the "
        "answer path restores them), one in four is streamed and one in four goes to a "
        "second model. After every batch the benchmark read `VmRSS` of the gateway's "
        "process (and of its child processes: the embedded vector store's, when the cache "
        f"runs) from `/proc`. {complete} Failed requests: {errors}.",
        "",
        "## Target",
        "",
        "| target | measured | holds |",
        "| --- | --- | --- |",
        f"| resident memory flat within {FLAT_TOLERANCE:.0%} after a warm-up of "
        f"{options.warmup:,} requests | {_mib(verdict.baseline.total_kib)} MiB at "
        f"{verdict.baseline.requests:,} requests, {_mib(verdict.end.total_kib)} MiB at "
        f"{verdict.end.requests:,} ({verdict.end_growth:+.1%}); highest after the warm-up "
        f"{_mib(verdict.peak.total_kib)} MiB ({verdict.peak_growth:+.1%}) | {holds} |",
        "",
        "## Reading",
        "",
        f"Before the first request the gateway held {_mib(idle.total_kib)} MiB; by the end "
        f"of the warm-up, {_mib(verdict.baseline.total_kib)} MiB (what that is: below). After "
        f"the warm-up, a straight line through the {verdict.samples_after_warmup} samples "
        f"rises by {verdict.slope_kib_per_100k / 1024:+.2f} MiB per 100,000 requests"
        + _extrapolation(verdict)
        + f"; one through their later half by {verdict.late_slope_kib_per_100k / 1024:+.2f} "
        "MiB per 100,000 (a leak climbs as fast late as early; memory that is settling, "
        "less and less).",
        "",
        *_WHAT_GROWS,
        "",
        "## Samples",
        "",
        _table_note(len(batches), shown),
        "",
        "| requests | minutes | batch req/s | gateway RSS MiB | children RSS MiB | "
        "total MiB | vs. warm-up end |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        _sample_row(idle, None, verdict),
    ]
    out += [_sample_row(batch.sample, batch.wrk.rps, verdict) for batch in shown]
    out.append("")
    return "\n".join(out)


def thinned(batches: Sequence[Batch], verdict: Verdict, rows: int = _TABLE_ROWS) -> list[Batch]:
    """About ``rows`` of ``batches`` evenly spread, always with the warm-up's end, the
    highest sample after it and the last."""
    if len(batches) <= rows:
        return list(batches)
    step = -(-len(batches) // rows)  # ceiling division
    keep = set(range(0, len(batches), step)) | {len(batches) - 1}
    keep |= {
        index
        for index, batch in enumerate(batches)
        if batch.sample in (verdict.baseline, verdict.peak)
    }
    return [batches[index] for index in sorted(keep)]


def _table_note(batches: int, shown: Sequence[Batch]) -> str:
    if len(shown) == batches:
        return f"The sample before the first request, then one after each of the {batches} batches."
    return (
        f"The sample before the first request, then {len(shown)} of the {batches} taken after "
        "each batch: evenly spread, with the warm-up's end, the highest and the last."
    )


# Found by the investigation of the "~4.7 MB more per 60,000 requests"; stays true
# while these parts of the gateway work as they did then. Re-check when they change.
_WHAT_GROWS = (
    "## What grows, and what stops growing",
    "",
    "Investigated on 2026-12-01 (localgate's source as at 5c9d67c) with this benchmark's "
    "load against a gateway that, on a signal, recorded Python's object counts by type "
    "(`gc.get_objects()` after `gc.unfreeze()`, since the gateway freezes its start-up "
    "objects), every container of 200 items or more, `sys.getallocatedblocks()`, glibc's "
    "`malloc_stats()` and `/proc/PID/smaps` per mapping, at 10,000, 40,000, 70,000 and "
    "100,000 requests:",
    "",
    "- **jieba's dictionary, once.** The first request with Chinese text imports `rjieba` "
    "and loads its dictionary: +33 MiB on import, +7 MiB on the first segmentation. That "
    "is most of the first batch's jump; a process pays it once.",
    "- **Python's own objects do not grow.** Allocated blocks: 471,521 at 10,000 "
    "requests, 470,476 at 104,000 (468,329 and 472,501 between); objects tracked by the "
    "collector 113,000–116,000. No container held more than 1,500 items at any point; "
    "the only types whose counts changed are those of requests in flight (loop handles, "
    "parser messages, futures).",
    "- **The C heap settles.** What still grows after the first batch (about 7 MiB up to "
    "40,000 requests, then about 2 MiB more up to 100,000) is glibc's heap: its arenas, "
    "one per thread that allocates (the event loop, the audit writer, the default "
    "executor's threads, started as they are first needed), reach what their busiest "
    "moment needed, and glibc keeps freed memory for reuse. Its bytes in use were 71.5 MB "
    "at 10,000 requests and 72.1 MB at 40,000; the growth in `smaps` is in those "
    "arenas' mappings.",
    "- **Bounded by design:** the metrics' model labels (100, then `other`) and label "
    "spellings (10,000), `match_route`'s LRU cache (1,024 paths), the upstream URLs kept, "
    "the key cache (existing keys only: unknown key ids are not remembered), SQLite's "
    "page cache per connection (2 MB by default), the audit trail's Merkle frontier (one "
    "per tenant, a hash per level).",
    "",
    "So most of the growth the issue saw (~4.7 MB per 60,000 requests) is this warm-up. "
    "In the 500,000-request runs of that day the C heap did not stop entirely: it still "
    "grew by about 1 MiB per 100,000 requests (not steadily: it also gave memory back), "
    "within the target, while Python's objects did not grow (counted up to 104,000). "
    "Whether that levels off "
    "further on, or is a small leak below Python's objects (about 10 bytes a request), "
    "is open; a longer soak (`--requests 5000000`) would tell.",
)


def _extrapolation(verdict: Verdict) -> str:
    per_million = verdict.slope_kib_per_100k * 10
    if per_million <= 0:
        return "; it does not climb with the number of requests"
    return (
        f"; kept up, that would be {_mib(per_million)} MiB more per million requests "
        f"({per_million / verdict.baseline.total_kib:.1%} of the warm-up level)"
    )


def _sample_row(sample: MemorySample, rps: float | None, verdict: Verdict) -> str:
    change = (
        f"{sample.total_kib / verdict.baseline.total_kib - 1:+.1%}"
        if sample.requests >= verdict.baseline.requests
        else "(warm-up)"
    )
    return (
        f"| {sample.requests:,} | {sample.elapsed_s / 60:.1f} | "
        f"{'—' if rps is None else f'{rps:,.0f}'} | {_mib(sample.rss_kib)} | "
        f"{_mib(sample.children_kib)} | {_mib(sample.total_kib)} | {change} |"
    )


def _command(options: SoakOptions) -> str:
    """The command line that makes this report (options at their defaults left out)."""
    words = ["python -m bench.soak"]
    if options.config:
        words.append(f"--config {options.config}")
    words.append(f"--requests {options.requests}")
    if options.warmup != options.requests // 5:
        words.append(f"--warmup {options.warmup}")
    if options.batch_s != DEFAULT_BATCH_S:
        words.append(f"--batch {options.batch_s}")
    if options.connections != DEFAULT_CONNECTIONS:
        words.append(f"--connections {options.connections}")
    if options.max_minutes != DEFAULT_MAX_MINUTES:
        words.append(f"--max-minutes {options.max_minutes:g}")
    words.append(f"--out {options.out}")
    return " ".join(words)


def _parse_args(argv: Sequence[str] | None) -> SoakOptions:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description="Send many requests through localgate and watch its resident memory.",
    )
    parser.add_argument("--out", type=Path, required=True, help="Markdown report to write")
    parser.add_argument(
        "--requests", type=int, default=500_000, help="requests to send (default 500,000)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="requests before the memory is expected to be flat (default: a fifth)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH_S,
        help=f"seconds per batch (default {DEFAULT_BATCH_S})",
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=DEFAULT_CONNECTIONS,
        help=f"wrk connections (default {DEFAULT_CONNECTIONS})",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=DEFAULT_MAX_MINUTES,
        help="stop after this long even if fewer requests were sent "
        f"(default {DEFAULT_MAX_MINUTES:g})",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="localgate configuration file (default: built-in defaults)",
    )
    args = parser.parse_args(argv)
    warmup = args.requests // 5 if args.warmup is None else args.warmup
    if args.requests < 1 or not 0 <= warmup < args.requests:
        parser.error("--requests must be >= 1 and --warmup between 0 and --requests")
    if args.batch < 1 or args.connections < 1 or args.max_minutes <= 0:
        parser.error("--batch, --connections and --max-minutes must be positive")
    return SoakOptions(
        out=args.out,
        requests=args.requests,
        warmup=warmup,
        batch_s=args.batch,
        connections=args.connections,
        max_minutes=args.max_minutes,
        config=args.config,
    )


if __name__ == "__main__":
    sys.exit(main())
