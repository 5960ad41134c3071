"""The Redis limits backend: counters shared by every replica on one Redis.

The only module importing ``redis``. Each admission is one Lua script (every limit of
every scope checked, then all counted, or nothing), each settlement another; nothing is
read, changed and written back from Python. Time is the Redis server's, so replicas
with skewed clocks share the same windows.

Per scope one hash (and a sorted set of the requests waiting for a slot, if any): its
windows, its reservations in flight and the lease each holds (see ``_COMMON``). A replica
renews its reservations' leases while their requests run; if it dies, they lapse and the
next admission of the scope refunds their tokens and frees their slots.

A request's settlement is not waited for: it goes with the next script call (the lease
is the safety net if it never arrives), so under load many requests' admissions and
settlements share one call, one round trip and one command for Redis to parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import struct
from collections.abc import Callable
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

# A scope's state is one hash, ``<prefix><scope>``. Field ``w`` holds its counts in one
# value: requests window start, its count, tokens/minute start, count, tokens/day start,
# count, reservations in flight, the earliest a lease may lapse (0: none in flight), until
# when a request may wait for a slot (0: none); starts and times in ms. Field
# ``r:<reservation>`` holds what a reservation in flight counted: tokens, the three
# windows' starts, lease expiry. Values are packed doubles (``struct``; exact integers
# to 2^53): per field and per number, Redis's and Lua's work with strings was most of a
# script's cost.
# Leases only move later (renewed), so ``l`` stays at or before the earliest: while
# ``now < l`` none has lapsed and the fields need not be read.
_COMMON = """
local function counts(v)
  if not v then return {0, 0, 0, 0, 0, 0, 0, 0, 0} end
  return {struct.unpack('ddddddddd', v)}
end
local function packed(c)
  return struct.pack('ddddddddd', c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9])
end
local function holds(v)
  return struct.unpack('ddddd', v)
end
-- Take a reservation out of the counts: ``refund`` requests and ``delta`` tokens in the
-- windows it was counted in, if they are still the current ones.
local function release(c, rs, ms, ds, refund, delta)
  if refund ~= 0 and c[1] == rs then c[2] = math.max(0, c[2] - refund) end
  if delta ~= 0 and c[3] == ms then c[4] = math.max(0, c[4] + delta) end
  if delta ~= 0 and c[5] == ds then c[6] = math.max(0, c[6] + delta) end
  c[7] = math.max(0, c[7] - 1)
  if c[7] == 0 then c[8] = 0 end
end
-- Expire the lapsed leases of a scope, refunding their tokens; ``c`` becomes the counts.
local function purge(state, c, now)
  local all = redis.call('HGETALL', state)
  local n, l = 0, 0
  for k = 1, #all, 2 do
    if string.sub(all[k], 1, 2) == 'r:' then
      local tk, rs, ms, ds, ex = holds(all[k + 1])
      if ex <= now then
        release(c, rs, ms, ds, 0, -tk)
        redis.call('HDEL', state, all[k])
      else
        n = n + 1
        if l == 0 or ex < l then l = ex end
      end
    end
  end
  c[7], c[8] = n, l
  redis.call('HSET', state, 'w', packed(c))
