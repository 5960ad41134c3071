"""/metrics for the whole host when ``localgate serve --workers N`` runs several processes.

A scrape on the shared port reaches one worker, chosen by the kernel. That worker answers
with the sum over every worker: each worker hands out its own samples on a Unix socket in
a private directory (``worker-<n>.sock``), and the one scraped reads its siblings' at
scrape time and merges them with its own. Nothing changes per request: the metrics keep
counting in plain numbers on each worker's event loop (``metrics.py``), and the cost of a
host-wide view is paid by the scrape (a few milliseconds), not by the traffic.

Merging, per sample (same name and labels):

- counters, histograms and summaries are summed (``*_created`` takes the earliest);
- gauges are summed (requests in flight, queue lengths, records held), except those whose
  name says they are not amounts: ``*_timestamp_seconds``, ``*_info`` and ``*_state``
  take the largest value (latest time, worst circuit), ``*_successful`` the smallest
  (one worker whose reload was rejected makes the host's 0).

A worker that has died and is being restarted is missing from the sum until it is back;
its counts start again from zero, which Prometheus' ``rate`` reads as a counter reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["HostMetrics", "merge_families", "socket_path"]

logger = logging.getLogger("localgate.observability")

# A sibling that does not hand over its samples within this long is left out of the sum
# (and logged): a scrape must answer even when one worker is stuck.
_SIBLING_TIMEOUT_S = 2.0
_MAX_SAMPLES_BYTES = 64 * 1024 * 1024

_MAXIMUM_SUFFIXES = ("_timestamp_seconds", "_info", "_state")
_MINIMUM_SUFFIXES = ("_successful",)

_SampleKey = tuple[str, tuple[tuple[str, str], ...]]


def socket_path(directory: Path, index: int) -> Path:
    """Where worker ``index`` hands out its samples."""
    return directory / f"worker-{index}.sock"


class HostMetrics:
    """One worker's part: serve its own samples to its siblings, and merge theirs with its
    own when it is the one scraped."""

    def __init__(self, registry: CollectorRegistry, directory: Path, index: int) -> None:
        self._registry = registry
        self._directory = directory
        self._index = index
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Listen on this worker's socket (replacing a dead predecessor's)."""
        path = socket_path(self._directory, self._index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = await asyncio.start_unix_server(self._hand_over, path=str(path))

    async def close(self) -> None:
        """Stop answering siblings; the socket file goes."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                socket_path(self._directory, self._index).unlink()

    async def render(self) -> bytes:
        """The host's exposition: this worker's samples and every reachable sibling's."""
        own = _encode(self._registry.collect())
        siblings = [
            path
            for path in sorted(self._directory.glob("worker-*.sock"))
            if path != socket_path(self._directory, self._index)
        ]
        theirs = await asyncio.gather(*(_fetch(path) for path in siblings))
        parts = [own, *(part for part in theirs if part is not None)]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(merge_families(parts)))
        return generate_latest(registry)

    async def _hand_over(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(json.dumps(_encode(self._registry.collect())).encode())
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the sibling gave up waiting
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def _fetch(path: Path) -> list[dict[str, Any]] | None:
    """A sibling's samples, or None (it is restarting, stuck, or gone)."""
    try:
        async with asyncio.timeout(_SIBLING_TIMEOUT_S):
            reader, writer = await asyncio.open_unix_connection(str(path))
            try:
                body = await reader.read(_MAX_SAMPLES_BYTES)
                while chunk := await reader.read(_MAX_SAMPLES_BYTES):
                    body += chunk
            finally:
                writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.wait_closed()
    except (ConnectionRefusedError, FileNotFoundError):
        return None  # no worker there now: dead, or being restarted
    except (TimeoutError, OSError) as exc:
        logger.warning("metrics: worker socket %s did not answer (%s); left out", path.name, exc)
        return None
    try:
        parts = json.loads(body)
    except ValueError:
        logger.warning("metrics: worker socket %s sent an incomplete answer; left out", path.name)
        return None
    return parts if isinstance(parts, list) else None


def _encode(families: Iterable[Metric]) -> list[dict[str, Any]]:
    return [
        {
            "name": family.name,
            "documentation": family.documentation,
            "type": family.type,
            "unit": family.unit,
            "samples": [[s.name, s.labels, s.value] for s in family.samples],
        }
        for family in families
    ]


def merge_families(parts: Iterable[list[dict[str, Any]]]) -> list[Metric]:
    """The families of several workers as one host's (module docstring: how)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[_SampleKey, float]] = {}
    for part in parts:
        for encoded in part:
            name = encoded["name"]
            if name not in families:
                families[name] = Metric(
                    name, encoded["documentation"], encoded["type"], encoded["unit"]
                )
                values[name] = {}
            combine = _combiner(encoded["type"], name)
            samples = values[name]
            for sample_name, labels, value in encoded["samples"]:
                key = (sample_name, tuple(sorted(labels.items())))
                earlier = samples.get(key)
                if earlier is None:
                    samples[key] = float(value)
                elif sample_name.endswith("_created"):
                    samples[key] = min(earlier, float(value))
                else:
                    samples[key] = combine(earlier, float(value))
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    return list(families.values())


def _combiner(kind: str, name: str) -> Callable[[float, float], float]:
    if kind in ("gauge", "info", "stateset", "unknown"):
        if name.endswith(_MAXIMUM_SUFFIXES) or kind in ("info", "stateset"):
            return max
        if name.endswith(_MINIMUM_SUFFIXES):
            return min
    return _add


def _add(first: float, second: float) -> float:
    return first + second


class _Families(Collector):
    """Already merged families, for ``generate_latest``."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        """The merged families."""
        yield from self._families
