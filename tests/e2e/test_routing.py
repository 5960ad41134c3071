"""Routing through a real gateway: two fake Gemini APIs on loopback as upstreams that
fail, throttle and break streams; fallback, residency, aliases, breakers, the header."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway
from tests.upstream.test_vertex import TokenEndpoint, service_account_file

UNAVAILABLE = {
    "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
}
PROMPT = {"contents": [{"role": "user", "parts": [{"text": "Call me on 13812345678."}]}]}
# No waiting between attempts: backoff is covered by the dispatcher's tests.
NO_BACKOFF = "backoff_initial_s: 0, backoff_max_s: 0"


@pytest.fixture(scope="module")
def backup_server() -> Iterator[FakeGemini]:
    with FakeGemini() as fake:
        yield fake


@pytest.fixture
def backup(backup_server: FakeGemini) -> FakeGemini:
    """A second fake Gemini API, the upstream named backup."""
    backup_server.reset()
    return backup_server


def config(tmp_path: Path, backup: FakeGemini, extra: str, retries: str) -> str:
    key_file = tmp_path / "backup.keys"
    key_file.write_text("backup-key-1\nbackup-key-2\n")
    return (
        f"upstreams:\n  backup: {{base_url: '{backup.base_url}', api_key_file: '{key_file}'}}\n"
        f"retries: {{{', '.join(filter(None, [NO_BACKOFF, retries]))}}}\n" + extra
    )


def gateway_for(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini, extra: str, retries: str = ""
) -> Any:
    """A gateway whose default upstream is ``upstream`` and with ``backup`` configured."""
    text = config(tmp_path, backup, extra, retries)
    return run_gateway(tmp_path / "data", upstream.base_url, config=text)


def stream(gateway: RunningGateway, model: str = "gemini-2.5-flash") -> httpx.Response:
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as client:
        return client.post(
            f"/v1beta/models/{model}:streamGenerateContent", params={"alt": "sse"}, json=PROMPT
        )


def events(response: httpx.Response) -> list[dict[str, Any]]:
    return [
        orjson.loads(line.removeprefix("data: "))
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


def test_a_failing_upstream_falls_back_with_the_redacted_request_on_record(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    upstream.fail_with(503, UNAVAILABLE)
    routes = "routes: [{models: 'gemini-2.5-*', fallback: [backup]}]\n"
    with gateway_for(tmp_path, upstream, backup, routes) as gateway:
        response = gateway.generate(PROMPT)
        request_id = response.headers["x-request-id"]
        access = gateway.access_record(request_id)
        _, completion = gateway.audit_headers(request_id)

    assert response.status_code == 200, response.text
    assert response.headers["x-localgate-upstream"] == "backup"
    assert "13812345678" in response.json()["candidates"][0]["content"]["parts"][0]["text"]
    # Two attempts on the default upstream (503 twice), then the backup; every one of
    # them carried the redacted prompt, never the number.
    assert len(upstream.requests) == 2
    sent = [r.body for r in (*upstream.requests, *backup.requests)]
    assert all("13812345678" not in orjson.dumps(body).decode() for body in sent)
    assert sent[0] == sent[1] == sent[2]
    assert backup.requests[0].headers["x-goog-api-key"] == "backup-key-1"
    attempts = [(a["upstream"], a["status"]) for a in completion["attempts"]]
    assert attempts == [("default", 503), ("default", 503), ("backup", 200)]
    assert all(a["latency_ms"] >= 0 for a in completion["attempts"])
    assert (completion["upstream"], completion["attempt"]) == ("backup", 3)
    assert (access["upstream"], access["attempt"]) == ("backup", 3)


def test_a_throttled_answer_is_retried_on_the_same_upstream(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    upstream.fail_with(
        429,
        {"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}},
        {"retry-after": "0"},
        times=1,
    )
    with gateway_for(tmp_path, upstream, backup, "") as gateway:
        response = gateway.generate(PROMPT)

    assert response.status_code == 200, response.text
    assert response.headers["x-localgate-upstream"] == "default"
    assert (len(upstream.requests), backup.requests) == (2, [])


def test_a_throttled_answer_given_up_on_tells_the_client_when_to_retry(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    upstream.fail_with(
        429,
        {"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}},
        {"retry-after": "7"},
    )
    with gateway_for(tmp_path, upstream, backup, "", "max_attempts: 1") as gateway:
        response = gateway.generate(PROMPT)

    assert response.status_code == 429
    assert response.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert response.headers["retry-after"] == "7"
    assert backup.requests == []


def test_residency_keeps_a_tenant_off_upstreams_it_may_not_reach(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    # acme (the test key's tenant) may reach only backup; the route for the pro models
    # sends it to default first: the fallback is the only allowed way.
    extra = (
        "routes:\n"
        "  - {models: 'gemini-2.5-pro', fallback: [backup]}\n"
        "tenants: {acme: {upstreams: [backup]}}\n"
    )
    with gateway_for(tmp_path, upstream, backup, extra) as gateway:
        refused = gateway.generate(PROMPT)
        allowed = gateway.generate(PROMPT, model="gemini-2.5-pro")
        refused_record = gateway.access_record(refused.headers["x-request-id"])
        (refused_audit,) = gateway.audit_headers(refused.headers["x-request-id"], count=1)

    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["status"] == "PERMISSION_DENIED"
    assert "data-residency" in error["message"]
    assert "x-localgate-upstream" not in refused.headers
    assert refused_record["status"] == 403
    assert (refused_audit["outcome"], refused_audit["status"]) == ("blocked by policy", 403)
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["x-localgate-upstream"] == "backup"
    assert upstream.requests == []  # nothing ever reached the default upstream
    assert [r.path for r in backup.requests] == ["/v1beta/models/gemini-2.5-pro:generateContent"]


def test_an_alias_sends_and_records_the_concrete_model(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    routes = "routes: [{models: gemini-flash, model: gemini-2.5-flash-001}]\n"
    with gateway_for(tmp_path, upstream, backup, routes) as gateway:
        response = gateway.generate(PROMPT, model="gemini-flash")
        request_id = response.headers["x-request-id"]
        access = gateway.access_record(request_id)
        request, _ = gateway.audit_headers(request_id)

    assert response.status_code == 200, response.text
    assert [r.path for r in upstream.requests] == [
        "/v1beta/models/gemini-2.5-flash-001:generateContent"
    ]
    assert access["model"] == request["model"] == "models/gemini-2.5-flash-001"


def test_an_open_breaker_answers_503_naming_the_upstream_until_a_probe_succeeds(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    upstream.fail_with(503, UNAVAILABLE)
    extra = (
        "circuit_breaker: {min_requests: 2, failure_ratio: 0.5, open_s: 300}\n"
        "routes: [{models: '*', upstream: default}]\n"
    )
    with gateway_for(tmp_path, upstream, backup, extra) as gateway:
        failed = gateway.generate(PROMPT)  # two attempts, both 503: the breaker opens
        skipped = gateway.generate(PROMPT)
        with gateway.client() as client:
            ready = client.get("/readyz").json()
            metrics = client.get("/metrics").text

    assert failed.status_code == 503
    assert failed.headers["x-localgate-upstream"] == "default"
    assert skipped.status_code == 503
    error = skipped.json()["error"]
    assert error["status"] == "UNAVAILABLE"
    assert "'default'" in error["message"]
    assert "circuit breaker is open" in error["message"]
    assert len(upstream.requests) == 2  # the third request was never sent
    assert ready["circuits"] == {"backup": "closed", "default": "open"}
    assert 'localgate_upstream_circuit_state{upstream="default"} 2.0' in metrics


def test_a_stream_that_breaks_before_its_first_event_is_served_by_the_fallback(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    upstream.stream(["never", "sent"], error_after=0)
    routes = "routes: [{models: '*', fallback: [backup]}]\n"
    retries = "attempts_per_upstream: 1"
    with gateway_for(tmp_path, upstream, backup, routes, retries) as gateway:
        response = stream(gateway)

    assert response.status_code == 200
    assert response.headers["x-localgate-upstream"] == "backup"
    texts = [e["candidates"][0]["content"]["parts"][0]["text"] for e in events(response)]
    assert "".join(texts) == "Hello from fake"
    assert (len(upstream.requests), len(backup.requests)) == (1, 1)


def test_a_stream_that_breaks_after_its_first_event_is_never_sent_elsewhere(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    upstream.stream(["first", " second"], error_after=1)
    routes = "routes: [{models: '*', fallback: [backup]}]\n"
    with gateway_for(tmp_path, upstream, backup, routes) as gateway:
        response = stream(gateway)

    assert response.status_code == 200
    assert response.headers["x-localgate-upstream"] == "default"
    received = events(response)
    assert received[0]["candidates"][0]["content"]["parts"][0]["text"] == "first"
    assert received[-1]["error"]["status"] == "UNAVAILABLE"
    assert (len(upstream.requests), backup.requests) == (1, [])


def test_an_upstream_that_hangs_times_out_and_the_fallback_answers(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    upstream.misbehave("hang")
    extra = "upstream: {timeout_s: 0.3}\nroutes: [{models: '*', fallback: [backup]}]\n"
    with gateway_for(tmp_path, upstream, backup, extra, "attempts_per_upstream: 1") as gateway:
        response = gateway.generate(PROMPT)
        request_id = response.headers["x-request-id"]
        _, completion = gateway.audit_headers(request_id)

    assert response.status_code == 200, response.text
    assert response.headers["x-localgate-upstream"] == "backup"
    attempts = [(a["upstream"], a["status"]) for a in completion["attempts"]]
    assert attempts == [("default", 504), ("backup", 200)]
    assert completion["attempts"][0]["latency_ms"] >= 300


def test_a_canary_split_keeps_each_user_on_one_side(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    routes = (
        "routes:\n"
        "  - models: '*'\n"
        "    sticky: user\n"
        "    split: [{weight: 1}, {upstream: backup, model: gemini-3-flash, weight: 1}]\n"
    )
    users = [f"user-{n}" for n in range(12)]
    with gateway_for(tmp_path, upstream, backup, routes) as gateway:
        first = {u: gateway.generate(PROMPT, **{"x-localgate-user": u}) for u in users}
        second = {u: gateway.generate(PROMPT, **{"x-localgate-user": u}) for u in users}

    sides = {u: r.headers["x-localgate-upstream"] for u, r in first.items()}
    assert set(sides.values()) == {"default", "backup"}
    assert {u: r.headers["x-localgate-upstream"] for u, r in second.items()} == sides
    assert {r.path for r in backup.requests} == {"/v1beta/models/gemini-3-flash:generateContent"}
    assert {r.path for r in upstream.requests} == {
        "/v1beta/models/gemini-2.5-flash:generateContent"
    }


def test_a_vertex_ai_upstream_serves_as_the_fallback(
    tmp_path: Path, upstream: FakeGemini, backup: FakeGemini
) -> None:
    endpoint = TokenEndpoint()
    try:
        credentials = service_account_file(tmp_path, endpoint.url)
        upstream.fail_with(503, UNAVAILABLE)
        extra = (
            "upstreams:\n"
            f"  vx: {{kind: vertex, base_url: '{backup.base_url}', project: acme-prod,\n"
            f"        location: europe-west4, credentials_file: '{credentials}'}}\n"
            "routes: [{models: '*', fallback: [vx]}]\n"
        )
        text = f"retries: {{{NO_BACKOFF}, attempts_per_upstream: 1}}\n" + extra
        with run_gateway(tmp_path / "data", upstream.base_url, config=text) as gateway:
            response = gateway.generate(PROMPT)
            with gateway.client() as client:
                ready = client.get("/readyz").json()
    finally:
        endpoint.close()

    assert response.status_code == 200, response.text
    assert response.headers["x-localgate-upstream"] == "vx"
    assert ready["checks"]["upstream:vx"] == "ok"
    (sent,) = backup.requests
    assert sent.path == (
        "/v1/projects/acme-prod/locations/europe-west4/publishers/google/models/"
        "gemini-2.5-flash:generateContent"
    )
    assert sent.headers["authorization"] == "Bearer tok-1"
    assert "13812345678" not in orjson.dumps(sent.body).decode()