end
"""

# One request's admission: its reservation, tokens, lease ms, class (0-2), how long it
# will wait for a slot (ms, 0: it will not), and per scope its key and its four limits in
# LIMIT_ORDER (0: none). ``<scope>:waiting`` holds the requests waiting for a slot of the
# scope on any replica ("class:reservation", scored by when the wait ends): a slot is not
# given while a higher class waits. Answers: refused limit (0: admitted), refused scope
# index, retry ms, never fits, requests limit, remaining, reset ms, tokens limit,
# remaining, reset ms (-1: no such limit).
_ADMIT_ONE = """
local lengths = {60000, 60000, 86400000}
local function admit(rid, tokens, lease, rank, hold, scopes, now)
  local asks = {1, tokens, tokens}
  local n = #scopes
  local all = {}
  local q = {-1, -1, -1, -1, -1, -1}
  for i = 1, n do
    local scope = scopes[i]
    local state = scope[1]
    local c = counts(redis.call('HGET', state, 'w'))
    if c[8] > 0 and now >= c[8] then purge(state, c, now) end
    local ws = {}
    for w = 1, 3 do
      local s, u = c[2*w-1], c[2*w]
      if s == 0 or now >= s + lengths[w] then s, u = now, 0 end
      ws[w] = {s, u}
      local limit = scope[1 + w]
      if limit > 0 then
        local reset = s + lengths[w] - now
        if u + asks[w] > limit then
          local never = 0
          if asks[w] > limit then never = 1 end
          return struct.pack(ANSWER, w, i, reset, never, -1, -1, -1, -1, -1, -1)
        end
        local k = 1
        if w > 1 then k = 4 end
        local left = limit - u - asks[w]
        if q[k] < 0 or left < q[k+1] then q[k], q[k+1], q[k+2] = limit, left, reset end
      end
    end
    all[i] = {c, ws}
    local slots = scope[5]
    if slots > 0 then
      local waiting = state .. ':waiting'
      local outranked = false
      if rank < 2 and c[9] > now then
        -- Those still waiting (a registration lapses when its wait has ended).
        for _, m in ipairs(redis.call('ZRANGEBYSCORE', waiting, '(' .. now, '+inf')) do
          if tonumber(string.sub(m, 1, 1)) > rank then
            outranked = true
            break
          end
        end
      end
      if outranked or c[7] + 1 > slots then
        if hold > 0 then
          redis.call('ZREMRANGEBYSCORE', waiting, '-inf', now)
          redis.call('ZADD', waiting, now + hold, rank .. ':' .. rid)
          redis.call('PEXPIRE', waiting, hold + 60000)
          if now + hold > c[9] then
            c[9] = now + hold
            redis.call('HSET', state, 'w', packed(c))
          end
        end
        return struct.pack(ANSWER, 4, i, 1000, 0, -1, -1, -1, -1, -1, -1)
      end
    end
  end
  local expiry = now + lease
  for i = 1, n do
    local state = scopes[i][1]
    local c, ws = all[i][1], all[i][2]
    -- Only a request that may wait was registered as waiting (by an earlier try).
    if hold > 0 then redis.call('ZREM', state .. ':waiting', rank .. ':' .. rid) end
    local opened = ws[3][1] ~= c[5]
    c[1], c[2], c[3], c[4] = ws[1][1], ws[1][2] + 1, ws[2][1], ws[2][2] + tokens
    c[5], c[6], c[7] = ws[3][1], ws[3][2] + tokens, c[7] + 1
    if c[8] == 0 or expiry < c[8] then c[8] = expiry end
    redis.call('HSET', state, 'w', packed(c), 'r:' .. rid,
      struct.pack('ddddd', tokens, c[1], c[3], c[5], expiry))
    -- The state lives as long as the day window opened now (and the minute windows
    -- opened within it), and while a reservation is renewed: set when that window opens.
    if opened then redis.call('PEXPIRE', state, 86400000 + 60000) end
  end
  return struct.pack(ANSWER, 0, 0, 0, 0, q[1], q[2], q[3], q[4], q[5], q[6])
end
"""

# One request's settlement: its reservation, tokens used (-1: keep the reservation as
# spent), whether to refund the request (1/0), and the key of each scope. A reservation
# already settled, or lapsed and purged, is left alone.
_SETTLE_ONE = """
local function settle(rid, used, refund, keys)
  for i = 1, #keys do
    local state = keys[i]
    local v = redis.call('HMGET', state, 'r:' .. rid, 'w')
    if v[1] and v[2] then
      local c = counts(v[2])
      local tk, rs, ms, ds = holds(v[1])
      local delta = 0
      if used >= 0 then delta = used - tk end
      release(c, rs, ms, ds, refund, delta)
      redis.call('HSET', state, 'w', packed(c))
      redis.call('HDEL', state, 'r:' .. rid)
    end
  end
