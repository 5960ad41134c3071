"""Metrics stay bounded whatever model names clients send."""

from __future__ import annotations

from localgate.observability import GatewayMetrics


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
