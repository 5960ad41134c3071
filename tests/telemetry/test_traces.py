"""Traces end to end: a gateway exporting to an OTLP receiver on loopback, as a collector
would get them; what the spans say, how they nest, and what they must never carry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localgate.testing import FakeGemini
from tests.conftest import UPSTREAM_KEY, RunningGateway, run_gateway
from tests.telemetry.otlp import CLIENT, INTERNAL, SERVER, OtlpGrpcReceiver, OtlpHttpReceiver

PHONE = "13812345678"
PROMPT = f"Please call the customer back on {PHONE} about the overdue invoice"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
STAGES = ("identity", "limits", "redaction", "retrieval", "cache", "audit")


def _tracing_env(monkeypatch: pytest.MonkeyPatch, endpoint: str, protocol: str) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "localgate-test")


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpHttpReceiver]:
    with OtlpHttpReceiver() as otlp:
        _tracing_env(monkeypatch, otlp.endpoint, "http/protobuf")
        yield otlp


@pytest.fixture
def traced(
    receiver: OtlpHttpReceiver, tmp_path: Path, upstream: FakeGemini
) -> Iterator[RunningGateway]:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        yield gateway


def _body(text: str = PROMPT) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


def test_a_request_is_one_trace_continuing_the_clients_and_reaching_the_upstream(
    traced: RunningGateway, receiver: OtlpHttpReceiver, upstream: FakeGemini
) -> None:
    response = traced.generate(_body(), traceparent=TRACEPARENT, tracestate="vendor=opaque")
    assert response.status_code == 200, response.text
    request_id = response.headers["x-request-id"]

    spans = receiver.trace(CLIENT_TRACE, 1 + len(STAGES) + 1)
    server = receiver.server_span(request_id)
    assert (server.name, server.kind, server.parent_span_id) == (
        "generate_content gemini-2.5-flash",
        SERVER,
        CLIENT_SPAN,
    )
    assert server.resource["service.name"] == "localgate-test"
    children = {span.name: span for span in spans if span.parent_span_id == server.span_id}
    for name in STAGES:
        assert children[f"localgate.{name}"].kind == INTERNAL
    attempt = children["generate_content gemini-2.5-flash"]
    assert attempt.kind == CLIENT
    assert attempt.attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert attempt.attributes["localgate.upstream.attempt"] == 1

    attributes = server.attributes
    assert attributes["gen_ai.operation.name"] == "generate_content"
    assert attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert attributes["gen_ai.request.model"] == "gemini-2.5-flash"
    assert attributes["gen_ai.response.model"] == "gemini-2.5-flash"
    assert attributes["gen_ai.response.finish_reasons"] == ("STOP",)
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert attributes["gen_ai.request.stream"] is False
    assert attributes["localgate.tenant"] == "acme"
    assert attributes["localgate.outcome"] == "forwarded"
    assert attributes["http.response.status_code"] == 200
    assert children["localgate.redaction"].attributes["localgate.redaction.CN_MOBILE"] == 1

    # The upstream continues the same trace, under the attempt's span; the client's
    # tracestate (free text) does not leave.
    sent = upstream.requests[-1].headers
    assert sent["traceparent"] == f"00-{CLIENT_TRACE}-{attempt.span_id}-01"
    assert "tracestate" not in sent

    # A trace, an access-log line and the audit records join on the trace id.
    assert traced.access_record(request_id)["trace_id"] == CLIENT_TRACE
    records = traced.audit_headers(request_id)
    assert [record["trace_id"] for record in records] == [CLIENT_TRACE, CLIENT_TRACE]


def test_no_span_carries_prompt_text_redacted_text_or_a_key(
    traced: RunningGateway, receiver: OtlpHttpReceiver, upstream: FakeGemini
) -> None:
    response = traced.generate(_body(), traceparent=TRACEPARENT)
    assert response.status_code == 200, response.text
    # The upstream got the redacted prompt: none of its words may be in a span either.
    redacted = upstream.requests[-1].body["contents"][0]["parts"][0]["text"]
    assert PHONE not in redacted
    spans = receiver.trace(CLIENT_TRACE, 1 + len(STAGES) + 1)

    forbidden = [PHONE, "overdue invoice", "call the customer", redacted, traced.key]
    # The key's secret part (after "lg_<key id>_"; it may itself hold "_"), not just all of it.
    secret = traced.key.split("_", 2)[2]
    forbidden += [UPSTREAM_KEY, secret[:12], secret[-12:], "echo:"]
    for span in spans:
        text = json.dumps([span.name, span.attributes, span.resource], ensure_ascii=False)
        for value in forbidden:
            assert value not in text, (span.name, value)


def test_a_stream_records_time_to_first_chunk(
    traced: RunningGateway, receiver: OtlpHttpReceiver
) -> None:
    with traced.client(headers={"x-goog-api-key": traced.key}) as client:
        response = client.post(
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", json=_body("hi")
        )
    assert response.status_code == 200, response.text
    server = receiver.server_span(response.headers["x-request-id"])

    assert server.attributes["gen_ai.request.stream"] is True
    assert 0 < server.attributes["gen_ai.response.time_to_first_chunk"] < 60
    assert server.attributes["gen_ai.response.finish_reasons"] == ("STOP",)
    assert server.parent_span_id == ""  # no traceparent: a new trace


@pytest.mark.parametrize(
    "traceparent",
    [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # invalid trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # invalid span id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00-13812345678 call me-00f067aa0ba902b7-01",
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(
    traced: RunningGateway, receiver: OtlpHttpReceiver, upstream: FakeGemini, traceparent: str
) -> None:
    response = traced.generate(_body("hello"), traceparent=traceparent)
    assert response.status_code == 200, response.text
    server = receiver.server_span(response.headers["x-request-id"])

    assert server.parent_span_id == ""
    assert server.trace_id != CLIENT_TRACE
    assert upstream.requests[-1].headers["traceparent"].split("-")[1] == server.trace_id


def test_refused_requests_are_traced_with_their_status(
    traced: RunningGateway, receiver: OtlpHttpReceiver
) -> None:
    with traced.client(headers={"x-goog-api-key": "lg_not_a_key"}) as client:
        response = client.post("/v1beta/models/gemini-2.5-flash:generateContent", json=_body())
    assert response.status_code in (401, 403), response.text
    server = receiver.server_span(response.headers["x-request-id"])

    assert server.attributes["http.response.status_code"] == response.status_code
    assert server.attributes["localgate.outcome"] == "refused"
    assert "localgate.tenant" not in server.attributes


def test_grpc_export_works_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, upstream: FakeGemini
) -> None:
    with OtlpGrpcReceiver() as otlp:
        _tracing_env(monkeypatch, otlp.endpoint, "grpc")
        with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
            response = gateway.generate(_body("hello"), traceparent=TRACEPARENT)
            assert response.status_code == 200, response.text
            spans = otlp.trace(CLIENT_TRACE, 1 + len(STAGES) + 1)

    assert {span.kind for span in spans} == {SERVER, INTERNAL, CLIENT}


def test_untraced_gateway_forwards_no_trace_context_and_logs_no_trace_id(
    shared_gateway: RunningGateway, upstream: FakeGemini
) -> None:
    response = shared_gateway.generate(_body("hello"), traceparent=TRACEPARENT)
    assert response.status_code == 200, response.text

    assert "traceparent" not in upstream.requests[-1].headers
    assert "trace_id" not in shared_gateway.access_record(response.headers["x-request-id"])
