"""Gateways that differ in one setting, measured side by side in one run.

Starts the fake upstream and one gateway per variant (each with its own data directory,
configuration and environment), pinned as ``bench.run`` pins them: the upstream and wrk on
the first CPU, the gateways on the second, each measured while the others idle. Every
round measures every variant; the order rotates each round, so drifting background load
falls on all of them alike. What a variant costs is read as ratios to the first variant
of the same run (the machine is shared and noisy; absolute figures from different runs do
not compare). Everything it starts, it stops.
"""

from __future__ import annotations

import os
import statistics
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from bench.run import (
    BODY_MARKER,
    MODEL,
    READY_DEADLINE_S,
    REPO,
    UPSTREAM_KEY,
    CpuLayout,
    body_template,
)
from bench.servers import (
    ServerProcess,
    clean_environment,
    create_tenant_key,
    fake_upstream_command,
    free_ports,
    pinned,
)
from bench.wrk import lua_script, run_wrk, wrk_command

__all__ = ["Load", "Summary", "Variant", "compare"]


@dataclass(frozen=True, slots=True)
class Variant:
    """One gateway: a name, its YAML configuration and extra environment, and the request
    wrk sends it (by default the benchmark's generateContent question, key in
    ``x-goog-api-key``; ``bearer`` sends it as ``Authorization: Bearer``)."""

    name: str
    config: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    path: str = f"{MODEL}:generateContent"
    body: bytes = body_template("small")
    bearer: bool = False


@dataclass(frozen=True, slots=True)
class Load:
    """One wrk load: how many connections, for how long."""

    name: str
    connections: int
    duration_s: int


@dataclass(frozen=True, slots=True)
class Summary:
    """Medians over the rounds of one variant under one load."""

    rps: float
    cpu_us: float  # the gateway's CPU time per request
    p50_ms: float
    p99_ms: float
    # What ``compare``'s ``counters`` counted meanwhile, per request (by counter name).
    per_request: Mapping[str, float] = field(default_factory=dict)


def compare(
    variants: Sequence[Variant],
    loads: Sequence[Load],
    *,
    rounds: int,
    warmup_s: int,
    workdir: Path,
    progress: Callable[[str], None] = print,
    counters: Callable[[], Mapping[str, float]] | None = None,
) -> dict[tuple[str, str], Summary]:
    """Each (variant, load)'s medians over ``rounds`` interleaved rounds; with
    ``counters`` (cumulative counts of something outside the gateways, e.g. a server's
    commands), also how much each counter grew per request."""
    layout = CpuLayout.plan(sorted(os.sched_getaffinity(0)))
    python = sys.executable
    localgate = str(Path(python).parent / "localgate")
    base = clean_environment()
    with ExitStack() as stack:
        ports = free_ports(len(variants) + 1)
        upstream_port = ports[0]

        def server(name: str, command: list[str], env: Mapping[str, str]) -> ServerProcess:
            cpus = layout.load if name == "upstream" else layout.proxy
            process = ServerProcess(
                name,
                pinned(command, cpus),
                env={**base, **env},
                cwd=REPO,
                log_path=workdir / f"{name}.log",
            )
            stack.callback(process.stop)
            process.start()
            return process

        upstream = server(
            "upstream",
            fake_upstream_command(upstream_port, python=python),
            {},
        )
        upstream.wait_ready(
            lambda: _ok(f"http://127.0.0.1:{upstream_port}/v1beta/models"), READY_DEADLINE_S
        )
        gateways: dict[str, tuple[str, Path, ServerProcess]] = {}
        for variant, port in zip(variants, ports[1:], strict=True):
            config = workdir / f"{variant.name}.yaml"
            config.write_text(variant.config or "{}\n", encoding="utf-8")
            env = {
                "LOCALGATE_UPSTREAM_URL": f"http://127.0.0.1:{upstream_port}",
                "GEMINI_API_KEY": UPSTREAM_KEY,
                "LOCALGATE_DATA_DIR": str(workdir / f"data-{variant.name}"),
                "LOCALGATE_CONFIG": str(config),
                **variant.env,
            }
            key = create_tenant_key(localgate, {**base, **env})
            script = workdir / f"{variant.name}.lua"
            auth = {"authorization": f"Bearer {key}"} if variant.bearer else {"x-goog-api-key": key}
            headers = {"content-type": "application/json", **auth}
            # Each request its own text, where the body has a place for it (bench.run).
            script.write_text(
                lua_script("POST", variant.body, headers, marker=BODY_MARKER), encoding="utf-8"
            )
            process = server(
                f"localgate-{variant.name}", [localgate, "serve", "--port", str(port)], env
            )
            gateways[variant.name] = (f"http://127.0.0.1:{port}", script, process)
        for name, (base_url, _script, process) in gateways.items():
            process.wait_ready(partial(_ok, f"{base_url}/readyz"), 60.0)
            progress(f"{name}: ready at {base_url}")

        extra: dict[tuple[str, str], list[dict[str, float]]] = {}

        def measure(name: str, load: Load, duration_s: int) -> tuple[float, float, float, float]:
            base_url, script, process = gateways[name]
            url = base_url + paths[name]
            command = wrk_command(
                url, script, connections=load.connections, duration_s=duration_s, cpus=layout.load
            )
            counted = counters() if counters is not None else {}
            before = process.cpu_seconds()
            result, _ = run_wrk(command, duration_s + 60)
            cpu_s = process.cpu_seconds() - before
            if counters is not None:
                after = counters()
                extra.setdefault((name, load.name), []).append(
                    {
                        key: (after[key] - counted.get(key, 0.0)) / max(result.requests, 1)
                        for key in after
                    }
                )
            if result.socket_errors or result.non_2xx:
                raise SystemExit(
                    f"{name}: {result.socket_errors} socket errors, {result.non_2xx} non-2xx "
                    f"answers (see {workdir})"
                )
            return (
                result.rps,
                cpu_s / max(result.requests, 1) * 1e6,
                result.latency_us[50] / 1000,
                result.latency_us[99] / 1000,
            )

        paths = {variant.name: variant.path for variant in variants}
        for name in gateways:
            for load in loads:
                measure(name, load, warmup_s)
        extra.clear()  # the warm-up's
        samples: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {
            (v.name, load.name): [] for v in variants for load in loads
        }
        names = [v.name for v in variants]
        for round_ in range(rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for load in loads:
                for name in order:
                    samples[name, load.name].append(measure(name, load, load.duration_s))
                progress(
                    f"round {round_ + 1} {load.name}: "
                    + ", ".join(
                        f"{name} {samples[name, load.name][-1][0]:.0f} req/s "
                        f"({samples[name, load.name][-1][1]:.0f} µs CPU)"
                        for name in names
                    )
                )
        return {
            key: Summary(
                rps=statistics.median(s[0] for s in found),
                cpu_us=statistics.median(s[1] for s in found),
                p50_ms=statistics.median(s[2] for s in found),
                p99_ms=statistics.median(s[3] for s in found),
                per_request={
                    counter: statistics.median(sample.get(counter, 0.0) for sample in extra[key])
                    for counter in extra[key][0]
                }
                if extra.get(key)
                else {},
            )
            for key, found in samples.items()
        }


def _ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
        return bool(response.status == 200)
