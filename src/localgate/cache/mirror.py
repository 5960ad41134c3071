"""Per tenant, an in-memory copy of what the store holds, kept up to date in the background.

The exact layer's key sets (``key_sets``) and the semantic layer's index
(``semantic_index``) are both such copies, kept up the same way: loaded on the store's
background thread on the tenant's first lookup; every few seconds (slower when the store
is slow) the entries created since the last refresh are read and applied; every ten minutes
(less often for a slow store) the copy is read again whole, which forgets entries deleted
elsewhere. A copy not refreshed lately (an idle tenant) is not trusted: lookups ask the
store. A load or refresh that fails is counted as a cache error (operation ``keys``),
logged, and tried again a refresh interval later.

``TenantMirror`` owns that schedule, the tasks and the failures; a copy says only how it is
read whole (``_read_all``) and how the entries created since are read and applied
(``_read_since``), both raising ``VectorStoreUnavailable`` when the store fails them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from localgate.observability import GatewayMetrics
from localgate.vectorstore.store import VectorStore, VectorStoreUnavailable

__all__ = ["REFRESH_S", "TenantMirror", "Upkeep"]

logger = logging.getLogger("localgate.cache")

# How often a copy asks for the entries created since; it is trusted (its "absent" acted
# on) for this many refresh intervals after its last refresh started.
REFRESH_S = 5.0
_TRUSTED_FOR = 3
# An entry reaches the store after its ``created`` time (the write's linger, the queue,
# clock differences between replicas): refreshes look back this far. Later ones are
# read by the next full reload, which also forgets entries deleted elsewhere.
_LATE_S = 60.0
_RELOAD_S = 600.0
# A copy's loads and refreshes keep the background thread busy 1/_REST of the time
# at most: a slower store is asked less often.
_REST = 100


@dataclass(slots=True)
class Upkeep:
    """When a tenant's in-memory copy of what the store holds was read, and is due again.

    Loaded on the tenant's first lookup, refreshed every ``pause_s`` (slower when the store
    is slow), read again whole every ``_RELOAD_S``, and trusted for ``_TRUSTED_FOR``
    refresh intervals.
    """

    pause_s: float = REFRESH_S
    refreshed_at: float = -math.inf  # monotonic: when the last load or refresh started
    since: float = 0.0  # wall clock: the next refresh asks for entries created from here
    refresh_due: float = -math.inf  # monotonic
    reload_due: float = -math.inf  # monotonic
    task: asyncio.Task[None] | None = None

    def due(self, loaded: bool) -> Literal["load", "refresh"] | None:
        """What to start now, if anything (nothing while a load or refresh runs)."""
        if self.task is not None and not self.task.done():
            return None
        now = time.monotonic()
        if not loaded or now >= self.reload_due:
            # After a failure, no sooner than a refresh.
            return "load" if now >= self.refresh_due else None
        return "refresh" if now >= self.refresh_due else None

    def trusted(self) -> bool:
        """Refreshed lately enough that entries of other replicas are not missing."""
        return time.monotonic() - self.refreshed_at <= _TRUSTED_FOR * self.pause_s

    def loaded(self, started: float, wall: float) -> None:
        """A load that started at ``started`` (monotonic) and ``wall`` (clock) is done."""
        self.refreshed_at, self.since = started, wall - _LATE_S
        self.reload_due = started + max(_RELOAD_S, _REST * (time.monotonic() - started))
        self.refresh_due = started + self.pause_s

    def refreshed(self, started: float, wall: float, refresh_s: float) -> None:
        """A refresh that started then is done; a slow one makes the next wait longer."""
        self.refreshed_at, self.since = started, wall - _LATE_S
        self.pause_s = max(refresh_s, _REST * (time.monotonic() - started))
        self.refresh_due = started + self.pause_s

    def failed(self) -> None:
        """Try again a refresh interval from now."""
        self.refresh_due = time.monotonic() + self.pause_s


S = TypeVar("S", bound=Upkeep)


class TenantMirror(Generic[S]):
    """The upkeep of per-tenant copies whose state is ``S``: when to load and refresh
    them, their tasks, and their failures. Subclasses read and apply."""

    # Names a copy in the log: "a key set could not be loaded: ...".
    _what = "a copy of the store"

    def __init__(
        self,
        store: VectorStore,
        metrics: GatewayMetrics,
        state: type[S],
        refresh_s: float = REFRESH_S,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._state = state
        self._refresh_s = refresh_s
        self._tenants: dict[str, S] = {}

    # -- what a copy says about itself ---------------------------------------------

    def _enabled(self) -> bool:
        """Whether copies are kept at all."""
        return True

    def _is_loaded(self, state: S) -> bool:
        """Whether the tenant's first load is complete."""
        raise NotImplementedError

    def _size(self, state: S) -> int:
        """How many entries the copy holds (0 before its first load)."""
        raise NotImplementedError

    async def _read_all(self, tenant: str, state: S) -> None:
        """Read the tenant's copy whole and put it in use."""
        raise NotImplementedError

    async def _read_since(self, tenant: str, state: S) -> None:
        """Read the entries created since ``state.since`` and apply them."""
        raise NotImplementedError

    # -- the upkeep ----------------------------------------------------------------

    def maintain(self, tenant: str) -> None:
        """Start loading or refreshing the tenant's copy, when that is due (on its lookups)."""
        if not self._enabled():
            return
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = self._state(pause_s=self._refresh_s)
        step = state.due(loaded=self._is_loaded(state))
        if step is not None:
            work = self._load if step == "load" else self._refresh
            state.task = asyncio.get_running_loop().create_task(work(tenant, state))

    def refresh_soon(self) -> None:
        """Another process changed the store: refresh every copy on its next lookup."""
        for state in self._tenants.values():
            state.refresh_due = -math.inf

    async def load(self, tenant: str) -> int:
        """Load the tenant's copy now, after any load or refresh under way; its size."""
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = self._state(pause_s=self._refresh_s)
        if state.task is not None and not state.task.done():
            await asyncio.shield(state.task)
        state.task = asyncio.get_running_loop().create_task(self._load(tenant, state))
        await asyncio.shield(state.task)
        return self._size(state)

    async def close(self) -> None:
        """Stop loading and refreshing."""
        tasks = [state.task for state in self._tenants.values() if state.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _load(self, tenant: str, state: S) -> None:
        started, wall = time.monotonic(), time.time()
        try:
            await self._read_all(tenant, state)
        except VectorStoreUnavailable as exc:
            self._failed(state, "be loaded", exc.reason)
            return
        state.loaded(started, wall)

    async def _refresh(self, tenant: str, state: S) -> None:
        started, wall = time.monotonic(), time.time()
        try:
            await self._read_since(tenant, state)
        except VectorStoreUnavailable as exc:
            self._failed(state, "be refreshed", exc.reason)
            return
        state.refreshed(started, wall, self._refresh_s)

    def _failed(self, state: S, what: str, reason: str) -> None:
        """Count and log a failure, and try again a refresh interval later."""
        logger.warning("cache: %s could not %s: %s", self._what, what, reason)
        self._metrics.cache_errors.labels("keys").inc()
        state.failed()
