"""Finished spans, queued by requests and exported in batches from one thread.

The SDK's ``BatchSpanProcessor`` takes spans one at a time, with a fork check and its
own metrics on each; a request here hands over all of its spans at once, which costs one
``deque.extend``. Settings are the standard ``OTEL_BSP_*`` variables, with their defaults.
The queue holds ``SpanRecord`` tuples: the OTLP exporters encode them as they are, any
other exporter gets SDK span objects made from them here, on the export thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from localgate.telemetry.records import SpanRecord, to_readable

__all__ = ["SpanBatcher"]

logger = logging.getLogger("localgate.telemetry")


def _setting(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        value = default
    return value if value > 0 else default


class SpanBatcher:
    """Queues finished spans (dropping them when the queue is full) and exports them in
    batches of ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``, at least every
    ``OTEL_BSP_SCHEDULE_DELAY`` ms, from a daemon thread; ``shutdown`` exports the rest."""

    def __init__(
        self,
        exporter: SpanExporter,
        environ: Mapping[str, str],
        resource: Resource | None = None,
        scope: InstrumentationScope | None = None,
    ) -> None:
        self._exporter = exporter
        self._send = _sender(
            exporter, resource or Resource.create({}), scope or InstrumentationScope("localgate")
        )
        self._delay_s = _setting(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._max_queue = _setting(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self._batch = min(_setting(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self._max_queue)
        self._queue: deque[SpanRecord] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="localgate-spans", daemon=True)
        self._thread.start()

    def add(self, spans: Sequence[SpanRecord]) -> None:
        """Queue one request's spans; drop them if the queue is full (the exporter is behind)."""
        queue = self._queue
        if self._stopping or len(queue) + len(spans) > self._max_queue:
            self.dropped += len(spans)
            return
        queue.extend(spans)
        if len(queue) >= self._batch and not self._wake.is_set():
            self._wake.set()

    def shutdown(self) -> None:
        """Export what is queued, then stop the thread and the exporter (blocking)."""
        self._stopping = True
        self._wake.set()
        self._thread.join()
        self._exporter.shutdown()
        if self.dropped:
            logger.warning("%d spans were dropped: the exporter could not keep up", self.dropped)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            stopping = self._stopping
            self._export_queued()
            if stopping:
                return

    def _export_queued(self) -> None:
        queue = self._queue
        while queue:
            batch = [queue.popleft() for _ in range(min(self._batch, len(queue)))]
            try:
                self._send(batch)
            except Exception:  # an exporter bug must not end the thread: spans stop otherwise
                logger.exception("exporting %d spans failed", len(batch))


def _sender(
    exporter: SpanExporter, resource: Resource, scope: InstrumentationScope
) -> Callable[[list[SpanRecord]], Any]:
    """How a batch reaches ``exporter``: as records if it encodes them itself (the OTLP
    exporters here), else as the SDK's span objects."""
    export_records: Callable[[list[SpanRecord]], Any] | None = getattr(
        exporter, "export_records", None
    )
    if export_records is not None:
        return export_records

    def send(batch: list[SpanRecord]) -> Any:
        return exporter.export(to_readable(batch, resource, scope))

    return send