end
"""

# Admissions and settlements of several requests in one call, in order, atomically:
# ARGV[1] holds the operations one after the other, packed (``struct``, little-endian; see
# ``_admission`` and ``_settlement``). The keys are made from the scope names in the script
# (the scopes of one request, and of a batch, are not on one hash slot anyway: the backend
# needs one Redis, not a cluster). Returns the admissions' answers (``ANSWER``: ten
# doubles each) one after the other; a settlement answers nothing.
_APPLY = (
    "local ANSWER = '<dddddddddd'\n"
    + _COMMON
    + _ADMIT_ONE
    + _SETTLE_ONE
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local batch = ARGV[1]
local pos, size, out = 1, #batch, {}
while pos <= size do
  local kind = string.sub(batch, pos, pos)
  if kind == 'a' then
    local rid, tokens, lease, rank, hold, n
    rid, tokens, lease, rank, hold, n, pos = struct.unpack('<Bc0ddBdB', batch, pos + 1)
    local scopes = {}
    for i = 1, n do
      local key, l1, l2, l3, l4
      key, l1, l2, l3, l4, pos = struct.unpack('<Hc0dddd', batch, pos)
      scopes[i] = {key, l1, l2, l3, l4}
    end
    out[#out + 1] = admit(rid, tokens, lease, rank, hold, scopes, now)
  elseif kind == 's' then
    local rid, used, refund, n
    rid, used, refund, n, pos = struct.unpack('<Bc0dBB', batch, pos + 1)
    local keys = {}
    for i = 1, n do keys[i], pos = struct.unpack('<Hc0', batch, pos) end
    settle(rid, used, refund, keys)
  else
    return redis.error_reply('limits: an operation of unknown kind')
  end
end
return table.concat(out)
"""
)

