"""Two real gateway processes sharing one Redis: limits are global, not per replica.

Also: a replica killed with SIGKILL while holding reservations gives them back within
the lease, because they lapse in Redis rather than wait for a process that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from localgate.identity import SqliteKeyStore
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.gateway_process import free_port, start
from tests.limits.conftest import GENERATE, REDIS_URL, redis_available

HI = {"contents": [{"parts": [{"text": "hi"}]}]}


@dataclass
class Replicas:
    """Gateways on one Redis and one key store, and the tenant key they all accept."""

    urls: list[str]
    processes: list[subprocess.Popen[bytes]]
    key: str


@contextmanager
def replicas(
    tmp_path: Path, upstream: FakeGemini, limits: str, count: int = 2, more: str = ""
) -> Iterator[Replicas]:
    """``count`` ``localgate serve`` processes whose tenant (a name of this test's own)
    has ``limits`` (YAML, indented under ``limits:``), counted in the test Redis under a
    key prefix of the test's own; ``more`` is appended to their configuration."""
    redis_available()
    tenant = f"t{secrets.token_hex(6)}"
    prefix = f"lgtest:{secrets.token_hex(6)}:"
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
proxy:
  enable_audit: false
limits:
  backend: redis
  redis_url: {REDIS_URL}
  lease_s: 1
  key_prefix: '{prefix}'
tenants:
  {tenant}:
    limits:
{limits}
{more}"""
    )
    store = SqliteKeyStore(data / "localgate.db")
    key = store.create(tenant, "replicas").key.reveal()
    store.close()
    env = {
        **os.environ,
        "LOCALGATE_DATA_DIR": str(data),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
        "LOCALGATE_CONFIG": str(config),
    }
    env.pop("LOCALGATE_REDIS_URL", None)
    processes: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for n in range(count):
            port = free_port()
            processes.append(start(env, port, tmp_path / f"gateway-{n}.log"))
            urls.append(f"http://127.0.0.1:{port}")
        yield Replicas(urls, processes, key)
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)
        _forget(prefix)


def _forget(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


async def _post_all(urls: list[str], key: str, total: int) -> list[httpx.Response]:
    """``total`` requests at once, spread evenly over ``urls``."""
    limits = httpx.Limits(max_connections=total)
    async with httpx.AsyncClient(timeout=INFRASTRUCTURE_TIMEOUT_S, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(
                    urls[n % len(urls)] + GENERATE, json=HI, headers={"x-goog-api-key": key}
                )
                for n in range(total)
            )
        )


def test_two_replicas_admit_exactly_the_requests_per_minute_between_them(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with replicas(tmp_path, upstream, "      requests_per_minute: 50") as gateways:
        answers = asyncio.run(_post_all(gateways.urls, gateways.key, 200))

    statuses = Counter(answer.status_code for answer in answers)
    assert statuses == {200: 50, 429: 150}
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert 1 <= int(refused.headers["retry-after"]) <= 60


def test_concurrent_token_heavy_requests_never_overrun_the_tokens_per_minute(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    # Each request reserves 1 + 2000 tokens; answers are held (long enough for all 40 to
    # arrive, even on a loaded machine) so that all reservations are outstanding together:
    # 4 fit in 10000, the fifth would not.
    upstream.delay(5.0)
    limits = "      tokens_per_minute: 10000\n      default_output_tokens: 2000"
    with replicas(tmp_path, upstream, limits) as gateways:
        answers = asyncio.run(_post_all(gateways.urls, gateways.key, 40))
        upstream.delay(0)
        # Settled to the fake's usage (13 tokens each): the rest is free again.
        with httpx.Client(timeout=INFRASTRUCTURE_TIMEOUT_S) as client:
            after = client.post(
                gateways.urls[1] + GENERATE, json=HI, headers={"x-goog-api-key": gateways.key}
            )

    statuses = Counter(answer.status_code for answer in answers)
    assert statuses == {200: 4, 429: 36}
    assert after.status_code == 200
    assert after.headers["x-ratelimit-remaining-tokens"] == str(10000 - 4 * 13 - 2001)


def test_a_killed_replicas_reservations_lapse_within_the_lease(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    upstream.misbehave("hang")
    limits = (
        "      concurrent_requests: 2\n"
        "      tokens_per_minute: 4100\n"
        "      default_output_tokens: 2000"
    )
    with replicas(tmp_path, upstream, limits) as gateways:
        doomed, survivor = gateways.urls
        headers = {"x-goog-api-key": gateways.key}

        def hold() -> None:
            with contextlib.suppress(httpx.TransportError):  # the gateway is killed under it
                httpx.post(
                    doomed + GENERATE, json=HI, headers=headers, timeout=INFRASTRUCTURE_TIMEOUT_S
                )

        holders = [threading.Thread(target=hold) for _ in range(2)]
        for thread in holders:
            thread.start()
        wait_until(lambda: len(upstream.requests) >= 2)
        with httpx.Client(timeout=INFRASTRUCTURE_TIMEOUT_S, headers=headers) as client:
            assert client.post(survivor + GENERATE, json=HI).status_code == 429
            gateways.processes[0].send_signal(signal.SIGKILL)
            gateways.processes[0].wait(timeout=INFRASTRUCTURE_TIMEOUT_S)
            killed = time.monotonic()
            upstream.misbehave(None)
            statuses: list[int] = []

            def admitted() -> bool:
                statuses.append(client.post(survivor + GENERATE, json=HI).status_code)
                return statuses[-1] == 200

            wait_until(admitted)
            freed_after = time.monotonic() - killed
        for thread in holders:
            thread.join(timeout=INFRASTRUCTURE_TIMEOUT_S)

    # Lease 1 s, renewed every third of it: the slots are free at most 1 s after the kill;
    # the rest is slack for a loaded machine.
    assert freed_after < 3.0
    assert set(statuses[:-1]) <= {429}


def test_a_breaker_opened_by_one_replica_keeps_the_other_from_the_upstream(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    breaker = """circuit_breaker:
  min_requests: 4
  failure_ratio: 0.5
  open_s: 600
  sync_interval_s: 0.1
retries:
  max_attempts: 1
"""
    upstream.misbehave("reset")
    with replicas(tmp_path, upstream, "      {}", more=breaker) as gateways:
        first, second = gateways.urls
        with httpx.Client(
            timeout=INFRASTRUCTURE_TIMEOUT_S, headers={"x-goog-api-key": gateways.key}
        ) as client:
            failed = [client.post(first + GENERATE, json=HI).status_code for _ in range(4)]

            def circuit(url: str) -> str:
                return str(client.get(url + "/readyz").json()["circuits"]["default"])

            assert circuit(first) == "open"
            # The second replica sent nothing, yet learns it through Redis.
            wait_until(lambda: circuit(second) == "open")
            upstream.misbehave(None)  # healthy again: only the breaker can refuse now
            sent = len(upstream.requests)
            refused = client.post(second + GENERATE, json=HI)

    assert set(failed) <= {502, 503}
    assert refused.status_code == 503
    assert "circuit breaker is open" in refused.json()["error"]["message"]
    assert len(upstream.requests) == sent
