"""SIGHUP reloads the configuration of the gateway `localgate serve` runs."""

from __future__ import annotations

import asyncio
import logging
import signal

from localgate.policy import ConfigReloader, ReloadResult

__all__ = ["ReloadOnHangup"]

logger = logging.getLogger("localgate.config")


class ReloadOnHangup:
    """The SIGHUP handler of the running gateway: each signal starts one reload."""

    def __init__(self, reloader: ConfigReloader) -> None:
        self._reloader = reloader
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[ReloadResult]] = set()

    def install(self) -> ReloadOnHangup:
        """Handle SIGHUP from now on (where the process can: the main thread)."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, self._reload)
        except (NotImplementedError, RuntimeError, ValueError):
            # Not the main thread (a gateway run inside tests), or no SIGHUP here.
            logger.info("SIGHUP cannot reload this gateway: not run by `localgate serve`")
            return self
        self._loop = loop
        return self

    def _reload(self) -> None:
        task = asyncio.ensure_future(self._reloader.reload())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Stop handling SIGHUP."""
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGHUP)
