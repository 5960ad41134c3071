"""The JSON access log: one line per request, written off the event loop.

Lines carry who, what, when and how it went (status, latency, token usage); never a
key, never a prompt or answer. The file is reopened if it is rotated away.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
from pathlib import Path
from typing import Any

import orjson

__all__ = ["AccessLog"]


class AccessLog:
    """Queues access records and writes them from a background thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._queue: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        handler = logging.handlers.WatchedFileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._listener = logging.handlers.QueueListener(self._queue, handler)
        self._handler = handler

    def start(self) -> None:
        """Start the writer thread."""
        self._listener.start()

    def close(self) -> None:
        """Write what is queued and close the file."""
        self._listener.stop()
        self._handler.close()

    def write(self, record: dict[str, Any]) -> None:
        """Queue one access record."""
        line = orjson.dumps(record).decode()
        self._queue.put_nowait(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))
