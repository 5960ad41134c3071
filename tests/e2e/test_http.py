"""Raw HTTP against a running gateway: auth forms, errors, stream framings, observability."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from localgate.testing import FakeGemini
from tests.conftest import UPSTREAM_KEY, RunningGateway, run_gateway, wait_until

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
BODY = {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}


def error_of(response: httpx.Response) -> dict[str, object]:
    """The Gemini error envelope, checked for shape and status agreement."""
    envelope = response.json()
    assert set(envelope) == {"error"}
    error = envelope["error"]
    assert error["code"] == response.status_code
    assert isinstance(error["message"], str)
    assert error["message"]
    return error  # type: ignore[no-any-return]


# -- authentication -------------------------------------------------------------------


@pytest.mark.parametrize("form", ["header", "query", "bearer"])
def test_each_credential_form_is_accepted_and_never_forwarded(
    gateway: RunningGateway, upstream: FakeGemini, form: str
) -> None:
    headers, params = {}, {}
    if form == "header":
        headers["x-goog-api-key"] = gateway.key
    elif form == "query":
        params["key"] = gateway.key
    else:
        headers["authorization"] = f"Bearer {gateway.key}"

    with gateway.client() as client:
        response = client.post(GENERATE, json=BODY, headers=headers, params=params)

    assert response.status_code == 200, response.text
    received = upstream.requests[-1]
    assert received.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert "authorization" not in received.headers
    assert received.query == ()


@pytest.mark.parametrize(
    ("key", "status", "reason"),
    [
        (None, 401, "UNAUTHENTICATED"),
        ("AIzaSyNotALocalgateKey", 401, "UNAUTHENTICATED"),
        ("lg_0123456789abcdef_" + "x" * 43, 401, "UNAUTHENTICATED"),
    ],
)
def test_missing_or_unknown_key_is_refused_before_anything_is_forwarded(
    gateway: RunningGateway, upstream: FakeGemini, key: str | None, status: int, reason: str
) -> None:
    headers = {"x-goog-api-key": key} if key else {}
    with gateway.client() as client:
        response = client.post(GENERATE, json=BODY, headers=headers)

    assert response.status_code == status
    assert error_of(response)["status"] == reason
    assert upstream.requests == []


def test_revoked_key_is_refused_on_the_next_request(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    store = gateway.keys()
    issued = store.create("acme", "short-lived")
    headers = {"x-goog-api-key": issued.key.reveal()}
    with gateway.client() as client:
        assert client.post(GENERATE, json=BODY, headers=headers).status_code == 200
        store.revoke(issued.key_id)
        store.close()
        response = client.post(GENERATE, json=BODY, headers=headers)

    assert response.status_code == 403
    error = error_of(response)
    assert error["status"] == "PERMISSION_DENIED"
    assert issued.key_id in str(error["message"])
    assert len(upstream.requests) == 1


# -- bad requests ---------------------------------------------------------------------


def post(
    gateway: RunningGateway, path: str, content: bytes | str, **kwargs: object
) -> httpx.Response:
    headers = {"x-goog-api-key": gateway.key, "content-type": "application/json"}
    with gateway.client() as client:
        return client.post(path, content=content, headers=headers, **kwargs)  # type: ignore[arg-type]


def test_malformed_json_says_where(gateway: RunningGateway, upstream: FakeGemini) -> None:
    response = post(gateway, GENERATE, '{"contents": [}')

    assert response.status_code == 400
    error = error_of(response)
    assert error["status"] == "INVALID_ARGUMENT"
    assert "line 1, column 15" in str(error["message"])
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({}, "'contents'"),
        ({"contents": "hi"}, "'contents'"),
        ({"contents": [{"parts": [{"text": 5}]}]}, "'contents[0].parts[0].text'"),
        (
            {"contents": [{"parts": [{"text": "a"}]}], "system_instruction": {"parts": 1}},
            "'system_instruction.parts'",
        ),
        ([1, 2], "JSON object"),
    ],
)
def test_body_that_is_not_a_gemini_request_names_the_field(
    gateway: RunningGateway, upstream: FakeGemini, body: object, where: str
) -> None:
    response = post(gateway, GENERATE, json.dumps(body))

    assert response.status_code == 400
    assert where in str(error_of(response)["message"])
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"contents": []}, "'contents': must not be empty"),
        ({"contents": [{"role": "user", "parts": []}]}, "'contents[0].parts': must not be empty"),
        ({"contents": [{"parts": [{}]}]}, "'contents[0].parts[0]': a part must carry data"),
        (
            {"contents": [{"parts": [{"text": "a"}]}, {"parts": [{"text": ""}]}]},
            "'contents[1].parts[0]': a part must carry data",
        ),
    ],
)
def test_empty_contents_that_google_would_refuse_are_refused_here(
    gateway: RunningGateway, upstream: FakeGemini, body: object, where: str
) -> None:
    for path in (GENERATE, f"{STREAM}?alt=sse", "/v1beta/models/gemini-2.5-flash:countTokens"):
        response = post(gateway, path, json.dumps(body))

        assert response.status_code == 400
        error = error_of(response)
        assert error["status"] == "INVALID_ARGUMENT"
        assert where in str(error["message"])
    assert upstream.requests == []


def test_a_function_call_turn_without_text_is_forwarded(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "weather?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {}}}]},
        ]
    }

    response = post(gateway, GENERATE, json.dumps(body))

    assert response.status_code == 200
    assert upstream.requests[-1].body == body


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz"],
)
def test_bodies_not_declared_as_json_are_refused_with_415(
    gateway: RunningGateway, upstream: FakeGemini, content_type: str
) -> None:
    headers = {"x-goog-api-key": gateway.key, "content-type": content_type}
    with gateway.client() as client:
        response = client.post(GENERATE, content=json.dumps(BODY), headers=headers)

    assert response.status_code == 415
    error = error_of(response)
    assert error["status"] == "INVALID_ARGUMENT"
    assert "application/json" in str(error["message"])
    assert upstream.requests == []


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", None]
)
def test_json_or_undeclared_bodies_are_accepted(
    gateway: RunningGateway, upstream: FakeGemini, content_type: str | None
) -> None:
    headers = {"x-goog-api-key": gateway.key}
    if content_type is not None:
        headers["content-type"] = content_type
    with gateway.client() as client:
        response = client.post(GENERATE, content=json.dumps(BODY).encode(), headers=headers)
        sent = client.build_request("POST", GENERATE, content=b"{}", headers=headers)

    assert "content-type" not in sent.headers or content_type is not None
    assert response.status_code == 200
    assert upstream.requests[-1].body == BODY


def test_batch_embed_with_a_foreign_inner_model_is_refused(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    body = {"requests": [{"model": "models/other", "content": {"parts": [{"text": "a"}]}}]}

    response = post(
        gateway, "/v1beta/models/gemini-embedding-001:batchEmbedContents", json.dumps(body)
    )

    assert response.status_code == 400
    assert "requests[0].model" in str(error_of(response)["message"])
    assert upstream.requests == []


def test_count_tokens_needs_exactly_one_form(gateway: RunningGateway, upstream: FakeGemini) -> None:
    response = post(gateway, "/v1beta/models/gemini-2.5-flash:countTokens", "{}")

    assert response.status_code == 400
    assert "generateContentRequest" in str(error_of(response)["message"])


def test_legacy_count_tokens_form_is_forwarded(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    body = {"generateContentRequest": {"model": "models/gemini-2.5-flash", **BODY}}

    response = post(gateway, "/v1beta/models/gemini-2.5-flash:countTokens", json.dumps(body))

    assert response.status_code == 200
    assert upstream.requests[-1].body == body


def test_embed_content_single(gateway: RunningGateway, upstream: FakeGemini) -> None:
    body = {
        "content": {"parts": [{"text": "What is the meaning of life?"}]},
        "taskType": "RETRIEVAL_DOCUMENT",
    }

    response = post(gateway, "/v1beta/models/gemini-embedding-001:embedContent", json.dumps(body))

    assert response.status_code == 200
    assert response.json() == {"embedding": {"values": [0.1, 0.2, 0.3]}}


def test_oversized_body_is_refused_with_413(tmp_path: Path, upstream: FakeGemini) -> None:
    config = "server:\n  max_body_bytes: 1000\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        big = json.dumps({"contents": [{"parts": [{"text": "x" * 2000}]}]})
        declared = post(gateway, GENERATE, big)

        def chunks() -> Iterator[bytes]:
            yield big[:600].encode()
            yield big[600:].encode()

        with gateway.client() as client:
            streamed = client.post(
                GENERATE,
                content=chunks(),
                headers={"x-goog-api-key": gateway.key},
            )

    for response in (declared, streamed):
        assert response.status_code == 413
        assert "1000 bytes" in str(error_of(response)["message"])
    assert upstream.requests == []


# -- routes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/cachedContents",
        "/v1beta/models/gemini-2.5-flash:predict",
        "/v1beta/models/a%2F..%2Fb:generateContent",
        "/v2/models/gemini-2.5-flash:generateContent",
        "/",
        "/v1beta/batches",
    ],
)
def test_unknown_routes_are_refused_and_never_forwarded(
    gateway: RunningGateway, upstream: FakeGemini, path: str
) -> None:
    response = post(gateway, path, json.dumps(BODY))

    assert response.status_code == 404
    assert error_of(response)["status"] == "NOT_FOUND"
    assert upstream.requests == []


def test_wrong_method_is_405(gateway: RunningGateway, upstream: FakeGemini) -> None:
    with gateway.client() as client:
        response = client.get(GENERATE, headers={"x-goog-api-key": gateway.key})

    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    error_of(response)
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/upload/v1beta/files"),
        ("GET", "/v1beta/files"),
        ("GET", "/v1beta/files/abc"),
        ("DELETE", "/prefix/v1/files/abc"),
    ],
)
def test_files_api_is_refused_by_policy(
    gateway: RunningGateway, upstream: FakeGemini, method: str, path: str
) -> None:
    with gateway.client() as client:
        response = client.request(method, path, headers={"x-goog-api-key": gateway.key})

    assert response.status_code == 403
    error = error_of(response)
    assert error["status"] == "PERMISSION_DENIED"
    assert "data-localization policy" in str(error["message"])
    assert upstream.requests == []


def test_model_catalogue_query_is_forwarded_without_the_key(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    with gateway.client() as client:
        response = client.get("/v1beta/models", params={"key": gateway.key, "pageSize": "5"})

    assert response.status_code == 200
    assert upstream.requests[-1].query == (("pageSize", "5"),)


# -- upstream failures ----------------------------------------------------------------


def test_upstream_error_keeps_status_and_message(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.fail_with(
        404, {"error": {"code": 404, "message": "models/nope is not found", "status": "NOT_FOUND"}}
    )

    response = post(gateway, GENERATE, json.dumps(BODY))

    assert response.status_code == 404
    assert error_of(response) == {
        "code": 404,
        "message": "models/nope is not found",
        "status": "NOT_FOUND",
    }


def test_upstream_html_error_becomes_an_envelope(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.fail_with(503, "<html>Service Unavailable</html>")

    response = post(gateway, GENERATE, json.dumps(BODY))

    assert response.status_code == 503
    error = error_of(response)
    assert error["status"] == "UNAVAILABLE"
    assert "<html>" not in str(error["message"])


@pytest.mark.parametrize(("mode", "status"), [("reset", 502), ("malformed", 502)])
def test_broken_upstream_is_a_502_naming_it(
    gateway: RunningGateway, upstream: FakeGemini, mode: str, status: int
) -> None:
    upstream.misbehave(mode)

    response = post(gateway, GENERATE, json.dumps(BODY))

    assert response.status_code == status
    error = error_of(response)
    assert error["status"] == "UNAVAILABLE"
    assert upstream.base_url in str(error["message"])
    assert "Traceback" not in response.text


def test_unreachable_upstream_is_a_502(tmp_path: Path, upstream: FakeGemini) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    dead = f"http://127.0.0.1:{closed_port}"
    with run_gateway(tmp_path / "data", dead) as gateway:
        response = post(gateway, GENERATE, json.dumps(BODY))

    assert response.status_code == 502
    error = error_of(response)
    assert error["status"] == "UNAVAILABLE"
    assert dead in str(error["message"])


def test_slow_upstream_is_a_504(tmp_path: Path, upstream: FakeGemini) -> None:
    upstream.misbehave("hang")
    config = "upstream:\n  timeout_s: 0.3\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        response = post(gateway, GENERATE, json.dumps(BODY))

    assert response.status_code == 504
    error = error_of(response)
    assert error["status"] == "DEADLINE_EXCEEDED"
    assert "upstream.timeout_s" in str(error["message"])


def test_without_upstream_key_the_gateway_runs_but_refuses_to_forward(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url, upstream_key=None) as gateway:
        response = post(gateway, GENERATE, json.dumps(BODY))
        with gateway.client() as client:
            ready = client.get("/readyz")
            alive = client.get("/healthz")

    assert response.status_code == 503
    assert "GEMINI_API_KEY" in str(error_of(response)["message"])
    assert alive.status_code == 200
    assert ready.status_code == 503
    assert "GEMINI_API_KEY" in ready.json()["checks"]["upstream:default"]
    assert upstream.requests == []


# -- the audit trail's record of what left -------------------------------------------


@pytest.mark.parametrize("text", ["Hello", "line\u2028separated\u2029text \u201cquoted\u201d"])
def test_sent_digest_is_of_the_bytes_the_upstream_received(
    gateway: RunningGateway, upstream: FakeGemini, text: str
) -> None:
    # The pipeline serialises the body once, for the record's digest and for the adapter
    # to send; U+2028/2029 (escaped only towards clients) must not make the two differ.
    body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}

    response = post(gateway, GENERATE, json.dumps(body))

    assert response.status_code == 200
    request, _ = gateway.audit_headers(response.headers["x-request-id"])
    (received,) = upstream.requests
    # The fake parsed what it received; orjson writes the same compact bytes back.
    sent = orjson.dumps(received.body)
    assert received.body == body
    assert request["sent_digest"] == hashlib.sha256(sent).hexdigest()


# -- streaming ------------------------------------------------------------------------


def test_sse_stream_is_google_framed(gateway: RunningGateway, upstream: FakeGemini) -> None:
    upstream.stream(["a", "b\u2028c"])

    response = post(gateway, STREAM, json.dumps(BODY), params={"alt": "sse"})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = response.text.split("\r\n\r\n")
    assert events[-1] == ""
    assert all(event.startswith("data: {") and "\n" not in event for event in events[:-1])
    assert "\\u2028" in response.text
    texts = [json.loads(e[6:])["candidates"][0]["content"]["parts"][0]["text"] for e in events[:-1]]
    assert texts == ["a", "b\u2028c"]


def test_json_array_stream_without_alt(gateway: RunningGateway, upstream: FakeGemini) -> None:
    upstream.stream(["a", "b", "c"])

    response = post(gateway, STREAM, json.dumps(BODY))

    assert response.status_code == 200
    assert response.text.startswith("[{")
    assert response.text.endswith("\n]")
    assert "\n,\r\n" in response.text
    chunks = response.json()
    assert [c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks] == ["a", "b", "c"]
    assert upstream.requests[-1].query == (("alt", "sse"),)


def test_json_array_stream_error_is_an_array_element(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.stream(["a", "b", "c"], error_after=2)

    response = post(gateway, STREAM, json.dumps(BODY))

    chunks = response.json()
    assert len(chunks) == 3
    assert chunks[-1]["error"]["code"] == 502


def test_stream_is_forwarded_chunk_by_chunk(gateway: RunningGateway, upstream: FakeGemini) -> None:
    # The upstream sends the second event only once the client has the first: a gateway
    # that buffered the stream would deliver nothing until the upstream gives up and
    # breaks it off, and "second" would never come.
    release = threading.Event()
    upstream.stream(["first", "second"], hold=release)
    headers = {"x-goog-api-key": gateway.key}

    with (
        gateway.client() as client,
        client.stream(
            "POST", STREAM, params={"alt": "sse"}, json=BODY, headers=headers
        ) as response,
    ):
        lines = response.iter_lines()
        first = next(line for line in lines if line)
        release.set()
        rest = [line for line in lines if line]

    assert "first" in first
    assert "second" in rest[0]


def test_client_disconnect_cancels_the_upstream_stream(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.stream([f"chunk{i}" for i in range(100)], delay_s=0.2)
    headers = {"x-goog-api-key": gateway.key}

    with (
        gateway.client() as client,
        client.stream(
            "POST", STREAM, params={"alt": "sse"}, json=BODY, headers=headers
        ) as response,
    ):
        request_id = response.headers["x-request-id"]
        next(response.iter_lines())

    wait_until(upstream.stream_abandoned.is_set)
    record = gateway.access_record(request_id)
    assert record["status"] == 499
    assert record["error"] == "CANCELLED"


def test_bad_alt_is_refused(gateway: RunningGateway, upstream: FakeGemini) -> None:
    response = post(gateway, STREAM, json.dumps(BODY), params={"alt": "proto"})

    assert response.status_code == 400
    assert "'alt'" in str(error_of(response)["message"])


# -- observability --------------------------------------------------------------------


def test_access_log_has_usage_and_no_secrets(gateway: RunningGateway, upstream: FakeGemini) -> None:
    secret_text = "my phone is 13812345678"
    body = {"contents": [{"parts": [{"text": secret_text}]}]}

    response = post(gateway, GENERATE, json.dumps(body))
    record = gateway.access_record(response.headers["x-request-id"])

    assert record["tenant"] == "acme"
    assert record["key_id"] == gateway.key_id
    assert record["route"] == "generateContent"
    assert record["model"] == "models/gemini-2.5-flash"
    assert record["status"] == 200
    assert record["latency_ms"] > 0
    assert record["usage"] == {
        "prompt_tokens": 8,
        "candidates_tokens": 5,
        "thoughts_tokens": 0,
        "total_tokens": 13,
    }
    log = gateway.settings.access_log_path.read_text()
    assert gateway.key not in log
    assert UPSTREAM_KEY not in log
    assert secret_text not in log


def test_forwarded_client_address_is_believed_only_from_trusted_proxies(
    gateway: RunningGateway, upstream: FakeGemini, tmp_path: Path
) -> None:
    forged = {"x-goog-api-key": gateway.key, "x-forwarded-for": "203.0.113.9"}
    with gateway.client() as client:
        untrusted = client.post(GENERATE, json=BODY, headers=forged)
    assert gateway.access_record(untrusted.headers["x-request-id"])["client"] == "127.0.0.1"

    config = "server:\n  trusted_proxies: ['127.0.0.1']\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as proxied:
        with proxied.client() as client:
            headers = {**forged, "x-goog-api-key": proxied.key}
            response = client.post(GENERATE, json=BODY, headers=headers)
        assert proxied.access_record(response.headers["x-request-id"])["client"] == "203.0.113.9"


def test_in_flight_gauge_counts_open_requests(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    def in_flight(client: httpx.Client) -> float:
        text = client.get("/metrics").text
        line = next(x for x in text.splitlines() if x.startswith("localgate_requests_in_flight "))
        return float(line.split()[1])

    upstream.stream(["first", "second"], delay_s=1.0)
    key = {"x-goog-api-key": gateway.key}
    with gateway.client() as client:
        with client.stream("POST", STREAM + "?alt=sse", json=BODY, headers=key) as streamed:
            lines = streamed.iter_lines()
            assert next(lines).startswith("data: ")  # the first event is in; the second is not
            assert in_flight(client) == 1.0
            assert '"second"' in "".join(lines)
        wait_until(lambda: in_flight(client) == 0.0)


def test_every_response_has_a_request_id(gateway: RunningGateway, upstream: FakeGemini) -> None:
    with gateway.client() as client:
        responses = [client.get("/healthz"), client.get("/nope"), client.post(GENERATE, json=BODY)]

    ids = {response.headers["x-request-id"] for response in responses}
    assert len(ids) == 3
    with gateway.client() as client:
        key = {"x-goog-api-key": gateway.key}
        with client.stream("POST", STREAM + "?alt=sse", json=BODY, headers=key) as streamed:
            assert streamed.status_code == 200
            assert len(streamed.headers["x-request-id"]) == 32


def test_metrics_count_requests_by_route_model_status(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    post(gateway, GENERATE, json.dumps(BODY))
    post(gateway, GENERATE, "not json")

    with gateway.client() as client:
        text = client.get("/metrics").text

    series = 'localgate_requests_total{model="models/gemini-2.5-flash",route="generateContent"'
    assert series + ',status="200"}' in text
    assert series + ',status="400"}' in text
    assert "localgate_request_duration_seconds_bucket{" in text


def test_readyz_when_ready(gateway: RunningGateway) -> None:
    with gateway.client() as client:
        response = client.get("/readyz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    assert body["checks"] == {
        "state_store": "ok",
        "audit_trail": "ok",
        "upstream:default": "ok",
        "config": "ok",
    }
    config = body["config"]
    assert (config["version"], config["reloads"], config["last_reload"]) == (1, 0, None)
    assert len(config["hash"]) == 16


# -- hardening ------------------------------------------------------------------------


def test_upstream_redirects_are_not_followed(gateway: RunningGateway, upstream: FakeGemini) -> None:
    upstream.fail_with(307, "moved", headers={"location": upstream.base_url + "/elsewhere"})

    response = post(gateway, GENERATE, json.dumps(BODY))

    assert response.status_code == 502
    assert "redirect" in str(error_of(response)["message"])
    assert [r.path for r in upstream.requests] == [GENERATE]


def test_upstream_rejecting_the_gateways_key_is_not_blamed_on_the_client(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.fail_with(
        400,
        {
            "error": {
                "code": 400,
                "message": "API key not valid. Please pass a valid API key.",
                "status": "INVALID_ARGUMENT",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                    }
                ],
            }
        },
    )

    response = post(gateway, GENERATE, json.dumps(BODY))

    assert response.status_code == 502
    assert "gateway's own API key" in str(error_of(response)["message"])


def test_non_sse_stream_from_upstream_is_an_error_not_an_empty_answer(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.fail_with(200, [{"candidates": []}])

    response = post(gateway, STREAM, json.dumps(BODY), params={"alt": "sse"})

    event = json.loads(response.text.removeprefix("data: "))
    assert event["error"]["code"] == 502
    assert "not Server-Sent Events" in event["error"]["message"]


def test_dummy_sdk_key_with_a_bearer_localgate_key(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    headers = {"x-goog-api-key": "dummy", "authorization": f"Bearer {gateway.key}"}
    with gateway.client() as client:
        response = client.post(GENERATE, json=BODY, headers=headers)

    assert response.status_code == 200


def test_legacy_integer_enum_request_is_honoured_only_where_safe(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    params = {"$alt": "json;enum-encoding=int"}
    post(gateway, GENERATE, json.dumps(BODY), params=params)
    unary_query = upstream.requests[-1].query
    post(gateway, GENERATE, json.dumps(BODY), params={"$alt": "proto"})
    proto_query = upstream.requests[-1].query
    post(gateway, STREAM, json.dumps(BODY), params=params)
    stream_query = upstream.requests[-1].query

    assert unary_query == (("$alt", "json;enum-encoding=int"),)
    assert proto_query == ()
    assert stream_query == (("alt", "sse"),)


def test_deeply_nested_body_is_refused(gateway: RunningGateway, upstream: FakeGemini) -> None:
    args: dict[str, object] = {}
    for _ in range(300):
        args = {"a": args}
    body = {
        "contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": args}}]}]
    }

    response = post(gateway, GENERATE, json.dumps(body))

    assert response.status_code == 400
    assert "nested deeper than 100" in str(error_of(response)["message"])
    assert upstream.requests == []


def test_both_spellings_of_a_field_are_refused(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    body = {
        **BODY,
        "systemInstruction": {"parts": [{"text": "a"}]},
        "system_instruction": {"parts": [{"text": "b"}]},
    }

    response = post(gateway, GENERATE, json.dumps(body))

    assert response.status_code == 400
    assert "not both" in str(error_of(response)["message"])


def test_anonymous_requests_do_not_name_metric_labels(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    with gateway.client() as client:
        client.post("/v1beta/models/anonymous-junk-model:generateContent", json=BODY)
        text = client.get("/metrics").text

    assert "anonymous-junk-model" not in text


def test_client_vanishing_mid_body_is_logged_as_cancelled(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    host, port = gateway.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as raw:
        raw.sendall(
            f"POST {GENERATE} HTTP/1.1\r\nhost: x\r\nx-goog-api-key: {gateway.key}\r\n"
            'content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"contents"'.encode()
        )

    def logged() -> bool:
        return any(r["status"] == 499 for r in gateway.access_records())

    wait_until(logged)
    assert upstream.requests == []


def test_free_form_headers_and_query_text_do_not_reach_the_upstream(
    gateway: RunningGateway, upstream: FakeGemini
) -> None:
    headers = {
        "x-goog-api-key": gateway.key,
        "user-agent": "app (owner 13812345678)",
        "x-goog-api-client": "li@example.com",
        "x-server-timeout": "30",
    }
    with gateway.client() as client:
        client.post(GENERATE, json=BODY, headers=headers)
        sent = upstream.requests[-1].headers
        client.get(
            "/v1beta/models",
            params={"pageSize": "5", "filter": "owner=13812345678@x", "pageToken": "abc"},
            headers={"x-goog-api-key": gateway.key},
        )

    assert "13812345678" not in str(sent)
    assert "li@example.com" not in str(sent)
    assert sent["x-server-timeout"] == "30"
    assert upstream.requests[-1].query == (("pageSize", "5"), ("pageToken", "abc"))


@pytest.mark.parametrize(
    ("query", "media_type"),
    [("?alt=sse", "text/event-stream; charset=utf-8"), ("", "application/json; charset=UTF-8")],
)
def test_a_stream_answers_with_its_framings_headers(
    gateway: RunningGateway, upstream: FakeGemini, query: str, media_type: str
) -> None:
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as client:
        response = client.post(STREAM + query, json=BODY)
    assert response.status_code == 200
    assert response.headers.get_list("content-type") == [media_type]
    assert response.headers["x-request-id"]
    assert response.headers["x-localgate-upstream"] == "default"
    assert "content-length" not in response.headers
    assert response.headers["transfer-encoding"] == "chunked"
