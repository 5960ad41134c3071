"""``python -m bench.openai_door``: what the OpenAI door costs over the native one.

One gateway, the fake upstream, wrk: the same question asked through the native route
(``generateContent``) and through the OpenAI-compatible one (``chat/completions``), at
c=64, in alternating rounds. The upstream and wrk share the first CPU, the gateway has the
second. The figure of merit is the gateway's CPU time per request (far less sensitive to
what else the machine does than req/s); the goal is at most 15% more through the OpenAI
door. Everything it starts, it stops.
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

import orjson

from bench.run import MODEL, READY_DEADLINE_S, REPO, REQUEST_BODY, UPSTREAM_KEY, CpuLayout
from bench.servers import ServerProcess, clean_environment, create_tenant_key, free_ports, pinned
from bench.tracing import _get, _wait_gateway
from bench.wrk import lua_script, run_wrk, wrk_command

__all__ = ["main"]

CONNECTIONS = 64
# The native request's question, as an OpenAI client asks it.
OPENAI_BODY = orjson.dumps(
    {
        "model": "gemini-2.5-flash",
        "messages": [{"role": "user", "content": "Explain how AI works in a few words"}],
    }
)
DOORS = {
    "native": (f"{MODEL}:generateContent", REQUEST_BODY),
    "openai": ("/v1beta/openai/chat/completions", OPENAI_BODY),
}


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
        tempfile.TemporaryDirectory(prefix="localgate-bench-openai-") as raw,
        ExitStack() as stack,
    ):
        tmp = Path(raw)
        upstream_port, gateway_port = free_ports(2)
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
        env = {
            "LOCALGATE_UPSTREAM_URL": f"http://127.0.0.1:{upstream_port}",
            "GEMINI_API_KEY": UPSTREAM_KEY,
            "LOCALGATE_DATA_DIR": str(tmp / "data"),
        }
        key = create_tenant_key(localgate, {**base, **env})
        gateway = server(
            "localgate", [localgate, "serve", "--port", str(gateway_port)], env, layout.proxy
        )
        upstream.wait_ready(
            lambda: _get(f"http://127.0.0.1:{upstream_port}/v1beta/models"), READY_DEADLINE_S
        )
        _wait_gateway(gateway_port)
        headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
        scripts = {}
        for name, (_path, body) in DOORS.items():
            script = tmp / f"{name}.lua"
            script.write_text(lua_script("POST", body, headers))
            scripts[name] = script

        def measure(name: str, duration: int) -> tuple[float, float]:
            """req/s, and the gateway's CPU time per request (µs)."""
            url = f"http://127.0.0.1:{gateway_port}{DOORS[name][0]}"
            command = wrk_command(
                url, scripts[name], connections=CONNECTIONS, duration_s=duration, cpus=layout.load
            )
            before = gateway.cpu_seconds()
            result, _ = run_wrk(command, duration + 30)
            cpu_s = gateway.cpu_seconds() - before
            if result.socket_errors or result.non_2xx:
                raise SystemExit(f"{name}: {result.socket_errors + result.non_2xx} errors")
            return result.rps, cpu_s / max(result.requests, 1) * 1e6

        for name in DOORS:
            measure(name, args.warmup)
        rates: dict[str, list[float]] = {name: [] for name in DOORS}
        cpu: dict[str, list[float]] = {name: [] for name in DOORS}
        for round_ in range(args.rounds):
            order = ("native", "openai") if round_ % 2 == 0 else ("openai", "native")
            for name in order:
                rps, cpu_us = measure(name, args.duration)
                rates[name].append(rps)
                cpu[name].append(cpu_us)
            print(
                f"round {round_ + 1}: native {rates['native'][-1]:.0f} req/s "
                f"({cpu['native'][-1]:.0f} µs CPU/request), openai {rates['openai'][-1]:.0f} "
                f"req/s ({cpu['openai'][-1]:.0f} µs CPU/request)",
                flush=True,
            )
        native, openai = statistics.median(cpu["native"]), statistics.median(cpu["openai"])
        print(
            f"median gateway CPU per request at c={CONNECTIONS}: native {native:.0f} µs, "
            f"openai {openai:.0f} µs (+{100 * (openai / native - 1):.1f}%; goal ≤ +15%); "
            f"req/s native {statistics.median(rates['native']):.0f}, "
            f"openai {statistics.median(rates['openai']):.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
