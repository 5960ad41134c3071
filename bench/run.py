"""``python -m bench.run --out docs/benchmarks.md``: localgate against the upstream and a floor.

Starts the fake Gemini upstream, the floor proxy (``bench.floor_proxy``) and localgate
on free loopback ports, each in its own process pinned with taskset: the upstream
and wrk share the first CPU, the proxy under test has the second to itself. Checks
that all three give the same answers, warms each up, then measures every scenario
against every target in interleaved rounds (the target order rotates each round, so
drifting background load falls on all of them alike) and writes the report.
Everything it starts, it stops, also when it fails or is interrupted.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.machine import Machine, MachineCpu, describe_machine
from bench.probes import first_event_us, fsync_latency_us
from bench.report import Commands, render_report
from bench.results import (
    CORE_GOALS,
    DEFAULTS_GOALS,
    DIRECT,
    FLOOR,
    LOCALGATE,
    TARGETS,
    Goals,
    Measurement,
    Results,
    Scenario,
)
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
from bench.wrk import (
    REFERENCE_LETTERS,
    WrkError,
    WrkResult,
    lua_script,
    reference,
    run_wrk,
    wrk_command,
)
from localgate.config import load_settings

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
MODEL = "/v1beta/models/gemini-2.5-flash"
BODIES = REPO / "bench" / "bodies"
# The request bodies of ``--body``: a short question; a ~2 KB customer-service ticket
# mixing Chinese and English, dense with personal data (mobile numbers, a resident ID,
# e-mail addresses, names, addresses, a bank card), as such prompts are; and a later turn
# of a chat about that ticket, which sends its history again with every question.
BODY_NAMES = ("small", "pii-dense", "conversation")
_BODY_NOTES = {
    "small": "The request text contains no personal data.",
    "pii-dense": "The request body is `bench/bodies/pii-dense.json` (--body pii-dense): a "
    "~2 KB customer-service ticket mixing Chinese and English, with mobile numbers, a "
    "resident ID, e-mail addresses, names, addresses and a bank card; the fake upstream "
    "echoes the prompt, so with redaction on localgate's answer carries placeholders to "
    "restore.",
    "conversation": "The request body is `bench/bodies/conversation.json` (--body "
    "conversation): the fifth turn of a chat about the PII-dense ticket (~4 KB: the ticket, "
    "two answers restored with the customer's data, a follow-up), whose history every "
    "request repeats and whose last question is new each time, as a chat application sends "
    "it.",
}


# Where a body holds its request's own reference (seven letters, bench.wrk.reference): no
# two requests send the same text, as no two users' prompts are the same. localgate
# remembers the findings of a tenant's recent texts (a conversation's history comes back
# every turn); a benchmark repeating one text would measure that memory, not detection.
BODY_MARKER = b"{ref}"


def body_template(name: str) -> bytes:
    """One of the benchmark's request bodies (``BODY_NAMES``), with its ``BODY_MARKER``."""
    if name not in BODY_NAMES:
        raise ValueError(f"no request body called {name!r}")
    return (BODIES / f"{name}.json").read_bytes().strip()


def request_body(name: str, number: int = 0) -> bytes:
    """The bytes of request ``number`` with body ``name`` (its reference in place)."""
    return body_template(name).replace(BODY_MARKER, reference(number))


