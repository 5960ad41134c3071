"""``python -m bench.compare --baseline DIR``: this tree's gateway against another tree's.

Starts the fake upstream and two gateways with the same configuration (``--config``, e.g.
bench/configs/core.yaml): one running the source of another checkout (``--baseline``, e.g.
the main branch's worktree), one running this tree's. Like ``bench.tracing``: wrk and the
upstream share the first CPU, the gateways the second (each measured alone while the other
is idle); rounds alternate which goes first, so drifting background load falls on both
alike; the report is the median req/s at c=64 and the median gateway CPU time per request,
which is far less sensitive than req/s to whatever else the machine runs. Everything it
starts, it stops.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from bench.run import MODEL, READY_DEADLINE_S, REPO, REQUEST_BODY, UPSTREAM_KEY, CpuLayout
from bench.servers import ServerProcess, clean_environment, create_tenant_key, free_ports, pinned
from bench.tracing import _get, _wait_gateway
from bench.wrk import lua_script, run_wrk, wrk_command

__all__ = ["main"]

CONNECTIONS = 64


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print one line per round and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--baseline", type=Path, required=True, help="another checkout (its src/ is run)"
    )
    parser.add_argument("--config", type=Path, help="the configuration both gateways run")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="both gateways trace every request, exporting to a discarding OTLP receiver",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    baseline_src = (args.baseline / "src").resolve()
    if not (baseline_src / "localgate").is_dir():
        raise SystemExit(f"{args.baseline} has no src/localgate")
    layout = CpuLayout.plan(sorted(os.sched_getaffinity(0)))
    python = sys.executable
    localgate = str(Path(python).parent / "localgate")
    trees = {"baseline": baseline_src, "this": (REPO / "src").resolve()}
    with (
        tempfile.TemporaryDirectory(prefix="localgate-bench-compare-") as raw,
        ExitStack() as stack,
    ):
        tmp = Path(raw)
        upstream_port, sink_port, *ports = free_ports(2 + len(trees))
        base = clean_environment()

        def server(
            name: str, command: list[str], env: dict[str, str], cpus: Sequence[int] | None
        ) -> ServerProcess:
            process = ServerProcess(
                name, pinned(command, cpus), env={**base, **env}, cwd=REPO, log_path=tmp / name
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
        tracing: dict[str, str] = {}
        if args.trace:
            sink = server(
                "otlp-sink",
                [python, "-m", "bench.otlp_sink", "--port", str(sink_port)],
                {},
                layout.load,
            )
            sink.wait_ready(lambda: _get(f"http://127.0.0.1:{sink_port}/"), READY_DEADLINE_S)
            tracing = {
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
                "OTEL_TRACES_SAMPLER": "always_on",
            }
        gateways: dict[str, tuple[int, str]] = {}
        processes: dict[str, ServerProcess] = {}
        for (name, src), port in zip(trees.items(), ports, strict=True):
            env = {
                "PYTHONPATH": str(src),
                "LOCALGATE_UPSTREAM_URL": f"http://127.0.0.1:{upstream_port}",
                "GEMINI_API_KEY": UPSTREAM_KEY,
                "LOCALGATE_DATA_DIR": str(tmp / f"data-{name}"),
                **tracing,
            }
            if args.config is not None:
                env["LOCALGATE_CONFIG"] = str(args.config.resolve())
            # The console script, which honours PYTHONPATH: ``src`` comes before the
            # editable install's path.
            key = create_tenant_key(localgate, {**base, **env})
            processes[name] = server(
                f"localgate-{name}", [localgate, "serve", "--port", str(port)], env, layout.proxy
            )
            gateways[name] = (port, key)
        upstream.wait_ready(
            lambda: _get(f"http://127.0.0.1:{upstream_port}/v1beta/models"), READY_DEADLINE_S
        )
        for port, _key in gateways.values():
            _wait_gateway(port)
        scripts = {}
        for name, (_port, key) in gateways.items():
            script = tmp / f"{name}.lua"
            headers = {"content-type": "application/json", "x-goog-api-key": key}
            script.write_text(lua_script("POST", REQUEST_BODY, headers))
            scripts[name] = script

        def measure(name: str, duration: int) -> tuple[float, float]:
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
        rates: dict[str, list[float]] = {name: [] for name in gateways}
        cpu: dict[str, list[float]] = {name: [] for name in gateways}
        names = list(gateways)
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else reversed(names):
                rps, cpu_us = measure(name, args.duration)
                rates[name].append(rps)
                cpu[name].append(cpu_us)
            print(
                f"round {round_ + 1}: "
                + ", ".join(
                    f"{n} {rates[n][-1]:.0f} req/s ({cpu[n][-1]:.0f} µs CPU/request)" for n in names
                ),
                flush=True,
            )
        rps_base, rps_this = (statistics.median(rates[n]) for n in names)
        cpu_base, cpu_this = (statistics.median(cpu[n]) for n in names)
        print(
            f"median at c={CONNECTIONS}: baseline {rps_base:.0f} req/s, this {rps_this:.0f} req/s "
            f"(this/baseline {rps_this / rps_base:.3f}); gateway CPU per request: baseline "
            f"{cpu_base:.0f} µs, this {cpu_this:.0f} µs ({100 * (cpu_this / cpu_base - 1):+.1f}%)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
