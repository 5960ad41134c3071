"""Stopping without dropping anything: SIGTERM drains the gateway, then it exits 0.

On the first SIGTERM (or Ctrl-C) ``/readyz`` answers 503 ``draining`` at once, so load
balancers stop sending; the gateway keeps accepting connections for
``server.drain_delay_s`` (the time a load balancer needs to notice), then stops listening,
lets requests and streams in flight finish for up to ``server.drain_timeout_s``, runs the
application's shutdown (audit completions flushed, a last checkpoint signed) and exits 0.
A second signal stops listening at once; a second Ctrl-C gives up on what is in flight.

This subclasses uvicorn's ``Server`` (its signal handler and its tick): the module and
tests/test_drain.py are where an uvicorn upgrade that changes them shows.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Generator
from types import FrameType

import uvicorn

__all__ = ["Drain", "DrainingServer"]

logger = logging.getLogger("localgate")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Drain:
    """Whether the gateway is draining (read by ``/readyz``)."""

    def __init__(self) -> None:
        self.draining = False

    def start(self) -> None:
        """From now on the gateway is not ready."""
        self.draining = True


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with a readiness drain before it stops listening, and exit 0."""

    def __init__(self, config: uvicorn.Config, drain: Drain, delay_s: float) -> None:
        super().__init__(config)
        self._drain = drain
        self._delay_s = delay_s
        self._stop_listening_at: float | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Handle SIGTERM and SIGINT while serving; unlike uvicorn's, do not re-raise the
        signal afterwards, so a drained gateway exits 0 rather than by the signal."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First signal: drain (not ready; still listening for the delay). Later ones:
        uvicorn's own handling (stop listening now; a second Ctrl-C forces)."""
        first = not self._drain.draining
        self._drain.start()
        if first and self._delay_s > 0:
            self._stop_listening_at = time.monotonic() + self._delay_s
            logger.info(
                "draining: /readyz answers 503; listening for %g s more, then requests in "
                "flight have up to %g s to finish",
                self._delay_s,
                self.config.timeout_graceful_shutdown or 0,
            )
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s), which also ends the drain delay."""
        if self._stop_listening_at is not None and time.monotonic() >= self._stop_listening_at:
            self.should_exit = True
        return await super().on_tick(counter)
