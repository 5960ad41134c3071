"""The Redis limits backend: counters shared by every replica on one Redis.

The only module importing ``redis``. Each admission is one Lua script (every limit of
every scope checked, then all counted, or nothing), each settlement another; nothing is
read, changed and written back from Python. Time is the Redis server's, so replicas
with skewed clocks share the same windows.

Per scope three keys: ``<prefix><scope>`` a hash of the windows (``rs``/``rn`` requests,
``ms``/``mu`` tokens per minute, ``ds``/``du`` tokens per day: start in ms, amount),
``…:leases`` a sorted set of the reservations in flight scored by lease expiry (its size
is the scope's concurrency), ``…:held`` a hash of each reservation's tokens and windows.
A replica renews its reservations' leases while their requests run; if it dies, they
expire and the next admission of the scope refunds their tokens and frees their slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError

from localgate.limits.backend import (
    LIMIT_ORDER,
    Admission,
    LimitsUnavailable,
    Quota,
    ScopeLimits,
    ScopeUsage,
    Waiting,
    WindowUsage,
)

__all__ = ["RedisBackend"]

logger = logging.getLogger("localgate")

# Shared by both scripts: expire the scope's lapsed leases, refunding what they held.
_PURGE = """
local function adjust(state, sf, uf, start, amount)
  if amount ~= 0 and tonumber(redis.call('HGET', state, sf)) == start then
    local left = redis.call('HINCRBY', state, uf, amount)
    if left < 0 then redis.call('HSET', state, uf, 0) end
  end
end
local function purge(state, leases, held, now)
  local lapsed = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
  for _, rid in ipairs(lapsed) do
    local r = redis.call('HGET', held, rid)
    if r then
      local tk, rs, ms, ds = string.match(r, '^(%d+):(%d+):(%d+):(%d+)$')
      adjust(state, 'ms', 'mu', tonumber(ms), -tonumber(tk))
      adjust(state, 'ds', 'du', tonumber(ds), -tonumber(tk))
      redis.call('HDEL', held, rid)
    end
    redis.call('ZREM', leases, rid)
  end
end
"""

# One request's admission. P: "a", reservation, tokens, lease ms, the request's class
# (0-2), how long it will wait for a slot (ms, 0: it will not), then per scope its key and
# its four limits in LIMIT_ORDER (0: none). Per scope four keys: the windows, the leases,
# what each reservation holds, and ``<scope>:waiting``, the requests waiting for a slot of
# the scope on any replica ("class:reservation", scored by when the wait ends): a slot is
# not given while a higher class waits. Returns "refused limit (0: admitted), refused
# scope index, retry ms, never fits, requests limit, remaining, reset ms, tokens limit,
# remaining, reset ms" (-1: no such limit), space-separated.
_ADMIT_ONE = """
local function answer(values)
  for i = 1, #values do values[i] = string.format('%d', values[i]) end
  return table.concat(values, ' ')
