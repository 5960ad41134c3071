"""Quality signals through a real gateway: the fake Gemini API answers with avgLogprobs;
low-confidence answers are marked (header, metric, audit field), a unary one is asked
again on the route's stronger model, a stream never is; drift and prompt gauges fill."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway, wait_until
from tests.gateway_process import free_port

PROMPT = {"contents": [{"role": "user", "parts": [{"text": "Call me on 13812345678."}]}]}
CONFIG = """
upstreams:
  dead: {{base_url: 'http://127.0.0.1:{port}', api_key_env: DEAD_KEY}}
  elsewhere: {{base_url: '{elsewhere}', api_key_file: '{elsewhere_keys}'}}
tenants:
  acme: {{upstreams: [default, dead]}}
retries: {{max_attempts: 1, attempts_per_upstream: 1}}
routes:
  - models: [gemini-2.5-flash]
    retry_low_confidence_on: gemini-2.5-pro
  - models: [gemini-2.0-flash]
    min_avg_logprob: -3.0
  - models: [gemini-1.5-flash]
    retry_low_confidence_on: gemini-unreachable
  - models: [gemini-unreachable]
    upstream: dead
  - models: [gemini-1.0-pro]
    retry_low_confidence_on: gemini-abroad
  - models: [gemini-abroad]
    upstream: elsewhere
quality:
  min_avg_logprob: -1.0
  drift:
    reference_answers: 2
    min_answers: 1
    prompts: {{enabled: true, tenants: [acme], sample_rate: 1, reference_prompts: 2}}
