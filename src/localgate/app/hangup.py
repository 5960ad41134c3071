"""SIGHUP reloads the configuration of the gateway `localgate serve` runs.

While it can (the handler is installed), the gateway's process id is in its pid file,
which ``localgate reload`` reads; the file goes when the application shuts down, before
the server exits (uvicorn ends the process by re-raising the signal it stopped on, so
code after ``uvicorn.run`` does not run).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from localgate.policy import ConfigReloader, ReloadResult

__all__ = ["ReloadOnHangup"]

logger = logging.getLogger("localgate.config")


class ReloadOnHangup:
    """The SIGHUP handler of the running gateway: each signal starts one reload."""

    def __init__(
        self,
        reloader: ConfigReloader,
        pid_file: Path | None = None,
        *,
        also: Callable[[], object] | None = None,
    ) -> None:
        self._reloader = reloader
        self._pid_file = pid_file
        # Run first on each signal: the server certificate's check for changed files.
        self._also = also
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
        if self._pid_file is not None:
            self._pid_file.parent.mkdir(parents=True, exist_ok=True)
            self._pid_file.write_text(f"{os.getpid()}\n", encoding="ascii")
        return self

    def _reload(self) -> None:
        if self._also is not None:
            self._also()
        task = asyncio.ensure_future(self._reloader.reload())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Stop handling SIGHUP."""
        if self._loop is None:
            return
        self._loop.remove_signal_handler(signal.SIGHUP)
        if self._pid_file is not None:
            with contextlib.suppress(OSError):
                if self._pid_file.read_text(encoding="ascii").strip() == str(os.getpid()):
                    self._pid_file.unlink()
