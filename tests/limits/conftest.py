"""Helpers for the limits tests: a hand-driven clock, requests, and a Redis of the tests' own.

The Redis tests need a server: LOCALGATE_TEST_REDIS_URL (default: the local server,
database 13). Skipped when none answers, except under CI=true, where they must run.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from localgate.config import Settings
from localgate.exchange.context import RequestContext
from localgate.exchange.principal import Principal
from localgate.gemini.routes import match_route
from localgate.policy.snapshot import TenantPolicy

REDIS_URL = os.environ.get("LOCALGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"


class Clock:
    """Time that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def request(
    limits: dict[str, Any],
    body: Any = None,
    *,
    tenant: str = "acme",
    key_id: str = "k1",
    priority: str | None = None,
) -> RequestContext:
    """An authenticated request of ``tenant`` under ``limits`` (a tenant's limits section)."""
    settings = Settings.model_validate({"tenants": {tenant: {"limits": limits}}})
    ctx = RequestContext(request_id=secrets.token_hex(4), route=match_route("POST", GENERATE))
    ctx.principal = Principal(tenant, key_id)
    ctx.policy = TenantPolicy.resolve(settings, tenant)
    ctx.body = body if body is not None else {"contents": [{"parts": [{"text": "hi"}]}]}
    ctx.priority = priority
    return ctx


def redis_available() -> None:
    """Skip (or fail under CI) when no Redis answers at REDIS_URL."""
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    finally:
        client.close()


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of this test's own in the test Redis; its keys deleted afterwards."""
    redis_available()
    import redis

    prefix = f"lgtest:{secrets.token_hex(6)}:"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()
