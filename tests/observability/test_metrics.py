"""Metrics stay bounded whatever model names clients send."""

from __future__ import annotations

import asyncio
from pathlib import Path

from localgate.observability import AccessLog, GatewayMetrics


def test_model_labels_are_capped() -> None:
    metrics = GatewayMetrics()

    for index in range(150):
        metrics.observe("generateContent", f"models/m{index}", 200, 0.01)
    text = metrics.render().decode()

    assert 'model="models/m99"' in text
    assert 'model="models/m100"' not in text
    assert (
        'localgate_requests_total{model="other",route="generateContent",status="200"} 50.0' in text
    )


def test_access_log_survives_rotation(tmp_path: Path) -> None:
    log = AccessLog(tmp_path / "access.log")
    log.write({"n": 1})
    log.flush()
    (tmp_path / "access.log").rename(tmp_path / "access.log.1")  # logrotate moves it away

    log.write({"n": 2})
    asyncio.run(log.close())

    assert (tmp_path / "access.log.1").read_text() == '{"n":1}\n'
    assert (tmp_path / "access.log").read_text() == '{"n":2}\n'
