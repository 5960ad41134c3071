"""The span batcher: batches of the configured size, a full queue drops, shutdown flushes."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from localgate.telemetry.batch import SpanBatcher
from localgate.telemetry.records import SpanRecord
from tests.conftest import wait_until


class _Recording(SpanExporter):
    def __init__(self, hold: threading.Event | None = None) -> None:
        self.batches: list[int] = []
        self.shut = False
        self._hold = hold

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._hold is not None:
            self._hold.wait()
        self.batches.append(len(spans))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.shut = True


def _spans(count: int) -> list[SpanRecord]:
    return [SpanRecord(f"s{i}", 0, 1, i + 1, 0, False, "", 0, 1, {}) for i in range(count)]


def test_a_full_batch_goes_out_at_once_and_shutdown_sends_the_rest() -> None:
    exporter = _Recording()
    batcher = SpanBatcher(
        exporter, {"OTEL_BSP_SCHEDULE_DELAY": "600000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4"}
    )
    batcher.add(_spans(4))
    wait_until(lambda: exporter.batches == [4])
    batcher.add(_spans(3))
    batcher.shutdown()

    assert exporter.batches == [4, 3]
    assert exporter.shut
    assert batcher.dropped == 0


def test_a_full_queue_drops_whole_requests() -> None:
    hold = threading.Event()
    exporter = _Recording(hold)
    batcher = SpanBatcher(
        exporter,
        {
            "OTEL_BSP_SCHEDULE_DELAY": "600000",
            "OTEL_BSP_MAX_QUEUE_SIZE": "10",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "8",
        },
    )
    batcher.add(_spans(8))  # taken by the exporter, which hangs
    wait_until(lambda: not batcher._queue)
    batcher.add(_spans(8))
    batcher.add(_spans(8))  # 16 > 10: dropped, all of it
    hold.set()
    batcher.shutdown()

    assert batcher.dropped == 8
    assert sum(exporter.batches) == 16
