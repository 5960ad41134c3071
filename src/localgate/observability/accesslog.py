"""The JSON access log: one line per request, written in batches.

Lines carry who, what, when and how it went (status, latency, token usage); never a
key, never a prompt or answer. Requests only append to a list; a task on the event
loop writes whatever accumulated every ``flush_interval_s`` in one write, so logging
costs no thread wake-up per request. The file is reopened if it is rotated away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import IO, Any

import orjson

__all__ = ["AccessLog"]

logger = logging.getLogger("localgate")


class AccessLog:
    """Collects access records and writes them to ``path`` a few times a second."""

    def __init__(self, path: Path, flush_interval_s: float = 0.2) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._interval = flush_interval_s
        # Our own file, not a logging handler: logging.config.dictConfig (which an
        # embedding application may call) closes every registered handler.
        self._file: IO[bytes] | None = None
        self._inode: tuple[int, int] | None = None
        self._pending: list[bytes] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start flushing in the background (call from the event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._flush_forever())

    async def close(self) -> None:
        """Write what is pending and close the file."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, record: dict[str, Any]) -> None:
        """Queue one access record."""
        self._pending.append(orjson.dumps(record))

    def flush(self) -> None:
        """Write every pending line now."""
        if not self._pending:
            return
        lines, self._pending = self._pending, []
        try:
            handle = self._open()
            handle.write(b"\n".join(lines) + b"\n")
            handle.flush()
        except OSError:
            logger.exception("could not write %d access-log lines to %s", len(lines), self.path)

    def _open(self) -> IO[bytes]:
        """The log file, reopened if logrotate moved or removed it."""
        try:
            status = os.stat(self.path)
            current: tuple[int, int] | None = (status.st_dev, status.st_ino)
        except FileNotFoundError:
            current = None
        if self._file is None or current != self._inode:
            if self._file is not None:
                self._file.close()
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open across flushes
            status = os.fstat(self._file.fileno())
            self._inode = (status.st_dev, status.st_ino)
        return self._file

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.flush()
