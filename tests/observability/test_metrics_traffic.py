"""The metrics at /metrics after real traffic through a running gateway: each family moves
as the traffic says, and no client can grow the set of label values."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from localgate.audit.database import SqliteDatabase
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditStore, Receipt
from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway, wait_until

HELLO = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
MODEL = "models/gemini-2.5-flash"
UNAVAILABLE = {
    "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
}
STAGES = ("identity", "limits", "redaction", "retrieval", "cache", "audit", "upstream")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(gateway: RunningGateway) -> tuple[str, Samples]:
    """/metrics as text, and every sample by name and labels."""
    with gateway.client() as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return response.text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when absent)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= got)


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(got)[label] for (n, got), _ in samples.items() if n == name and label in dict(got)}


def stream(gateway: RunningGateway, key: str | None = None) -> list[dict[str, Any]]:
    """A streamed generateContent; its events."""
    with gateway.client(headers={"x-goog-api-key": key or gateway.key}) as client:
        response = client.post(
            f"/v1beta/{MODEL}:streamGenerateContent", params={"alt": "sse"}, json=HELLO
        )
    assert response.status_code == 200
    return [
        httpx.Response(200, content=line[len("data: ") :]).json()
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


def generate(gateway: RunningGateway, key: str, model: str = MODEL) -> httpx.Response:
    with gateway.client(headers={"x-goog-api-key": key}) as client:
        return client.post(f"/v1beta/{model}:generateContent", json=HELLO)


def test_tokens_by_tenant_are_the_upstreams_usage_and_an_unconfigured_tenant_is_other(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    config = "tenants:\n  acme:\n    limits: {requests_per_minute: 1000}\n"
    stranger = f"stranger-{secrets.token_hex(4)}"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        keys = gateway.keys()
        stranger_key = keys.create(stranger, "tests").key.reveal()
        keys.close()
        answers = [generate(gateway, gateway.key).json() for _ in range(2)]
        upstream.use_tokens(
            {
                "promptTokenCount": 110,
                "candidatesTokenCount": 70,
                "thoughtsTokenCount": 30,
                "cachedContentTokenCount": 40,
                "totalTokenCount": 210,
            }
        )
        answers.append(generate(gateway, gateway.key).json())
        answers.append(stream(gateway)[-1])  # a stream's usage is on its last event
        theirs = generate(gateway, stranger_key).json()
        text, samples = scrape(gateway)

    def summed(field: str, of: list[dict[str, Any]]) -> int:
        return sum(answer["usageMetadata"].get(field, 0) for answer in of)

    acme = {"tenant": "acme", "model": MODEL}
    assert value(samples, "localgate_tokens_total", **acme, type="input") == summed(
        "promptTokenCount", answers
    )
    assert value(samples, "localgate_tokens_total", **acme, type="output") == summed(
        "candidatesTokenCount", answers
    )
    assert value(samples, "localgate_tokens_total", **acme, type="thoughts") == 60
    assert value(samples, "localgate_tokens_total", **acme, type="cached_input") == 80
    other = {"tenant": "other", "model": MODEL}
    assert value(samples, "localgate_tokens_total", **other, type="input") == summed(
        "promptTokenCount", [theirs]
    )
    assert stranger not in text
    assert label_values(samples, "localgate_tokens_total", "tenant") == {"acme", "other"}
    # The GenAI convention's histogram: one input and one output observation per answer.
    genai = {
        "gen_ai_operation_name": "generate_content",
        "gen_ai_provider_name": "gcp.gemini",
        "gen_ai_request_model": "gemini-2.5-flash",
    }
    everyone = [*answers, theirs]
    for kind, field in (("input", "promptTokenCount"), ("output", "candidatesTokenCount")):
        labels = {**genai, "gen_ai_token_type": kind}
        assert value(samples, "gen_ai_client_token_usage_count", **labels) == 5
        assert value(samples, "gen_ai_client_token_usage_sum", **labels) == summed(field, everyone)


def test_every_stage_is_timed_once_per_request_and_a_refusal_stops_the_clock_there(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    config = "tenants:\n  acme:\n    limits: {requests_per_minute: 2}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        statuses = [generate(gateway, gateway.key).status_code for _ in range(3)]
        _, samples = scrape(gateway)

    assert statuses == [200, 200, 429]
    counts = {
        stage: value(samples, "localgate_stage_duration_seconds_count", stage=stage)
        for stage in STAGES
    }
    assert counts == {
        "identity": 3,
        "limits": 3,
        "redaction": 2,
        "retrieval": 2,
        "cache": 2,
        "audit": 2,
        "upstream": 2,
    }
    assert value(samples, "localgate_limits_refusals_total", limit="requests_per_minute") == 1
    assert value(samples, "localgate_limits_admissions_total", mode="limited") == 2
    requests = {"route": "generateContent", "model": MODEL}
    assert value(samples, "localgate_requests_total", **requests, status="429") == 1
    # The request that was refused never reached the upstream: one duration per answer.
    assert value(samples, "localgate_upstream_duration_seconds_count", upstream="default") == 2
    # Its error is in the GenAI duration histogram as error.type.
    refused = {
        "gen_ai_operation_name": "generate_content",
        "gen_ai_provider_name": "",
        "gen_ai_request_model": "gemini-2.5-flash",
        "error_type": "RESOURCE_EXHAUSTED",
    }
    assert total(samples, "gen_ai_server_request_duration_seconds_count", **refused) == 1


def test_a_retried_request_counts_its_attempts_and_the_retry(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    config = "retries: {backoff_initial_s: 0, backoff_max_s: 0}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        upstream.fail_with(503, UNAVAILABLE, times=1)
        response = generate(gateway, gateway.key)
        _, samples = scrape(gateway)

    assert response.status_code == 200
    assert value(samples, "localgate_upstream_retries_total", upstream="default", kind="retry") == 1
    assert (
        value(samples, "localgate_upstream_attempts_total", upstream="default", status="503") == 1
    )
    assert (
        value(samples, "localgate_upstream_attempts_total", upstream="default", status="200") == 1
    )
    assert value(samples, "localgate_upstream_duration_seconds_count", upstream="default") == 2
    assert value(samples, "localgate_stage_duration_seconds_count", stage="upstream") == 1
    assert value(samples, "localgate_upstream_circuit_state", upstream="default") == 0


def test_a_stream_gives_time_to_first_chunk_and_the_time_between_chunks(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    upstream.stream(["one", " two", " three", " four"])
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        events = stream(gateway)
        _, samples = scrape(gateway)

    assert len(events) == 4
    first_chunk = "localgate_upstream_time_to_first_chunk_seconds_count"
    assert value(samples, first_chunk, upstream="default") == 1
    assert (
        value(samples, "localgate_upstream_chunk_interval_seconds_count", upstream="default") == 3
    )
    assert value(samples, "localgate_upstream_duration_seconds_count", upstream="default") == 0
    genai = {
        "gen_ai_operation_name": "generate_content",
        "gen_ai_provider_name": "gcp.gemini",
        "gen_ai_request_model": "gemini-2.5-flash",
    }
    assert value(samples, "gen_ai_server_time_to_first_token_seconds_count", **genai) == 1
    assert value(samples, "gen_ai_server_time_per_output_token_seconds_count", **genai) == 1
    first = value(samples, "gen_ai_server_time_to_first_token_seconds_sum", **genai)
    whole = value(samples, "gen_ai_server_request_duration_seconds_sum", **genai, error_type="")
    assert 0 < first <= whole


def test_the_audit_trail_reports_its_batches_and_an_empty_spool(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        for _ in range(3):
            assert generate(gateway, gateway.key).status_code == 200
        _, samples = scrape(gateway)

    # Each request has two records (request, completion); batches hold one or more.
    assert value(samples, "localgate_audit_batch_records_sum") == 6
    assert 1 <= value(samples, "localgate_audit_batch_records_count") <= 6
    assert value(samples, "localgate_audit_batch_write_duration_seconds_count") == value(
        samples, "localgate_audit_batch_records_count"
    )
    assert value(samples, "localgate_audit_spool_records") == 0
    assert value(samples, "localgate_audit_completions_held") == 0


def test_clients_cannot_grow_the_label_values(tmp_path: Path, upstream: FakeGemini) -> None:
    stranger = f"stranger-{secrets.token_hex(4)}"
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        # Without a key: any model name, any header; none may become a label value.
        with gateway.client(headers={"x-goog-api-key": "not-a-key"}) as client:
            for index in range(5):
                client.post(f"/v1beta/models/anon-{index}:generateContent", json=HELLO)
        # With a key: past 100 model names, the rest are "other".
        statuses = {
            generate(gateway, gateway.key, f"models/m-{index}").status_code for index in range(105)
        }
        keys = gateway.keys()
        stranger_key = keys.create(stranger, "tests").key.reveal()
        keys.close()
        stream(gateway, stranger_key)
        text, samples = scrape(gateway)

    assert statuses == {200}
    assert "anon-" not in text
    assert stranger not in text
    models = label_values(samples, "localgate_tokens_total", "model")
    assert "other" in models
    assert len(models) <= 101
    genai_models = label_values(samples, "gen_ai_client_token_usage_count", "gen_ai_request_model")
    assert len(genai_models) <= 101
    # No tenant is configured: every tenant is "other".
    assert label_values(samples, "localgate_tokens_total", "tenant") == {"other"}


def test_a_completion_record_the_store_refuses_shows_in_the_spool_until_it_is_retried(
    tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    refusing = threading.Event()
    real_commit = SqliteDatabase.commit

    def commit(db: SqliteDatabase) -> None:
        if refusing.is_set() and str(data) in db.sqlalchemy_url:
            raise sqlite3.OperationalError("database is locked")
        real_commit(db)

    monkeypatch.setattr(SqliteDatabase, "commit", commit)
    original_append = AuditStore.append

    def append(
        store: AuditStore, record: PendingRecord, waiter: asyncio.Future[Receipt] | None = None
    ) -> asyncio.Future[Receipt]:
        # The request record goes in; the store refuses from the completion record on.
        if record.kind == "answer":
            refusing.set()
        return original_append(store, record, waiter)

    monkeypatch.setattr(AuditStore, "append", append)
    with run_gateway(data, upstream.base_url) as gateway:
        answered = generate(gateway, gateway.key)
        _, spooled = scrape(gateway)
        refusing.clear()
        monkeypatch.setattr(AuditStore, "append", original_append)
        wait_until(lambda: value(scrape(gateway)[1], "localgate_audit_spool_records") == 0)
        _, drained = scrape(gateway)

    assert answered.status_code == 200
    assert value(spooled, "localgate_audit_spool_records") == 1
    assert value(spooled, "localgate_audit_completions_spooled_total") == 1
    assert value(spooled, "localgate_audit_completions_held") == 0
    assert value(drained, "localgate_audit_completions_spooled_total") == 1
