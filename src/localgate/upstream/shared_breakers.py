"""Circuit breakers shared by every replica on one Redis (with ``limits.backend: redis``).

A breaker that only counts its own process's calls opens N times too late with N
replicas (each sees 1/N of the traffic), and a replica that restarts forgets the upstream
is down. Here each replica keeps its own breaker for the decision on every call (no Redis
round trip on a request's path while the upstream is healthy) and, every
``circuit_breaker.sync_interval_s``:

- adds the calls it counted since the last sync to a window kept in Redis per upstream
  (buckets of a tenth of the window, as the local one) and, in the same Lua script, opens
  the shared breaker when the window's failures reach the ratio; the script answers how
  long the shared breaker stays open, and the replica's breaker adopts that;
- a replica whose own breaker opens publishes it at once, so the others skip the upstream
  from their next sync on.

When the open interval ends, one probe at a time goes through over all replicas: the
replica whose breaker lets a probe through must first claim the upstream's probe key
(``SET NX`` with a lease, so a replica that dies while probing does not block the others
for longer than that). A failed probe opens the shared breaker again; a successful one
frees the key and clears the window.

Time is the Redis server's (remaining milliseconds are read with ``PTTL``), so replicas with
skewed clocks agree. Redis unreachable: each replica goes on with its own breaker and logs
it once per outage; sharing resumes when Redis answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from localgate.config import CircuitBreakerSettings
from localgate.upstream.breaker import CircuitBreaker

__all__ = ["SharedBreakers"]

logger = logging.getLogger("localgate")

# KEYS: the window (a hash of bucket -> "ok:failed" counts), the open marker.
# ARGV: calls that succeeded, failed, window ms, min requests, failure ratio, open ms.
# Returns the milliseconds the shared breaker stays open (0: closed).
_SYNC = """
local window, marker = KEYS[1], KEYS[2]
local ok, failed = tonumber(ARGV[1]), tonumber(ARGV[2])
local window_ms, min_requests = tonumber(ARGV[3]), tonumber(ARGV[4])
local ratio, open_ms = tonumber(ARGV[5]), tonumber(ARGV[6])
local left = redis.call('PTTL', marker)
if left > 0 then return left end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bucket = math.floor(now * 10 / window_ms)
if ok > 0 then redis.call('HINCRBY', window, bucket .. ':o', ok) end
if failed > 0 then redis.call('HINCRBY', window, bucket .. ':f', failed) end
redis.call('PEXPIRE', window, window_ms * 2)
local total, bad = 0, 0
local fields = redis.call('HGETALL', window)
for i = 1, #fields, 2 do
  local b, kind = string.match(fields[i], '^(%d+):(%a)$')
  if b and tonumber(b) > bucket - 10 then
    local n = tonumber(fields[i + 1])
    total = total + n
    if kind == 'f' then bad = bad + n end
  else
    redis.call('HDEL', window, fields[i])
  end
end
if total >= min_requests and bad >= ratio * total and bad > 0 then
  redis.call('SET', marker, '1', 'PX', open_ms)
  redis.call('DEL', window)
  return open_ms
end
return 0
"""


class SharedBreakers:
    """Keeps a process's breakers in step with the other replicas' through Redis."""

    def __init__(
        self,
        url: str,
        breakers: Callable[[], Mapping[str, CircuitBreaker]],
        settings: CircuitBreakerSettings,
        *,
        prefix: str = "localgate:breaker:",
    ) -> None:
        self._redis = aioredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._breakers = breakers
        self._settings = settings
        self._prefix = prefix
        self._sync = self._redis.register_script(_SYNC)
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._failing = False
        self._adopting: str | None = None  # the breaker sync() is opening from Redis now

    def start(self) -> None:
        """Sync every ``sync_interval_s`` until ``close``."""
        self._task = asyncio.create_task(self._run(), name="localgate-shared-breakers")

    async def close(self) -> None:
        """Stop syncing, finish what is being published, close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._redis.aclose()

    async def sync(self) -> None:
        """Push each breaker's calls since the last sync and adopt the shared state."""
        settings = self._settings
        for name, breaker in list(self._breakers().items()):
            succeeded, failed = breaker.take_unsynced()
            try:
                left_ms = await self._sync(
                    keys=[self._key(name, "window"), self._key(name, "open")],
                    args=[
                        succeeded,
                        failed,
                        int(settings.window_s * 1000),
                        settings.min_requests,
                        settings.failure_ratio,
                        int(settings.open_s * 1000),
                    ],
                )
            except (RedisError, OSError) as exc:
                self._trouble(exc)
                return
            self._recovered()
            if int(left_ms) > 0:
                # Adopted from Redis: nothing to publish back (opened() is called from it).
                self._adopting = name
                try:
                    breaker.open_for(int(left_ms) / 1000)
                finally:
                    self._adopting = None

    async def claim_probe(self, name: str) -> bool:
        """Whether this replica may send the half-open probe to ``name`` (no other replica
        is probing it now). Redis unreachable: yes, as a breaker of its own would."""
        try:
            claimed = await self._redis.set(
                self._key(name, "probe"), "1", nx=True, px=int(self._settings.open_s * 1000)
            )
        except (RedisError, OSError) as exc:
            self._trouble(exc)
            return True
        return bool(claimed)

    def opened(self, name: str) -> None:
        """This replica's breaker of ``name`` opened: tell the others now, not at the next
        sync. An already open shared breaker is left as it is; one adopted from Redis is
        not published back."""
        if name != self._adopting:
            self._later(self._publish_open(name))

    def probed(self, name: str, *, ok: bool) -> None:
        """This replica's probe of ``name`` ended: free the probe key; a success also
        clears the shared window (a failure opens the breaker, published by ``opened``)."""
        self._later(self._publish_probe(name, ok=ok))

    async def _publish_open(self, name: str) -> None:
        try:
            await self._redis.set(
                self._key(name, "open"), "1", nx=True, px=int(self._settings.open_s * 1000)
            )
        except (RedisError, OSError) as exc:
            self._trouble(exc)

    async def _publish_probe(self, name: str, *, ok: bool) -> None:
        keys = [self._key(name, "probe")]
        if ok:
            keys += [self._key(name, "window"), self._key(name, "open")]
        try:
            await self._redis.delete(*keys)
        except (RedisError, OSError) as exc:
            self._trouble(exc)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._settings.sync_interval_s)
            await self.sync()

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _key(self, name: str, what: str) -> str:
        return f"{self._prefix}{name}:{what}"

    def _trouble(self, exc: BaseException) -> None:
        if not self._failing:
            self._failing = True
            logger.warning(
                "circuit breakers: Redis unreachable (%s); each replica decides alone until "
                "it answers",
                exc,
            )

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            logger.info("circuit breakers: Redis answers again; breakers are shared")
