"""The limits stage's own cost per request: admission and settlement, nothing else.

``python -m bench.limits [--redis redis://127.0.0.1:6379/13] [--requests 20000]`` prints the
CPU time per request of the pass-through stage (no limits), of the memory backend with
every limit set, and, with ``--redis``, the Redis backend's admission and settlement
latency (p50, p99) one request at a time (c=1). In process, so the HTTP server's cost is
not in it; an end-to-end comparison at c=64 belongs in ``make bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

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


def main() -> None:
    """Run and print the measurements."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--redis", default=None)
    options = parser.parse_args()
    settings = Settings.model_validate({"tenants": {"acme": {"limits": _LIMITS}}})
    policy = TenantPolicy.resolve(settings, "acme")
    bare = asyncio.run(_cpu_per_request(NoLimits(), policy, options.requests))
    limited = asyncio.run(
        _cpu_per_request(TenantLimiter(MemoryBackend(), GatewayMetrics()), policy, options.requests)
    )
    print(f"no limits:      {bare * 1e6:7.2f} µs CPU per request")
    print(f"memory backend: {limited * 1e6:7.2f} µs CPU per request")
    print(f"overhead:       {(limited - bare) * 1e6:7.2f} µs CPU per request")
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


if __name__ == "__main__":
    main()