"""


@pytest.fixture(scope="module")
def quality_upstream() -> Iterator[FakeGemini]:
    with FakeGemini() as fake:
        yield fake


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[FakeGemini]:
    """An upstream tenant acme may not reach."""
    with FakeGemini() as fake:
        yield fake


@pytest.fixture(scope="module")
def module_gateway(
    quality_upstream: FakeGemini, elsewhere: FakeGemini, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    folder = tmp_path_factory.mktemp("quality")
    # A key, so that only the residency list keeps requests from reaching it.
    keys = folder / "elsewhere.keys"
    keys.write_text("elsewhere-key\n")
    config = CONFIG.format(port=free_port(), elsewhere=elsewhere.base_url, elsewhere_keys=keys)
    data = folder / "data"
    with run_gateway(data, quality_upstream.base_url, config=config) as gateway:
        yield gateway


@pytest.fixture
def fake(quality_upstream: FakeGemini) -> FakeGemini:
    quality_upstream.reset()
    return quality_upstream


@pytest.fixture
def gateway(module_gateway: RunningGateway, fake: FakeGemini) -> RunningGateway:
    return module_gateway


def completion(gateway: RunningGateway, response: httpx.Response) -> dict[str, Any]:
    _, record = gateway.audit_headers(response.headers["x-request-id"])
    return record


def metric(gateway: RunningGateway, name: str, **labels: str) -> float:
    """The value of one sample on /metrics (0 when absent)."""
    with gateway.client() as client:
        text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def test_a_confident_answer_is_not_marked(gateway: RunningGateway, fake: FakeGemini) -> None:
    fake.logprobs({"*": -0.2})
    scored = metric(gateway, "localgate_quality_answers_scored_total", model="gemini-2.5-flash")

    response = gateway.generate(PROMPT)

    assert response.status_code == 200, response.text
    assert "x-localgate-confidence" not in response.headers
    assert len(fake.requests) == 1
    assert completion(gateway, response)["confidence"] == {
        "avg_logprob": -0.2,
        "threshold": -1.0,
        "low": False,
    }
    after = metric(gateway, "localgate_quality_answers_scored_total", model="gemini-2.5-flash")
    assert after == scored + 1


def test_a_low_confidence_answer_is_asked_again_on_the_stronger_model(
    gateway: RunningGateway, fake: FakeGemini
) -> None:
    fake.logprobs({"gemini-2.5-flash": -2.5, "gemini-2.5-pro": -0.1})
    low = metric(
        gateway, "localgate_quality_low_confidence_answers_total", model="gemini-2.5-flash"
    )

    response = gateway.generate(PROMPT)

    assert response.status_code == 200, response.text
    # The fake saw the first model, then the stronger one; the client got the latter's answer.
    assert [r.path for r in fake.requests] == [
        "/v1beta/models/gemini-2.5-flash:generateContent",
        "/v1beta/models/gemini-2.5-pro:generateContent",
    ]
    assert fake.requests[0].body == fake.requests[1].body  # the same redacted request
    assert "13812345678" not in str(fake.requests[1].body)
    assert response.json()["modelVersion"] == "gemini-2.5-pro"
    assert "13812345678" in response.text  # restored as for any answer
    assert "x-localgate-confidence" not in response.headers
    record = completion(gateway, response)
    assert record["confidence"]["low"] is False
    assert record["confidence"]["retried"] == {
        "from": "gemini-2.5-flash",
        "to": "gemini-2.5-pro",
        "first_avg_logprob": -2.5,
        "first_total_tokens": 13,
        "failed": False,
    }
    assert [a["status"] for a in record["attempts"]] == [200, 200]
    access = gateway.access_record(response.headers["x-request-id"])
    assert access["confidence"]["retried"]["to"] == "gemini-2.5-pro"
    assert (
        metric(gateway, "localgate_quality_low_confidence_answers_total", model="gemini-2.5-flash")
        == low + 1
    )
    retries = metric(
        gateway,
        "localgate_quality_low_confidence_retries_total",
        model="gemini-2.5-flash",
        result="confident",
    )
    assert retries >= 1


def test_an_answer_still_low_after_the_retry_is_marked(
    gateway: RunningGateway, fake: FakeGemini
) -> None:
    fake.logprobs({"*": -4.0})

    response = gateway.generate(PROMPT)

    assert response.status_code == 200, response.text
    assert response.headers["x-localgate-confidence"] == "low"
    assert len(fake.requests) == 2  # one retry, never more
    record = completion(gateway, response)
    assert record["confidence"]["low"] is True
    assert record["confidence"]["retried"]["to"] == "gemini-2.5-pro"


def test_when_the_stronger_model_fails_the_first_answer_is_sent_marked(
    gateway: RunningGateway, fake: FakeGemini
) -> None:
    fake.logprobs({"*": -2.0})

    response = gateway.generate(PROMPT, model="gemini-1.5-flash")

    assert response.status_code == 200, response.text
    assert response.json()["modelVersion"] == "gemini-1.5-flash"
    assert response.headers["x-localgate-confidence"] == "low"
    record = completion(gateway, response)
    assert record["confidence"]["retried"]["failed"] is True
    assert record["outcome"] == "forwarded"


def test_the_stronger_model_is_never_sent_where_the_tenant_may_not_go(
    gateway: RunningGateway, fake: FakeGemini, elsewhere: FakeGemini
) -> None:
    fake.logprobs({"*": -2.0})
    elsewhere.reset()

    response = gateway.generate(PROMPT, model="gemini-1.0-pro")

    assert response.status_code == 200, response.text
    assert elsewhere.requests == []  # residency holds for the retry as for any request
    assert response.headers["x-localgate-confidence"] == "low"
    assert completion(gateway, response)["confidence"]["retried"]["failed"] is True


def test_a_route_sets_its_own_threshold(gateway: RunningGateway, fake: FakeGemini) -> None:
    fake.logprobs({"*": -2.0})  # below the global -1.0, above this route's -3.0

    response = gateway.generate(PROMPT, model="gemini-2.0-flash")

    assert "x-localgate-confidence" not in response.headers
    assert completion(gateway, response)["confidence"]["threshold"] == -3.0
    assert len(fake.requests) == 1


def test_a_stream_is_marked_but_never_asked_again(
    gateway: RunningGateway, fake: FakeGemini
) -> None:
    fake.logprobs({"*": -2.0})
    low = metric(
        gateway, "localgate_quality_low_confidence_answers_total", model="gemini-2.5-flash"
    )

    with gateway.client(headers={"x-goog-api-key": gateway.key}) as client:
        response = client.post(
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            params={"alt": "sse"},
            json=PROMPT,
        )

    assert response.status_code == 200, response.text
    assert [r.path for r in fake.requests] == [
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    ]
    # Its headers went out before the answer existed: the mark is in the record and metric.
    assert "x-localgate-confidence" not in response.headers
    record = completion(gateway, response)
    assert record["confidence"] == {"avg_logprob": -2.0, "threshold": -1.0, "low": True}
    assert (
        metric(gateway, "localgate_quality_low_confidence_answers_total", model="gemini-2.5-flash")
        == low + 1
    )


def test_drift_and_prompt_gauges_fill_from_real_traffic(
    gateway: RunningGateway, fake: FakeGemini
) -> None:
    fake.logprobs({"*": -0.5})
    fake.answer_as("gemini-2.0-flash-drift-test")
    for _ in range(3):
        assert gateway.generate(PROMPT, model="gemini-2.0-flash").status_code == 200

    series = {"model": "gemini-2.0-flash", "model_version": "gemini-2.0-flash-drift-test"}
    assert metric(gateway, "localgate_quality_window_answers", window="reference", **series) == 2
    assert metric(gateway, "localgate_quality_window_answers", window="recent", **series) == 3
    assert metric(gateway, "localgate_quality_avg_logprob", window="recent", **series) == -0.5
    divergence = metric(
        gateway,
        "localgate_quality_drift",
        signal="finish_reason",
        against="reference",
        **series,
    )
    assert divergence == 0.0
    # Every request of tenant acme was sampled (sample_rate 1): the reference filled, and
    # later prompts are compared with it. The same prompt: similarity 1.
    wait_until(
        lambda: (
            metric(gateway, "localgate_quality_prompt_samples", tenant="acme", window="recent") >= 1
        )
    )
    similarity = metric(
        gateway, "localgate_quality_prompt_similarity", tenant="acme", window="recent"
    )
    assert similarity == pytest.approx(1.0, abs=1e-6)


def test_the_quality_report_reads_a_running_gateway(
    gateway: RunningGateway, fake: FakeGemini, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from localgate.cli import main

    fake.logprobs({"*": -0.5})
    gateway.generate(PROMPT, model="gemini-2.0-flash")

    result = CliRunner().invoke(main, ["quality", "report", "--url", gateway.base_url, "--json"])

    assert result.exit_code == 0, result.output
    import json

    report = json.loads(result.output)
    models = {(s["model"], s["model_version"]) for s in report["series"]}
    assert ("gemini-2.0-flash", "gemini-2.0-flash") in models
    assert report["confidence"]["gemini-2.0-flash"]["scored"] >= 1
    text = CliRunner().invoke(main, ["quality", "report", "--url", gateway.base_url])
    assert text.exit_code == 0, text.output
    assert "gemini-2.0-flash (version gemini-2.0-flash)" in text.output
    assert "Low-confidence answers (since the gateway started):" in text.output


def test_the_report_says_when_no_gateway_answers() -> None:
    from click.testing import CliRunner

    from localgate.cli import main

    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, ["quality", "report", "--url", url])

    assert result.exit_code == 2
    assert "is the gateway running?" in result.output


def test_a_restarted_gateway_keeps_its_drift_references(tmp_path: Path, fake: FakeGemini) -> None:
    config = "quality: {drift: {reference_answers: 2, min_answers: 1}}\n"
    series = {
        "model": "gemini-2.5-flash",
        "model_version": "gemini-2.5-flash",
        "window": "reference",
    }
    with run_gateway(tmp_path / "data", fake.base_url, config=config) as first:
        for _ in range(2):
            assert first.generate(PROMPT).status_code == 200
        assert metric(first, "localgate_quality_window_answers", **series) == 2

    with run_gateway(tmp_path / "data", fake.base_url, config=config) as second:
        assert metric(second, "localgate_quality_window_answers", **series) == 2
        recent = {**series, "window": "recent"}
        assert metric(second, "localgate_quality_window_answers", **recent) == 0
    assert (tmp_path / "data" / "quality-drift.json").exists()
