"""Whether the audit trail can take the records a request needs (for ``/readyz``).

A request needs its request record written before it is forwarded, and its completion
record before its answer goes out. The trail is not ready when:

- completion records are held in memory, written neither to the store nor the spool
  (the gateway refuses requests until they are written);
- the writer thread has stopped;
- the database cannot be written (read-only, a standby, no write permission), or the
  last batch failed and a write has not succeeded since (disk full);
- the master key cannot unwrap the data keys already in the database (a replica
  started with another key refuses every request whose key period has begun).

The first two are read from memory on every probe. The rest ask the writer thread
(one rolled-back update and one key unwrap per wrapping master key), at most once per
``interval_s``: a load balancer probing every second costs nothing on the hot path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from localgate.audit.stage import TrailAudit
from localgate.audit.store import AuditStore, StoreNotWritable

__all__ = ["AuditReadiness"]

_INTERVAL_S = 5.0
_TIMEOUT_S = 5.0


class AuditReadiness:
    """Caches the audit trail's writability check for ``interval_s`` (injectable clock)."""

    def __init__(
        self,
        store: AuditStore,
        stage: TrailAudit,
        *,
        interval_s: float = _INTERVAL_S,
        timeout_s: float = _TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._stage = stage
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._checked_at: float | None = None
        self._problem: str | None = None
        self._lock = asyncio.Lock()

    async def problem(self) -> str | None:
        """None when the trail can record a request end to end, else why not."""
        held = self._stage.held
        if held:
            return (
                f"{held} completion record(s) could not be written to the audit store or "
                "its spool (disk full or database unwritable); requests are refused until "
                "they are"
            )
        if not self._store.writer_alive:
            return "the audit writer thread has stopped; restart the gateway"
        if self._stale():
            async with self._lock:
                if self._stale():  # another probe may have refreshed it meanwhile
                    self._problem = await self._check()
                    self._checked_at = self._clock()
        if self._problem is not None:
            return self._problem
        # Read fresh: a batch that failed since the last check refused its requests.
        failed = self._store.last_failure
        return f"the last audit write failed ({failed})" if failed is not None else None

    def _stale(self) -> bool:
        return self._checked_at is None or self._clock() - self._checked_at >= self._interval_s

    async def _check(self) -> str | None:
        failed = self._store.last_failure
        # After a failed batch, only a committed write shows that the disk has room again.
        probe = self._store.probe(commit=failed is not None)
        try:
            await asyncio.wait_for(asyncio.wrap_future(probe), self._timeout_s)
        except StoreNotWritable as exc:
            return str(exc)
        except TimeoutError:
            return f"the audit writer did not answer within {self._timeout_s:g} s"
        return None
