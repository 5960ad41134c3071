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


def test_request_latency_histogram_counts_each_request_once_up_to_its_bucket() -> None:
    metrics = GatewayMetrics()
    for seconds in (0.003, 0.005, 0.04, 400.0):  # 0.005 lies on a bound: counted in it
        metrics.observe("generateContent", "models/m", 200, seconds)
    metrics.observe("countTokens", "models/m", 429, 0.001)
    lines = set(metrics.render().decode().splitlines())

    labels = 'model="models/m",route="generateContent",status="200"'
    assert f"localgate_requests_total{{{labels}}} 4.0" in lines
    assert f'localgate_request_duration_seconds_bucket{{le="0.005",{labels}}} 2.0' in lines
    assert f'localgate_request_duration_seconds_bucket{{le="0.01",{labels}}} 2.0' in lines
    assert f'localgate_request_duration_seconds_bucket{{le="0.05",{labels}}} 3.0' in lines
    assert f'localgate_request_duration_seconds_bucket{{le="300.0",{labels}}} 3.0' in lines
    assert f'localgate_request_duration_seconds_bucket{{le="+Inf",{labels}}} 4.0' in lines
    assert f"localgate_request_duration_seconds_count{{{labels}}} 4.0" in lines
    assert f"localgate_request_duration_seconds_sum{{{labels}}} 400.048" in lines
    other = 'model="models/m",route="countTokens",status="429"'
    assert f"localgate_requests_total{{{other}}} 1.0" in lines


def test_access_log_survives_rotation(tmp_path: Path) -> None:
    log = AccessLog(tmp_path / "access.log")
    log.write({"n": 1})
    log.flush()
    (tmp_path / "access.log").rename(tmp_path / "access.log.1")  # logrotate moves it away

    log.write({"n": 2})
    asyncio.run(log.close())

    assert (tmp_path / "access.log.1").read_text() == '{"n":1}\n'
    assert (tmp_path / "access.log").read_text() == '{"n":2}\n'