# KEYS: a scope's state. Read only: a passed window reads as none open, a lapsed lease is
# not counted in flight (the next admission purges it, refunding its tokens). Returns
# "requests used, reset ms, tokens/min used, reset ms, tokens/day used, reset ms, in flight"
# (reset -1: no window open), space-separated.
_USAGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lengths = {60000, 60000, 86400000}
local v = redis.call('HGET', KEYS[1], 'w')
local c = {0, 0, 0, 0, 0, 0, 0, 0, 0}
if v then c = {struct.unpack('ddddddddd', v)} end
local out = {}
for w = 1, 3 do
  local s, u = c[2*w-1], c[2*w]
  if s == 0 or now >= s + lengths[w] then
    out[#out + 1], out[#out + 2] = 0, -1
  else
    out[#out + 1], out[#out + 2] = u, s + lengths[w] - now
  end
end
local flying = c[7]
if c[8] > 0 and now >= c[8] then
  flying = 0
  local all = redis.call('HGETALL', KEYS[1])
  for k = 1, #all, 2 do
    if string.sub(all[k], 1, 2) == 'r:' then
      local _, _, _, _, ex = struct.unpack('ddddd', all[k + 1])
      if ex > now then flying = flying + 1 end
    end
  end
end
out[#out + 1] = flying
for i = 1, #out do out[i] = string.format('%d', out[i]) end
return table.concat(out, ' ')
"""

# KEYS: the state of every scope of one reservation. ARGV: reservation, lease ms. Only a
# lease still held is renewed: one that lapsed stays lapsed. The state lives at least as
# long as a lease renewed in it.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local field, lease = 'r:' .. ARGV[1], tonumber(ARGV[2])
for i = 1, #KEYS do
  local v = redis.call('HGET', KEYS[i], field)
  if v then
    local tk, rs, ms, ds, ex = struct.unpack('ddddd', v)
    if ex > now then
      redis.call('HSET', KEYS[i], field, struct.pack('ddddd', tk, rs, ms, ds, now + lease))
      if redis.call('PTTL', KEYS[i]) < 2 * lease + 60000 then
        redis.call('PEXPIRE', KEYS[i], 2 * lease + 60000)
      end
    end
  end
end
return 1
"""


_MAX_BATCH = 128  # operations per script call: Redis runs nothing else meanwhile
_SCOPES_CACHE_SIZE = 10_000
# The packed parts of the operations (``_APPLY``), and an admission's answer.
_ADMISSION = struct.Struct("<ddBdB")  # tokens, lease ms, class, hold ms, number of scopes
_SCOPE_LIMITS = struct.Struct("<dddd")
_SETTLEMENT = struct.Struct("<dBB")  # tokens used, refund, number of scopes
_ANSWER = struct.Struct("<10d")
_ADMIT, _SETTLE = b"a"[0], b"s"[0]

# Told when an operation sent without waiting has been applied (None) or has failed.
Done = Callable[[Exception | None], None]


class _Batches:
    """Admissions and settlements made while a call is on its way go together in the next.

    One request at a time, each admission and settlement is one script call, one round
    trip. Under load, the operations that arrive while a call is out are sent as one call
    of the same script, as one argument (one command to encode, one answer to read, one
    wakeup): at 64 requests in flight the Redis client's work per command was most of the
    backend's CPU per request. Each admission still gets its own answer; the operations
    are applied in order, atomically together. An operation is either awaited (``call``)
    or sent with a callback (``send``: a settlement, which no request waits for). A
    script Redis has forgotten (restart, SCRIPT FLUSH) is loaded again and the call
    repeated once.
    """

    def __init__(self, client: Any, source: str) -> None:
        self._client = client
        self._source = source
        self._sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
        self._waiting: list[tuple[bytes, asyncio.Future[bytes] | Done]] = []
        self._sender: asyncio.Task[None] | None = None

    async def call(self, operation: bytes) -> bytes:
        """The answer of ``operation`` (packed; see ``_APPLY``): an admission's ten
        doubles, nothing for a settlement."""
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._add(operation, future)
        return await future

    def send(self, operation: bytes, done: Done) -> None:
        """Send ``operation`` with the next call; ``done`` is told when it is applied."""
        self._add(operation, done)

    async def drain(self) -> None:
        """Wait until every operation given so far has been sent and answered."""
        while self._sender is not None:
            await asyncio.wait([self._sender])

    def _add(self, operation: bytes, sink: asyncio.Future[bytes] | Done) -> None:
        self._waiting.append((operation, sink))
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[:_MAX_BATCH]
                del self._waiting[:_MAX_BATCH]
                try:
                    answers = await self._execute([operation for operation, _ in batch])
                except BaseException as exc:
                    for _, sink in batch:
                        _fail(sink, exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, sink), answer in zip(batch, answers, strict=True):
                    if isinstance(sink, asyncio.Future):
                        if not sink.done():
                            sink.set_result(answer)
                    else:
                        _tell(sink, None)
        finally:
            self._sender = None

    async def _execute(self, operations: list[bytes]) -> list[bytes]:
        batch = b"".join(operations)
        try:
            raw = await self._client.evalsha(self._sha, 0, batch)
        except NoScriptError:
            await self._client.script_load(self._source)
            raw = await self._client.evalsha(self._sha, 0, batch)
        if not isinstance(raw, bytes):
            raw = bytes(raw) if isinstance(raw, bytearray) else str(raw).encode()
        size = _ANSWER.size
        answers, at = [], 0
        for operation in operations:
            if operation[0] == _ADMIT:
                answers.append(raw[at : at + size])
                at += size
            else:
                answers.append(b"")
        if at != len(raw):
            raise RedisError(f"the limits script answered {len(raw)} bytes, not {at}")
        return answers


def _fail(sink: asyncio.Future[bytes] | Done, exc: BaseException) -> None:
    """Give one operation of a failed batch its error: a copy each (one raised object must
    not be re-raised from many places, its traceback growing each time)."""
    error = _copy(exc)
    if isinstance(sink, asyncio.Future):
        if not sink.done():
            sink.set_exception(error)
    else:
        _tell(sink, error)


def _tell(done: Done, error: Exception | None) -> None:
    try:
        done(error)
    except Exception:  # one callback's fault must not keep the batch's others untold
        logger.exception("limits: a settlement's callback failed")


def _copy(exc: BaseException) -> Exception:
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
        # The scopes' part of the operations, by scopes (kept, so their id is not reused):
        # the limiter passes the same tuple for every request of a (policy, key).
        self._encoded: dict[int, tuple[tuple[ScopeLimits, ...], bytes, bytes]] = {}

    async def admit(
        self,
        scopes: tuple[ScopeLimits, ...],
        tokens: int,
        reservation: str,
        waiting: Waiting | None = None,
    ) -> Admission:
        """One script: check every limit of every scope, then count all or nothing."""
        rank, hold_ms = (waiting.rank, waiting.hold_ms) if waiting else (1, 0)
        limits, _ = self._encode(scopes)
        operation = b"".join(
            (
                b"a",
                _reservation(reservation),
                _ADMISSION.pack(tokens, self._lease_ms, rank, hold_ms, len(scopes)),
                limits,
            )
        )
        try:
            answer = await self._batches.call(operation)
        except (RedisError, OSError) as exc:
            raise LimitsUnavailable(f"{type(exc).__name__}: {exc}") from exc
        refused, index, retry_ms, never, *quotas = map(int, _ANSWER.unpack(answer))
        if refused:
            return Admission(
                refused=LIMIT_ORDER[refused - 1],
                refused_scope=scopes[index - 1].scope,
                retry_after_s=retry_ms / 1000,
                never_fits=bool(never),
            )
        self._held[reservation] = scopes
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_leases())
        return Admission(requests=_quota(quotas[0:3]), tokens=_quota(quotas[3:6]))

    async def settle(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
    ) -> None:
        """One script: settle the reservation in every scope and free its slots."""
        operation = self._settlement(scopes, reservation, tokens, refund_request)
        try:
            await self._batches.call(operation)
        except (RedisError, OSError) as exc:
            raise LimitsUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def settle_soon(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
        done: Done,
    ) -> None:
        """``settle`` sent with the next script call, without waiting for it."""
        try:
            operation = self._settlement(scopes, reservation, tokens, refund_request)
        except LimitsUnavailable as exc:
            done(exc)
            return

        def written(error: Exception | None) -> None:
            if isinstance(error, RedisError | OSError):
                error = LimitsUnavailable(f"{type(error).__name__}: {error}")
            done(error)

        self._batches.send(operation, written)

    async def drain(self) -> None:
        """Wait for the settlements sent without waiting."""
        await self._batches.drain()

    def _settlement(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
    ) -> bytes:
        self._held.pop(reservation, None)
        _, keys = self._encode(scopes)
        used = -1 if tokens is None else tokens
        return b"".join(
            (
                b"s",
                _reservation(reservation),
                _SETTLEMENT.pack(used, refund_request, len(scopes)),
                keys,
            )
        )

    def _encode(self, scopes: tuple[ScopeLimits, ...]) -> tuple[bytes, bytes]:
        """The scopes' packed part of an admission (each scope's key and limits) and of
        a settlement (the keys)."""
        cached = self._encoded.get(id(scopes))
        if cached is not None and cached[0] is scopes:
            return cached[1], cached[2]
        if len(scopes) > 255:
            raise LimitsUnavailable("more than 255 scopes for one request")
        keys = []
        for scope in scopes:
            key = (self._prefix + scope.scope).encode()
            if len(key) > 0xFFFF:
                raise LimitsUnavailable(f"the key of scope {scope.scope[:40]}… is too long")
            keys.append(len(key).to_bytes(2, "little") + key)
        limits = b"".join(
            key + _SCOPE_LIMITS.pack(*(value or 0 for value in scope.values()))
            for key, scope in zip(keys, scopes, strict=True)
        )
        if len(self._encoded) >= _SCOPES_CACHE_SIZE:
            self._encoded.clear()
        self._encoded[id(scopes)] = (scopes, limits, b"".join(keys))
        return limits, b"".join(keys)

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
        try:
            answer = await self._read_usage(keys=[self._prefix + scope])
        except (RedisError, OSError) as exc:
            raise LimitsUnavailable(f"{type(exc).__name__}: {exc}") from exc
        values = [int(value) for value in _text(answer).split()]
        requests, tokens, day = (
            WindowUsage(used, reset / 1000 if reset >= 0 else None)
            for used, reset in zip(values[0:6:2], values[1:6:2], strict=True)
        )
        return ScopeUsage(requests, tokens, day, values[6])

    async def _renew_leases(self) -> None:
        """Every third of a lease, renew the leases of the reservations held here."""
        try:
            while self._held:
                await asyncio.sleep(self._lease_ms / 3000)
                held = list(self._held.items())
                try:
                    async with self._client.pipeline(transaction=False) as pipe:
                        for reservation, scopes in held:
                            keys = [self._prefix + scope.scope for scope in scopes]
                            await self._renew(
                                keys=keys, args=[reservation, self._lease_ms], client=pipe
                            )
                        await pipe.execute()
                except (RedisError, OSError) as exc:
                    logger.warning("limits: renewing %d leases failed: %s", len(held), exc)
        finally:
            self._renewer = None

    async def close(self) -> None:
        """Send what is waiting, stop renewing and close the connection pool."""
        await self._batches.drain()
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        await self._client.aclose()
        await self._pool.aclose()


def _text(answer: Any) -> str:
    return answer.decode() if isinstance(answer, bytes) else str(answer)


def _reservation(reservation: str) -> bytes:
    """A reservation id, packed with its length."""
    packed = reservation.encode()
    if not 0 < len(packed) < 256:
        raise LimitsUnavailable("a reservation id must be 1 to 255 bytes long")
    return bytes((len(packed),)) + packed


def _quota(values: list[int]) -> Quota | None:
    limit, remaining, reset_ms = values
    if limit < 0:
        return None
    return Quota(limit, remaining, math.ceil(reset_ms / 1000))