def varying_bodies(name: str) -> Callable[[int], bytes]:
    """Request ``i``'s body, counted from a random start (so runs do not repeat texts)."""
    start = random.randrange(26**REFERENCE_LETTERS // 2)
    template = body_template(name)
    return lambda i: template.replace(BODY_MARKER, reference(start + i))


REQUEST_BODY = request_body("small")
UPSTREAM_KEY = "bench-upstream-key"  # the fake upstream accepts any key
READY_DEADLINE_S = 30.0
LATENCY_SCENARIO = "unary-c1"
THROUGHPUT_SCENARIO = "unary-c64"
# Requests timed for the time to first event, per streaming one-connection measurement.
FIRST_EVENT_PROBES = 200


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The command line's knobs."""

    out: Path
    rounds: int
    duration_s: int  # wrk takes whole seconds
    stream_duration_s: int
    warmup_s: int
    config: Path | None = None
    body: str = "small"


@dataclass(frozen=True, slots=True)
class CpuLayout:
    """Where each process runs; None means unpinned."""

    load: tuple[int, ...] | None  # the fake upstream and wrk
    proxy: tuple[int, ...] | None  # the floor proxy and localgate

    @classmethod
    def plan(cls, usable: Sequence[int]) -> CpuLayout:
        """First CPU for the load side, second for the proxies; unpinned without two CPUs."""
        if len(usable) < 2 or shutil.which("taskset") is None:
            return cls(load=None, proxy=None)
        return cls(load=(usable[0],), proxy=(usable[1],))


@dataclass(frozen=True, slots=True)
class Target:
    """Where wrk sends its load, and the proxy process in between (None when direct)."""

    name: str
    port: int
    proxy: ServerProcess | None


def _command(options: RunOptions) -> str:
    """The command line that makes this report."""
    config = f" --config {options.config}" if options.config else ""
    body = f" --body {options.body}" if options.body != "small" else ""
    return f"python -m bench.run{config}{body} --out {options.out}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write the report; 0 on success."""
    options = _parse_args(argv)
    if shutil.which("wrk") is None:
        print("bench: wrk is not installed (Debian/Ubuntu: apt-get install wrk)", file=sys.stderr)
        return 2
    return stopping_cleanly(lambda: _run(options))


def _run(options: RunOptions) -> int:
    with tempfile.TemporaryDirectory(prefix="localgate-bench-") as tmp:
        bench = Bench(Path(tmp), options)
        results = bench.run()
        report = render_report(
            machine=bench.machine,
            when=bench.started,
            results=results,
            commands=bench.commands,
            settings=bench.settings_text(),
            latency_key=LATENCY_SCENARIO,
            throughput_key=THROUGHPUT_SCENARIO,
            command=_command(options),
            config=options.config,
            body=_BODY_NOTES[options.body],
        )
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(report, encoding="utf-8")
    print(f"bench: wrote {options.out}", file=sys.stderr)
    if results.fsync_us is not None:
        print(f"bench: fsync latency of the data directory: {results.fsync_us:.0f} µs")
    for check in results.checks(LATENCY_SCENARIO, THROUGHPUT_SCENARIO):
        verdict = "holds" if check.holds else "MISSED"
        print(f"bench: {check.name}: {check.measured} — target {verdict}", file=sys.stderr)
    if results.errors:
        print(f"bench: {results.errors} requests failed; see the report", file=sys.stderr)
        return 1
    return 0


class Bench:
    """One benchmark run in a temporary directory: servers, checks, warm-up, rounds."""

    def __init__(self, tmp: Path, options: RunOptions) -> None:
        self.tmp = tmp
        self.options = options
        self.started = datetime.now(UTC)
        self.machine: Machine = describe_machine(REPO)
        self.layout = CpuLayout.plan(self.machine.usable_cpus)
        self.scenarios = _scenarios(options.duration_s, options.stream_duration_s)
        self.script = tmp / "gemini-post.lua"
        self.commands = Commands()
        self._servers: list[ServerProcess] = []
        self._headers: dict[str, str] = {}
        self.body = request_body(options.body)
        self.template = body_template(options.body)
        self.goals = goals_for(options.config)
        self._fsync_us: float | None = None
        self._events_per_answer: int | None = None

    def run(self) -> Results:
        """Start everything, measure, stop everything."""
        with ExitStack() as stack:
            upstream, targets = self._start(stack)
            self._verify(targets)
            # The disk the audit trail commits to, before any load.
            self._fsync_us = fsync_latency_us(self.tmp / "data")
            _progress(f"fsync latency of the data directory: {self._fsync_us:.0f} µs")
            total_s = self._estimate_s()
            _progress(f"measuring for about {total_s / 60:.1f} min")
            self._warm_up(targets)
            measurements: list[Measurement] = []
            for round_index in range(self.options.rounds):
                shift = round_index % len(targets)
                order = targets[shift:] + targets[:shift]
                for scenario in self.scenarios:
                    for target in order:
                        measurement = self._measure(round_index + 1, scenario, target, upstream)
                        measurements.append(measurement)
                        _progress(_describe(measurement, len(measurements), self._cells()))
            return Results(
                self.scenarios,
                measurements,
                goals=self.goals,
                fsync_us=self._fsync_us,
                events_per_answer=self._events_per_answer,
            )

    def settings_text(self) -> str:
        """The run's knobs, for the report."""
        return (
            f"{self.options.rounds} rounds; {self.options.duration_s:g} s per unary and "
            f"{self.options.stream_duration_s:g} s per streaming measurement; "
            f"{self.options.warmup_s:g} s warm-up per scenario and target"
        )

    # -- servers ---------------------------------------------------------------

    def _start(self, stack: ExitStack) -> tuple[ServerProcess, list[Target]]:
        python = sys.executable
        upstream_port, floor_port, gateway_port = free_ports(3)
        upstream_url = f"http://127.0.0.1:{upstream_port}"
        data_dir = self.tmp / "data"
        base_env = clean_environment()

        gateway_env = {
            "LOCALGATE_UPSTREAM_URL": upstream_url,
            "GEMINI_API_KEY": UPSTREAM_KEY,
            "LOCALGATE_DATA_DIR": str(data_dir),
        }
        if self.options.config is not None:
            gateway_env["LOCALGATE_CONFIG"] = str(self.options.config.resolve())
        localgate = str(Path(python).parent / "localgate")
        tenant_key = self._create_key(localgate, {**base_env, **gateway_env})

        upstream = self._server(
            stack,
            "fake upstream",
            fake_upstream_command(upstream_port, python=python),
            base_env,
            {},
            self.layout.load,
        )
        upstream.wait_ready(
            lambda: _answers(upstream_port, MODEL + ":generateContent", {}), READY_DEADLINE_S
        )
        floor = self._server(
            stack,
            "floor proxy",
            [
                python,
                "-m",
                "bench.floor_proxy",
                "--port",
                str(floor_port),
                "--upstream",
                upstream_url,
            ],
            base_env,
            {"GEMINI_API_KEY": UPSTREAM_KEY},
            self.layout.proxy,
        )
        gateway = self._server(
            stack,
            "localgate",
            [localgate, "serve", "--port", str(gateway_port)],
            base_env,
            gateway_env,
            self.layout.proxy,
        )
        # Every target gets the very same request bytes; only localgate reads the key.
        headers = {"content-type": "application/json", "x-goog-api-key": tenant_key}
        self._headers = headers
        floor.wait_ready(
            lambda: _answers(floor_port, MODEL + ":generateContent", headers), READY_DEADLINE_S
        )
        gateway.wait_ready(lambda: _answers(gateway_port, "/readyz", None), READY_DEADLINE_S)

        self.script.write_text(lua_script("POST", self.template, headers, marker=BODY_MARKER))
        self.commands.lua = lua_script(
            "POST",
            self.template,
            {**headers, "x-goog-api-key": "<tenant key from keys create>"},
            marker=BODY_MARKER,
        )
        targets = [
            Target(DIRECT, upstream_port, None),
            Target(FLOOR, floor_port, floor),
            Target(LOCALGATE, gateway_port, gateway),
        ]
        for scenario in self.scenarios:
            self.commands.wrk[scenario.key] = [
                self._display({}, self._wrk_command(scenario, target, self.script))
                for target in targets
            ]
        return upstream, targets

    def _create_key(self, localgate: str, env: Mapping[str, str]) -> str:
        command = [localgate, "keys", "create", "--tenant", "bench", "--json"]
        shown = {"LOCALGATE_DATA_DIR": env["LOCALGATE_DATA_DIR"]}
        self.commands.setup.append(self._display(shown, command))
        return create_tenant_key(localgate, env)

    def _server(
        self,
        stack: ExitStack,
        name: str,
        command: list[str],
        base_env: Mapping[str, str],
        env: Mapping[str, str],
        cpus: tuple[int, ...] | None,
    ) -> ServerProcess:
        full = pinned(command, cpus)
        log = self.tmp / f"{name.replace(' ', '-')}.log"
        server = ServerProcess(name, full, env={**base_env, **env}, cwd=REPO, log_path=log)
        stack.callback(server.stop)
        server.start()
        self._servers.append(server)
        self.commands.servers.append(self._display(env, full))
        return server

    def _display(self, env: Mapping[str, str], command: Sequence[str]) -> str:
        words = [f"{k}={v}" for k, v in env.items()] + list(command)
        line = " ".join(_quote(word) for word in words)
        return line.replace(str(self.tmp), "$TMP").replace(f"{REPO}/", "")

    # -- checks and measurement ------------------------------------------------

    def _verify(self, targets: Sequence[Target]) -> None:
        """All three answer 200 with the same content, so they do the same work."""
        calls = {scenario.path: scenario.streaming for scenario in self.scenarios}
        for path, streaming in calls.items():
            answers = {}
            for target in targets:
                status, _, body = http_call(target.port, "POST", path, self.body, self._headers)
                if status != 200:
                    raise BenchError(f"{target.name} answered {status} to {path}: {body[:300]!r}")
                answers[target.name] = _content(body, streaming=streaming)
            if len({json.dumps(a, sort_keys=True) for a in answers.values()}) != 1:
                raise BenchError(f"the targets disagree on {path}: {answers}")
            events = answers[DIRECT]
            if streaming and isinstance(events, list):
                self._events_per_answer = len(events)

    def _warm_up(self, targets: Sequence[Target]) -> None:
        if self.options.warmup_s <= 0:
            return
        for scenario in self.scenarios:
            for target in targets:
                command = self._wrk_command(scenario, target, self.script, self.options.warmup_s)
                result = self._wrk(command, self.options.warmup_s)
                if result.socket_errors or result.non_2xx:
                    raise BenchError(
                        f"warm-up of {target.name} ({scenario.key}) had "
                        f"{result.non_2xx} non-2xx answers and {result.socket_errors} "
                        "socket errors"
                    )

    def _measure(
        self, round_number: int, scenario: Scenario, target: Target, upstream: ServerProcess
    ) -> Measurement:
        for server in self._servers:
            server.check_alive()
        command = self._wrk_command(scenario, target, self.script)
        cpu_before = {server.name: server.cpu_seconds() for server in self._servers}
        machine_before = MachineCpu.now()
        self_before = _own_cpu_s()
        started = time.monotonic()
        result = self._wrk(command, scenario.duration_s)
        wall_s = time.monotonic() - started
        own_s = _own_cpu_s() - self_before
        machine = MachineCpu.now() - machine_before
        used = {s.name: s.cpu_seconds() - cpu_before[s.name] for s in self._servers}
        for server in self._servers:
            server.check_alive()
        ours = sum(used.values()) + result.cpu_s + own_s
        first_event = None
        if scenario.streaming and scenario.connections == 1:
            try:
                first_event = first_event_us(
                    target.port,
                    scenario.path,
                    varying_bodies(self.options.body),
                    self._headers,
                    FIRST_EVENT_PROBES,
                )
            except (OSError, RuntimeError) as exc:
                raise BenchError(f"timing {target.name}'s first stream event: {exc}") from exc
        return Measurement(
            round=round_number,
            scenario=scenario,
            target=target.name,
            wrk=result,
            proxy_cpu_s=used[target.proxy.name] if target.proxy else None,
            upstream_cpu_s=used[upstream.name],
            other_cpu_s=machine.busy_s - ours,
            wall_s=wall_s,
            first_event_us=first_event,
        )

    def _wrk_command(
        self, scenario: Scenario, target: Target, script: Path, duration_s: int | None = None
    ) -> list[str]:
        return wrk_command(
            f"http://127.0.0.1:{target.port}{scenario.path}",
            script,
            connections=scenario.connections,
            duration_s=scenario.duration_s if duration_s is None else duration_s,
            cpus=self.layout.load,
        )

    def _wrk(self, command: Sequence[str], duration_s: float) -> WrkResult:
        try:
            return run_wrk(command, timeout_s=duration_s + 60)[0]
        except WrkError as exc:
            raise BenchError(str(exc)) from exc

    def _cells(self) -> int:
        return self.options.rounds * len(self.scenarios) * len(TARGETS)

    def _estimate_s(self) -> float:
        per_round = sum(s.duration_s for s in self.scenarios) * len(TARGETS)
        warm = self.options.warmup_s * len(self.scenarios) * len(TARGETS)
        return per_round * self.options.rounds + warm


def _scenarios(unary_s: int, stream_s: int) -> list[Scenario]:
    unary = MODEL + ":generateContent"
    stream = MODEL + ":streamGenerateContent?alt=sse"
    return [
        Scenario("unary-c1", "generateContent, 1 connection", unary, 1, unary_s, False),
        Scenario("unary-c64", "generateContent, 64 connections", unary, 64, unary_s, False),
        Scenario(
            "stream-c1", "streamGenerateContent (SSE), 1 connection", stream, 1, stream_s, True
        ),
        Scenario(
            "stream-c64", "streamGenerateContent (SSE), 64 connections", stream, 64, stream_s, True
        ),
    ]


def goals_for(config: Path | None) -> Goals:
    """Issue 18's targets for what localgate runs with: the defaults' (redaction or the
    audit trail on) or the core's (both off, as in bench/configs/core.yaml)."""
    settings = load_settings(config, {})[0]
    proxy = settings.proxy
    return DEFAULTS_GOALS if proxy.enable_audit or proxy.redaction.enabled else CORE_GOALS


def _answers(port: int, path: str, headers: Mapping[str, str] | None) -> bool:
    if headers is None:
        status, _, _ = http_call(port, "GET", path, timeout_s=2)
    else:
        status, _, _ = http_call(port, "POST", path, REQUEST_BODY, headers, timeout_s=2)
    return status == 200


def _content(body: bytes, *, streaming: bool) -> object:
    """The JSON of an answer, or of each event of a stream."""
    try:
        if not streaming:
            return json.loads(body)
        return [
            json.loads(line[len(b"data: ") :])
            for line in body.splitlines()
            if line.startswith(b"data: ")
        ]
    except ValueError as exc:
        raise BenchError(f"an answer is not JSON: {body[:300]!r}") from exc


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _describe(m: Measurement, done: int, total: int) -> str:
    cpu = m.proxy_cpu_us_per_request
    proxy = f", proxy CPU {cpu:.0f} µs/req" if cpu is not None else ""
    return (
        f"[{done:2d}/{total}] round {m.round} {m.scenario.key:10s} {m.target:9s} "
        f"{m.wrk.rps:8,.0f} req/s  p50 {m.wrk.latency_us[50] / 1000:6.3f} ms  "
        f"p99 {m.wrk.latency_us[99] / 1000:6.3f} ms{proxy}"
        + (f"  ERRORS {m.errors}" if m.errors else "")
    )


def _progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def _quote(word: str) -> str:
    safe = all(c.isalnum() or c in "-_./:=,$+" for c in word)
    return word if safe else "'" + word.replace("'", "'\\''") + "'"


def _parse_args(argv: Sequence[str] | None) -> RunOptions:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Benchmark localgate against the fake upstream and a floor proxy.",
    )
    parser.add_argument("--out", type=Path, required=True, help="Markdown report to write")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument(
        "--duration", type=int, default=8, help="seconds per unary measurement (default 8)"
    )
    parser.add_argument(
        "--stream-duration",
        type=int,
        default=5,
        help="seconds per streaming measurement (default 5)",
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="warm-up seconds per cell (default 2)"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="localgate configuration file (default: built-in defaults)",
    )
    parser.add_argument(
        "--body",
        choices=BODY_NAMES,
        default="small",
        help="request body: small (a short question, no personal data; the default), "
        "pii-dense (a ~2 KB Chinese/English customer-service ticket full of personal data) or "
        "conversation (a later turn of a chat about that ticket, its history sent again)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.duration <= 0 or args.stream_duration <= 0 or args.warmup < 0:
        parser.error("--rounds must be >= 1, durations > 0 and --warmup >= 0")
    return RunOptions(
        out=args.out,
        rounds=args.rounds,
        duration_s=args.duration,
        stream_duration_s=args.stream_duration,
        warmup_s=args.warmup,
        config=args.config,
        body=args.body,
    )


if __name__ == "__main__":
    sys.exit(main())
