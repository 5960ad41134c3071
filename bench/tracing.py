"""``python -m bench.tracing``: what tracing costs, as req/s at c=64 with it on and off.

Starts the fake upstream, an OTLP/HTTP receiver that discards spans (``bench.otlp_sink``)
and two gateways: one untraced, one tracing every request (sampler ``always_on``,
exporting to the receiver in batches). The upstream, the receiver and wrk share the first
CPU, the gateways the second (each measured alone: the other is idle). Rounds alternate
which gateway goes first, so drifting background load falls on both alike; the report is
the median req/s of each and their ratio. Everything it starts, it stops.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from bench.run import MODEL, READY_DEADLINE_S, REPO, REQUEST_BODY, UPSTREAM_KEY, CpuLayout
from bench.servers import (
    ServerProcess,
    clean_environment,
    create_tenant_key,
    free_ports,
    pinned,
)
from bench.wrk import lua_script, run_wrk, wrk_command

__all__ = ["main"]

CONNECTIONS = 64


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print one line per round and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    layout = CpuLayout.plan(sorted(os.sched_getaffinity(0)))
    python = sys.executable
    localgate = str(Path(python).parent / "localgate")
    with (
        tempfile.TemporaryDirectory(prefix="localgate-bench-tracing-") as raw,
        ExitStack() as stack,
    ):
        tmp = Path(raw)
        upstream_port, sink_port, off_port, on_port = free_ports(4)
        base = clean_environment()

        def server(
            name: str, command: list[str], env: dict[str, str], cpus: Sequence[int] | None
        ) -> ServerProcess:
            process = ServerProcess(
                name,
                pinned(command, cpus),
                env={**base, **env},
                cwd=REPO,
                log_path=tmp / f"{name}.log",
            )
            stack.callback(process.stop)
            process.start()
            return process

        upstream = server(
            "upstream",
            [python, "-m", "localgate.testing.fake_gemini", "--port", str(upstream_port)],
            {},
            layout.load,
        )
        sink = server(
            "otlp-sink",
            [python, "-m", "bench.otlp_sink", "--port", str(sink_port)],
            {},
            layout.load,
        )
        gateways: dict[str, tuple[int, str]] = {}
        processes: dict[str, ServerProcess] = {}
        for name, port, extra in (
            ("off", off_port, {}),
            (
                "on",
                on_port,
                {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
                    "OTEL_TRACES_SAMPLER": "always_on",
                },
            ),
        ):
            env = {
                "LOCALGATE_UPSTREAM_URL": f"http://127.0.0.1:{upstream_port}",
                "GEMINI_API_KEY": UPSTREAM_KEY,
                "LOCALGATE_DATA_DIR": str(tmp / f"data-{name}"),
                **extra,
            }
            key = create_tenant_key(localgate, {**base, **env})
            processes[name] = server(
                f"localgate-{name}", [localgate, "serve", "--port", str(port)], env, layout.proxy
            )
            gateways[name] = (port, key)
        upstream.wait_ready(
            lambda: _get(f"http://127.0.0.1:{upstream_port}/v1beta/models"), READY_DEADLINE_S
        )
        sink.wait_ready(lambda: _get(f"http://127.0.0.1:{sink_port}/"), READY_DEADLINE_S)
        for port, _key in gateways.values():
            _wait_gateway(port)

        scripts = {}
        for name, (_port, key) in gateways.items():
            script = tmp / f"{name}.lua"
            headers = {"content-type": "application/json", "x-goog-api-key": key}
            script.write_text(lua_script("POST", REQUEST_BODY, headers))
            scripts[name] = script

        def measure(name: str, duration: int) -> tuple[float, float]:
            """req/s, and the gateway's CPU time per request (µs): the latter is far less
            sensitive to what else the machine is doing."""
            port = gateways[name][0]
            url = f"http://127.0.0.1:{port}{MODEL}:generateContent"
            command = wrk_command(
                url, scripts[name], connections=CONNECTIONS, duration_s=duration, cpus=layout.load
            )
            before = processes[name].cpu_seconds()
            result, _ = run_wrk(command, duration + 30)
            cpu_s = processes[name].cpu_seconds() - before
            if result.socket_errors or result.non_2xx:
                raise SystemExit(f"{name}: {result.socket_errors + result.non_2xx} errors")
            return result.rps, cpu_s / max(result.requests, 1) * 1e6

        for name in gateways:
            measure(name, args.warmup)
        rates: dict[str, list[float]] = {"off": [], "on": []}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        for round_ in range(args.rounds):
            order = ("off", "on") if round_ % 2 == 0 else ("on", "off")
            for name in order:
                rps, cpu_us = measure(name, args.duration)
                rates[name].append(rps)
                cpu[name].append(cpu_us)
            print(
                f"round {round_ + 1}: off {rates['off'][-1]:.0f} req/s "
                f"({cpu['off'][-1]:.0f} µs CPU/request), on {rates['on'][-1]:.0f} req/s "
                f"({cpu['on'][-1]:.0f} µs CPU/request)",
                flush=True,
            )
        off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
        cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
        print(
            f"median gateway CPU per request: off {cpu_off:.0f} µs, on {cpu_on:.0f} µs "
            f"(+{100 * (cpu_on / cpu_off - 1):.1f}%)"
        )
        received = _get_text(f"http://127.0.0.1:{sink_port}/")
        print(
            f"median at c={CONNECTIONS}: tracing off {off:.0f} req/s, on {on:.0f} req/s; "
            f"on/off = {on / off:.3f} (cost {100 * (1 - on / off):.1f}%); "
            f"the receiver got {received}"
        )
    return 0


def _get(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback, fixed
        return bool(response.status == 200)


def _get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback, fixed
        return str(response.read().decode())


def _wait_gateway(port: int) -> None:
    deadline = time.monotonic() + READY_DEADLINE_S
    while True:
        try:
            if _get(f"http://127.0.0.1:{port}/readyz"):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the gateway on port {port} did not get ready")
        time.sleep(0.05)


if __name__ == "__main__":
    raise SystemExit(main())
