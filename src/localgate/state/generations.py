"""Watching a change counter of the shared state database from a thread of its own.

A trigger bumps a row of ``state_generations`` in the same transaction as any change to the
tables it watches; a store polls that row every ``POLL_INTERVAL_S`` and drops what it cached
when the number moved. ``identity/postgres.py`` explains why a poll and not LISTEN/NOTIFY.

Fail closed: ``generation()`` answers only while polls succeed; once none has for
``STALE_AFTER_S`` it answers None and the store must read the database instead of its cache.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from localgate.state.postgres import connect, describe

__all__ = ["POLL_INTERVAL_S", "STALE_AFTER_S", "GenerationWatch"]

logger = logging.getLogger("localgate.state")

POLL_INTERVAL_S = 0.2
# A change committed at t is seen by a poll that starts after t: at the latest
# POLL_INTERVAL_S later, plus the poll's own round trip. Past this age of the last
# successful poll nothing cached is trusted: 0.2 + 0.6 < 1 s, the promise.
STALE_AFTER_S = 0.6


class GenerationWatch:
    """Polls counter ``name`` of ``state_generations`` on its own connection and thread."""

    def __init__(self, dsn: str, name: str, *, what: str) -> None:
        self._dsn = dsn
        self._name = name
        self._what = what  # for the log: "admin operators"
        self._lock = threading.Lock()
        self._seen = -1
        self._polled_at = float("-inf")  # monotonic start of the last successful poll
        self._stop = threading.Event()
        first = connect(dsn)
        try:
            self._poll_once(first)
        finally:
            first.close()
        self._thread = threading.Thread(
            target=self._poll_forever, name=f"{name}-poller", daemon=True
        )
        self._thread.start()

    def generation(self) -> int | None:
        """The counter as last polled, or None if that poll is too old to trust."""
        with self._lock:
            if time.monotonic() - self._polled_at >= STALE_AFTER_S:
                return None
            return self._seen

    def close(self) -> None:
        """Stop polling."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _poll_forever(self) -> None:
        db: Any = None
        failing = False
        while not self._stop.wait(POLL_INTERVAL_S):
            try:
                if db is None or db.closed:
                    db = connect(self._dsn)
                self._poll_once(db)
            except Exception as exc:  # noqa: BLE001 - the poller lives on; the cache goes stale
                if not failing:  # once per outage, not five times a second
                    logger.warning(
                        "%s: cannot read the change counter (%s); read from the database on "
                        "each request until it answers again",
                        self._what,
                        describe(exc),
                    )
                failing = True
                if db is not None:
                    db.close()
                    db = None
                continue
            if failing:
                logger.info("%s: the change counter answers again", self._what)
                failing = False
        if db is not None:
            db.close()

    def _poll_once(self, db: Any) -> None:
        started = time.monotonic()
        row = db.execute(
            "SELECT generation FROM state_generations WHERE name = %s", (self._name,)
        ).fetchone()
        with self._lock:
            self._seen = int(row[0]) if row else -1
            self._polled_at = started