end
local function admit(P, now)
  local rid, tokens, lease = P[2], tonumber(P[3]), tonumber(P[4])
  local rank, hold = tonumber(P[5]), tonumber(P[6])
  local me = rank .. ':' .. rid
  local lengths = {60000, 60000, 86400000}
  local asks = {1, tokens, tokens}
  local n = (#P - 6) / 5
  local windows = {}
  local q = {-1, -1, -1, -1, -1, -1}
  for i = 1, n do
    local state = P[7 + 5*(i-1)]
    local leases, held = state .. ':leases', state .. ':held'
    purge(state, leases, held, now)
    windows[i] = {}
    local v = redis.call('HMGET', state, 'rs', 'rn', 'ms', 'mu', 'ds', 'du')
    for w = 1, 3 do
      local s, u = tonumber(v[2*w-1]), tonumber(v[2*w]) or 0
      if s == nil or now >= s + lengths[w] then s, u = now, 0 end
      windows[i][w] = {s, u}
      local limit = tonumber(P[7 + 5*(i-1) + w])
      if limit > 0 then
        local reset = s + lengths[w] - now
        if u + asks[w] > limit then
          local never = 0
          if asks[w] > limit then never = 1 end
          return answer({w, i, reset, never, -1, -1, -1, -1, -1, -1})
        end
        local k = 1
        if w > 1 then k = 4 end
        local left = limit - u - asks[w]
        if q[k] < 0 or left < q[k+1] then q[k], q[k+1], q[k+2] = limit, left, reset end
      end
    end
    local slots = tonumber(P[7 + 5*(i-1) + 4])
    if slots > 0 then
      local waiting = state .. ':waiting'
      redis.call('ZREMRANGEBYSCORE', waiting, '-inf', now)
      local outranked = false
      if rank < 2 then
        for _, m in ipairs(redis.call('ZRANGE', waiting, 0, -1)) do
          if tonumber(string.sub(m, 1, 1)) > rank then
            outranked = true
            break
          end
        end
      end
      if outranked or redis.call('ZCARD', leases) + 1 > slots then
        if hold > 0 then
          redis.call('ZADD', waiting, now + hold, me)
          redis.call('PEXPIRE', waiting, hold + 60000)
        end
        return answer({4, i, 1000, 0, -1, -1, -1, -1, -1, -1})
      end
    end
  end
  for i = 1, n do
    local state = P[7 + 5*(i-1)]
    local leases, held = state .. ':leases', state .. ':held'
    redis.call('ZREM', state .. ':waiting', me)
    local ws = windows[i]
    redis.call('HSET', state, 'rs', ws[1][1], 'rn', ws[1][2] + 1, 'ms', ws[2][1],
      'mu', ws[2][2] + tokens, 'ds', ws[3][1], 'du', ws[3][2] + tokens)
    redis.call('PEXPIRE', state, 86400000 + 60000)
    redis.call('ZADD', leases, now + lease, rid)
    redis.call('HSET', held, rid,
      string.format('%d:%d:%d:%d', tokens, ws[1][1], ws[2][1], ws[3][1]))
    redis.call('PEXPIRE', leases, 2 * lease + 60000)
    redis.call('PEXPIRE', held, 2 * lease + 60000)
  end
  return answer({0, 0, 0, 0, q[1], q[2], q[3], q[4], q[5], q[6]})
end
"""

# One request's settlement. P: "s", reservation, tokens used (-1: keep the reservation as
# spent), refund the request (1/0), then the key of each scope. Returns "1".
_SETTLE_ONE = """
local function settle(P, now)
  local rid, used, refund = P[2], tonumber(P[3]), tonumber(P[4])
  for i = 5, #P do
    local state = P[i]
    local leases, held = state .. ':leases', state .. ':held'
    local r = redis.call('HGET', held, rid)
    if r then
      local tk, rs, ms, ds = string.match(r, '^(%d+):(%d+):(%d+):(%d+)$')
      tk = tonumber(tk)
      if used >= 0 then
        adjust(state, 'ms', 'mu', tonumber(ms), used - tk)
        adjust(state, 'ds', 'du', tonumber(ds), used - tk)
      end
      if refund == 1 then adjust(state, 'rs', 'rn', tonumber(rs), -1) end
      redis.call('HDEL', held, rid)
      redis.call('ZREM', leases, rid)
    end
  end
  return '1'
end
"""

# Admissions and settlements of several requests in one call, in order, atomically: ARGV
# holds one operation each, its fields joined by the unit separator (0x1f). The keys are
# made from the scope names in the script (the scopes of one request, and of a batch,
# are not on one hash slot anyway: the backend needs one Redis, not a cluster). Returns
# the operations' answers joined by ";".
_APPLY = (
    _PURGE
    + """
local function fields(text)
  local out, from = {}, 1
  while true do
    local at = string.find(text, '\\31', from, true)
    if not at then
      out[#out + 1] = string.sub(text, from)
      return out
    end
    out[#out + 1] = string.sub(text, from, at - 1)
    from = at + 1
  end
end
"""
    + _ADMIT_ONE
    + _SETTLE_ONE
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for op = 1, #ARGV do
  local P = fields(ARGV[op])
  if P[1] == 'a' then out[op] = admit(P, now) else out[op] = settle(P, now) end
end
return table.concat(out, ';')
"""
)

# KEYS: a scope's windows and its leases. Read only: a passed window reads as none open,
# a lapsed lease is not counted (the next admission purges them). Returns "requests used,
# reset ms, tokens/min used, reset ms, tokens/day used, reset ms, in flight" (reset -1:
# no window open), space-separated.
_USAGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lengths = {60000, 60000, 86400000}
local v = redis.call('HMGET', KEYS[1], 'rs', 'rn', 'ms', 'mu', 'ds', 'du')
local out = {}
for w = 1, 3 do
  local s, u = tonumber(v[2*w-1]), tonumber(v[2*w]) or 0
  if s == nil or now >= s + lengths[w] then
    out[#out + 1], out[#out + 2] = 0, -1
  else
    out[#out + 1], out[#out + 2] = u, s + lengths[w] - now
  end
end
out[#out + 1] = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
for i = 1, #out do out[i] = string.format('%d', out[i]) end
return table.concat(out, ' ')
"""

# KEYS: leases of every scope of one reservation. ARGV: reservation, lease ms. Only a
# lease still held is renewed (XX): one that lapsed stays lapsed.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + tonumber(ARGV[2]), ARGV[1])
end
return 1
"""


_MAX_BATCH = 128  # operations per script call: Redis runs nothing else meanwhile
_SEPARATOR = "\x1f"


class _Batches:
    """Admissions and settlements made while a call is on its way go together in the next.

    One request at a time, each admission and settlement is one script call, one round
    trip. Under load, the operations that arrive while a call is out are sent as one call
    of the same script (one command to encode, one answer to read, one wakeup): at 64
    requests in flight the Redis client's work per command was most of the backend's CPU
    per request. Each operation still gets its own answer; they are applied in order,
    atomically together. A script Redis has forgotten (restart, SCRIPT FLUSH) is loaded
    again and the call repeated once.
    """

    def __init__(self, client: Any, source: str) -> None:
        self._client = client
        self._source = source
        self._sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
        self._waiting: list[tuple[str, asyncio.Future[str]]] = []
        self._sending = False

    async def call(self, *fields: str | int) -> str:
        """The answer of the operation made of ``fields`` (see ``_APPLY``)."""
        text = _SEPARATOR.join(map(str, fields))
        if text.count(_SEPARATOR) != len(fields) - 1:
            raise LimitsUnavailable("a scope name holds the separator 0x1f")
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting.append((text, future))
        if not self._sending:
            self._sending = True
            asyncio.get_running_loop().create_task(self._send())
        return await future

    async def _send(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[:_MAX_BATCH]
                del self._waiting[:_MAX_BATCH]
                try:
                    answers = await self._execute([text for text, _ in batch])
                except BaseException as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(_copy(exc))
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, future), answer in zip(batch, answers, strict=True):
                    if not future.done():
                        future.set_result(answer)
        finally:
            self._sending = False

    async def _execute(self, operations: list[str]) -> list[str]:
        try:
            raw = await self._client.evalsha(self._sha, 0, *operations)
        except NoScriptError:
            await self._client.script_load(self._source)
            raw = await self._client.evalsha(self._sha, 0, *operations)
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        answers = text.split(";")
        if len(answers) != len(operations):
            raise RedisError(f"the limits script answered {len(answers)} of {len(operations)}")
        return answers


def _copy(exc: BaseException) -> BaseException:
    """The exception to give each call of a failed batch (a copy each: one raised object
    must not be re-raised from many places, its traceback growing each time)."""
    if isinstance(exc, Exception):
        try:
            return type(exc)(*exc.args)
        except Exception:  # noqa: BLE001 - an exception type with a constructor of its own
            return RedisError(f"{type(exc).__name__}: {exc}")
    return LimitsUnavailable("cancelled")


class RedisBackend:
    """Limits counted in Redis; reservations leased for ``lease_s``, renewed while held."""

    def __init__(
        self,
        url: str,
        *,
        lease_s: float = 30.0,
        connect_timeout_s: float = 2.0,
        timeout_s: float = 2.0,
        max_connections: int = 64,
        prefix: str = "localgate:limits:",
    ) -> None:
        # A bounded pool: a burst waits for a free connection (up to ``timeout_s``, like a
        # command on a busy Redis) rather than opening one per request in flight. Connecting
        # gets as long: a burst opening many connections at once on a busy machine takes
        # more than a fraction of a second, and an unreachable Redis is then skipped for a
        # second by the limiter anyway.
        self._pool: Any = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=connect_timeout_s,
        )
        self._client: Any = aioredis.Redis(connection_pool=self._pool)
        self._lease_ms = max(1, round(lease_s * 1000))
        self._prefix = prefix
        self._renew = self._client.register_script(_RENEW)
        self._read_usage = self._client.register_script(_USAGE)
        self._batches = _Batches(self._client, _APPLY)
        # Reservations held by this process: renewed every third of a lease.
        self._held: dict[str, tuple[ScopeLimits, ...]] = {}
        self._renewer: asyncio.Task[None] | None = None

    async def admit(
        self,
        scopes: tuple[ScopeLimits, ...],
        tokens: int,
        reservation: str,
        waiting: Waiting | None = None,
    ) -> Admission:
        """One script: check every limit of every scope, then count all or nothing."""
        rank, hold_ms = (waiting.rank, waiting.hold_ms) if waiting else (1, 0)
        fields: list[str | int] = ["a", reservation, tokens, self._lease_ms, rank, hold_ms]
        for scope in scopes:
            fields += [self._prefix + scope.scope, *(value or 0 for value in scope.values())]
        try:
            answer = await self._batches.call(*fields)
        except (RedisError, OSError) as exc:
            raise LimitsUnavailable(f"{type(exc).__name__}: {exc}") from exc
        refused, index, retry_ms, never, *quotas = (int(value) for value in answer.split())
        if refused:
            return Admission(
                refused=LIMIT_ORDER[refused - 1],
                refused_scope=scopes[index - 1].scope,
                retry_after_s=retry_ms / 1000,
                never_fits=bool(never),
            )
        self._held[reservation] = scopes
        self._start_renewing()
        return Admission(requests=_quota(quotas[0:3]), tokens=_quota(quotas[3:6]))

    async def settle(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
    ) -> None:
        """One script: settle the reservation in every scope and free its slots."""
        self._held.pop(reservation, None)
        used = -1 if tokens is None else tokens
        try:
            await self._batches.call(
                "s",
                reservation,
                used,
                int(refund_request),
                *(self._prefix + scope.scope for scope in scopes),
            )
        except (RedisError, OSError) as exc:
            raise LimitsUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def stop_waiting(
        self, scopes: tuple[ScopeLimits, ...], reservation: str, waiting: Waiting
    ) -> None:
        """Take the request out of every scope's waiting set (it expires anyway)."""
        member = f"{waiting.rank}:{reservation}"
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for scope in scopes:
                    pipe.zrem(f"{self._prefix}{scope.scope}:waiting", member)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise LimitsUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def usage(self, scope: str) -> ScopeUsage:
        """See ``LimitBackend.usage``: one read-only script, on the server's clock."""
        state = self._prefix + scope
        try:
            answer = await self._read_usage(keys=[state, state + ":leases"])
        except (RedisError, OSError) as exc:
            raise LimitsUnavailable(f"{type(exc).__name__}: {exc}") from exc
        values = [int(value) for value in _text(answer).split()]
        requests, tokens, day = (
            WindowUsage(used, reset / 1000 if reset >= 0 else None)
            for used, reset in zip(values[0:6:2], values[1:6:2], strict=True)
        )
        return ScopeUsage(requests, tokens, day, values[6])

    def _start_renewing(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_leases())

    async def _renew_leases(self) -> None:
        """Every third of a lease, renew the leases of the reservations held here."""
        while self._held:
            await asyncio.sleep(self._lease_ms / 3000)
            held = list(self._held.items())
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for reservation, scopes in held:
                        keys = [self._prefix + scope.scope + ":leases" for scope in scopes]
                        await self._renew(
                            keys=keys, args=[reservation, self._lease_ms], client=pipe
                        )
                    await pipe.execute()
            except (RedisError, OSError) as exc:
                logger.warning("limits: renewing %d leases failed: %s", len(held), exc)

    async def close(self) -> None:
        """Stop renewing and close the connection pool."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        await self._client.aclose()
        await self._pool.aclose()


def _text(answer: Any) -> str:
    return answer.decode() if isinstance(answer, bytes) else str(answer)


def _quota(values: list[int]) -> Quota | None:
    limit, remaining, reset_ms = values
    if limit < 0:
        return None
    return Quota(limit, remaining, math.ceil(reset_ms / 1000))
