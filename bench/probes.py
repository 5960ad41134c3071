"""Two small measurements beside wrk's: the disk's fsync latency and a stream's first event.

- ``fsync_latency_us``: what one durable commit costs at the least on this disk, so the
  defaults' added-latency target (which writes the audit trail with ``synchronous:
  full``) can allow for it: a small append to a file in the data directory, then
  ``fsync``, repeated; the median.
- ``first_event_us``: wrk times a request to its last byte; a stream's *time to first
  event* is timed here, request by request on one kept-alive connection, from sending
  the request to reading the first ``data:`` line's bytes; the median.
"""

from __future__ import annotations

import http.client
import os
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["first_event_us", "fsync_latency_us"]

_PROBE_FILE = ".bench-fsync-probe"
_RECORD = b"x" * 256  # about one small audit record


def fsync_latency_us(directory: Path, count: int = 200) -> float:
    """Median microseconds of appending a small record to a file in ``directory`` and
    fsyncing it (the file is removed afterwards)."""
    if count < 1:
        raise ValueError("count must be at least 1")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / _PROBE_FILE
    samples: list[float] = []
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fsync(descriptor)  # the file's creation is not what is measured
        for _ in range(count):
            started = time.perf_counter()
            os.write(descriptor, _RECORD)
            os.fsync(descriptor)
            samples.append((time.perf_counter() - started) * 1e6)
    finally:
        os.close(descriptor)
        path.unlink(missing_ok=True)
    return statistics.median(samples)


def first_event_us(
    port: int,
    path: str,
    body: Callable[[int], bytes],
    headers: Mapping[str, str],
    count: int,
    timeout_s: float = 30.0,
) -> float:
    """Median microseconds from sending a streaming request to 127.0.0.1:``port`` until
    the first ``data:`` bytes of its answer arrive (each answer is then read to its end);
    request ``i`` sends ``body(i)``."""
    if count < 1:
        raise ValueError("count must be at least 1")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    samples: list[float] = []
    try:
        for number in range(count):
            started = time.perf_counter()
            connection.request("POST", path, body=body(number), headers=dict(headers))
            response = connection.getresponse()
            if response.status != 200:
                raise RuntimeError(f"answered {response.status}: {response.read()[:300]!r}")
            seen = b""
            while b"data:" not in seen:
                chunk = response.read1(65536)
                if not chunk:
                    raise RuntimeError("the stream ended before its first event")
                seen = seen[-8:] + chunk
            samples.append((time.perf_counter() - started) * 1e6)
            response.read()
    finally:
        connection.close()
    return statistics.median(samples)
