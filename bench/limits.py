"""What the limits cost: the stage alone in process, and whole gateways side by side.

``python -m bench.limits [--redis redis://127.0.0.1:6379/13] [--requests 20000]`` prints the
CPU time per request of the pass-through stage (no limits), of the memory backend with
every limit set, and, with ``--redis``, the Redis backend's admission and settlement
latency (p50, p99) one request at a time (c=1). In process, so the HTTP server's cost is
not in it.

With ``--out docs/benchmarks-limits.md`` (``make bench``) it also runs three gateways side by
side in one run (``bench.variants``): the core configuration without limits, with every
limit set on the memory backend, and on the Redis backend; wrk at c=1 and c=64; and
writes the report with the issue's targets next to the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.variants import Load, Summary, Variant, compare
from localgate.config import Settings
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.permit import Settlement
from localgate.exchange.principal import Principal
from localgate.exchange.stages import LimitsStage
from localgate.gemini.routes import match_route
from localgate.limits import MemoryBackend, TenantLimiter
from localgate.observability import GatewayMetrics
from localgate.pipeline.stages import NoLimits
from localgate.policy.snapshot import TenantPolicy

_LIMITS = {
    "requests_per_minute": 10**9,
    "tokens_per_minute": 10**12,
    "tokens_per_day": 10**13,
    "concurrent_requests": 10**6,
}
_BODY = {"contents": [{"parts": [{"text": "Summarise the attached meeting notes. " * 10}]}]}
_DONE = Settlement(Outcome.FORWARDED, forwarded=True, tokens=300)


def _request(policy: TenantPolicy) -> RequestContext:
    ctx = RequestContext(
        request_id=uuid.uuid4().hex,
        route=match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent"),
    )
    ctx.principal = Principal("acme", "k1")
    ctx.policy = policy
    ctx.body = _BODY
    return ctx


async def _cpu_per_request(stage: LimitsStage, policy: TenantPolicy, count: int) -> float:
    for _ in range(1000):  # warm-up
        (await stage.admit(_request(policy))).release(_DONE)
    contexts = [_request(policy) for _ in range(count)]
    started = time.process_time()
    for ctx in contexts:
        (await stage.admit(ctx)).release(_DONE)
    return (time.process_time() - started) / count


async def _redis_latency(
    url: str, policy: TenantPolicy, count: int
) -> tuple[list[float], list[float]]:
    """Admission latency (what a request waits before it leaves) and settlement latency
    (after its answer, off the request's path), one request at a time."""
    from localgate.limits.redis_backend import RedisBackend

    backend = RedisBackend(url, prefix=f"bench:{uuid.uuid4().hex}:")
    limiter = TenantLimiter(backend, GatewayMetrics())
    admissions, settlements = [], []
    try:
        for _ in range(count):
            ctx = _request(policy)
            started = time.perf_counter()
            permit = await limiter.admit(ctx)
            admitted = time.perf_counter()
            permit.release(_DONE)
            await limiter.close_settlements()
            admissions.append(admitted - started)
            settlements.append(time.perf_counter() - admitted)
    finally:
        await limiter.close()
    return admissions, settlements


_CORE = """proxy:
  enable_audit: false
  redaction:
    enabled: false
"""
_BENCH_LIMITS = "tenants:\n  bench:\n    limits:\n" + "".join(
    f"      {name}: {value}\n" for name, value in _LIMITS.items()
)
_TARGETS = {
    "memory_us": 30.0,  # CPU per request the memory backend may add
    "redis_p50_ms": 0.3,  # the Redis backend's admission latency at p50, c=1
    "redis_rps_ratio": 0.85,  # req/s kept at c=64 with the Redis backend
}


# Redis's own commands of the measurement, not the gateways'.
_NOT_COUNTED = frozenset({"cmdstat_info", "cmdstat_hello", "cmdstat_select", "cmdstat_ping"})
_SCRIPT_CALLS = ("cmdstat_evalsha", "cmdstat_eval")


def _redis_counters(url: str) -> Callable[[], dict[str, float]]:
    """Redis server counters, cumulative: its script calls (one per round trip of the
    limits backend), every command (those run by scripts included) and its CPU time (µs).
    Server-wide: the variants without the Redis backend show what else reached it."""
    import redis

    client = redis.Redis.from_url(url)

    def sample() -> dict[str, float]:
        stats = client.info("commandstats")
        cpu = client.info("cpu")
        scripts = sum(int(stats[name]["calls"]) for name in _SCRIPT_CALLS if name in stats)
        commands = sum(
            int(value["calls"]) for name, value in stats.items() if name not in _NOT_COUNTED
        )
        return {
            "script_calls": float(scripts),
            "commands": float(commands - scripts),
            "redis_cpu_us": (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6,
        }

    return sample


def _end_to_end(redis: str, rounds: int, duration_s: int) -> dict[tuple[str, str], Summary]:
    variants = [
        Variant("none", _CORE),
        Variant("memory", _CORE + _BENCH_LIMITS),
        Variant(
            "redis",
            _CORE + _BENCH_LIMITS + f"limits:\n  backend: redis\n  redis_url: '{redis}'\n",
        ),
    ]
    loads = [Load("c1", 1, duration_s), Load("c64", 64, duration_s)]
    with tempfile.TemporaryDirectory(prefix="localgate-bench-limits-") as raw:
        return compare(
            variants,
            loads,
            rounds=rounds,
            warmup_s=2,
            workdir=Path(raw),
            counters=_redis_counters(redis),
        )


def _load_reading(load: tuple[float, float]) -> str:
    """What the load average says about this run's req/s ratios."""
    if max(load) > (os.cpu_count() or 1):
        return (
            ": more than the CPUs, so the req/s ratios are noise; the CPU and Redis figures"
            " per request hold up better."
        )
    return ": a quiet machine, but compare the req/s ratios within this run only."


def _report(
    in_process: dict[str, float],
    results: dict[tuple[str, str], Summary],
    command: str,
    load: tuple[float, float],
) -> str:
    none64, mem64, red64 = (results[name, "c64"] for name in ("none", "memory", "redis"))
    none1, red1 = results["none", "c1"], results["redis", "c1"]
    rows = [
        (
            "memory backend: CPU added per request (in process)",
            f"{in_process['memory_us']:.1f} µs",
            f"≤ {_TARGETS['memory_us']:g} µs",
        ),
        (
            "memory backend: CPU added per request (whole gateway, c=64)",
            f"{mem64.cpu_us - none64.cpu_us:+.0f} µs ({mem64.cpu_us:.0f} vs {none64.cpu_us:.0f})",
            "",
        ),
        (
            "Redis backend: admission p50, c=1 (in process)",
            f"{in_process['redis_p50_ms']:.3f} ms (p99 {in_process['redis_p99_ms']:.3f})",
            f"≤ {_TARGETS['redis_p50_ms']:g} ms",
        ),
        (
            "Redis backend: gateway p50 added at c=1 (wrk)",
            f"{red1.p50_ms - none1.p50_ms:+.3f} ms ({red1.p50_ms:.3f} vs {none1.p50_ms:.3f})",
            "",
        ),
        (
            "Redis backend: req/s kept at c=64",
            f"{red64.rps / none64.rps:.0%} ({red64.rps:.0f} vs {none64.rps:.0f})",
            f"≥ {_TARGETS['redis_rps_ratio']:.0%}",
        ),
        (
            "memory backend: req/s kept at c=64",
            f"{mem64.rps / none64.rps:.0%} ({mem64.rps:.0f} vs {none64.rps:.0f})",
            "",
        ),
    ]
    redis_rows = [
        ("script calls (round trips) per request", "script_calls", "{:.3f}"),
        ("commands per request (run by the scripts)", "commands", "{:.1f}"),
        ("Redis server CPU per request", "redis_cpu_us", "{:.1f} µs"),
    ]
    for what, counter, form in redis_rows:
        if counter in red64.per_request:
            seen = form.format(red64.per_request[counter])
            background = form.format(none64.per_request.get(counter, 0.0))
            rows.append((f"Redis backend at c=64: {what}", f"{seen} (without: {background})", ""))
    table = "\n".join(f"| {what} | {seen} | {target} |" for what, seen, target in rows)
    detail = "\n".join(
        f"| {name} | {load} | {s.rps:.0f} | {s.cpu_us:.0f} | {s.p50_ms:.3f} | {s.p99_ms:.3f} |"
        for (name, load), s in sorted(results.items(), key=lambda item: (item[0][1], item[0][0]))
    )
    return f"""# Benchmark: what the limits cost

Made by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()},
{platform.python_implementation()} {platform.python_version()}. Three gateways in the core
configuration (no redaction, no audit trail, so the limits' share is visible) measured side by
side in one run: without limits, with every limit set for the tenant (requests, tokens per
minute and per day, concurrency; never reached) on the memory backend, and on the Redis
backend (the Redis server of this machine, over loopback). The gateways share one CPU, wrk
and the fake upstream the other; Redis is not pinned. Figures are medians over the rounds;
compare within a run. Redis's counters (INFO commandstats and cpu) are the whole server's:
"without" is the same counter while the gateway without limits ran, i.e. what else reached
that Redis meanwhile. The machine's load average (1 min) was {load[0]:.1f} as the gateways
started and {load[1]:.1f} at the end, on {os.cpu_count()} CPUs{_load_reading(load)}

| measure | seen | target |
|---|---|---|
{table}

| gateway | load | req/s | CPU µs/request | p50 ms | p99 ms |
|---|---|---:|---:|---:|---:|
{detail}
"""


def main() -> None:
    """Run and print the measurements."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--redis", default=None)
    parser.add_argument("--out", type=Path, default=None, help="also run the gateways; report")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    options = parser.parse_args()
    if options.out is not None and not options.redis:
        parser.error("--out needs --redis (the report compares both backends)")
    settings = Settings.model_validate({"tenants": {"acme": {"limits": _LIMITS}}})
    policy = TenantPolicy.resolve(settings, "acme")
    bare = asyncio.run(_cpu_per_request(NoLimits(), policy, options.requests))
    limited = asyncio.run(
        _cpu_per_request(TenantLimiter(MemoryBackend(), GatewayMetrics()), policy, options.requests)
    )
    print(f"no limits:      {bare * 1e6:7.2f} µs CPU per request")
    print(f"memory backend: {limited * 1e6:7.2f} µs CPU per request")
    print(f"overhead:       {(limited - bare) * 1e6:7.2f} µs CPU per request")
    measured = {"memory_us": (limited - bare) * 1e6}
    if options.redis:
        admissions, settlements = asyncio.run(
            _redis_latency(options.redis, policy, options.requests // 10)
        )
        for name, latencies in (("admission", admissions), ("settlement", settlements)):
            quantiles = statistics.quantiles(latencies, n=100)
            print(
                f"redis {name:<10} (c=1): p50 {quantiles[49] * 1e3:.3f} ms, "
                f"p99 {quantiles[98] * 1e3:.3f} ms"
            )
            if name == "admission":
                measured["redis_p50_ms"] = quantiles[49] * 1e3
                measured["redis_p99_ms"] = quantiles[98] * 1e3
    if options.out is not None:
        started = os.getloadavg()[0]
        results = _end_to_end(options.redis, options.rounds, options.duration)
        load = (started, os.getloadavg()[0])
        command = "python -m bench.limits --redis URL --out " + str(options.out)
        options.out.write_text(_report(measured, results, command, load), encoding="utf-8")
        print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
