"""Limits through a running gateway: the 429 a client sees, and the headers on every answer."""

from __future__ import annotations

from pathlib import Path

from localgate.testing import FakeGemini
from tests.conftest import run_gateway

CONFIG = """
tenants:
  acme:
    limits:
      requests_per_minute: 3
      tokens_per_minute: 100000
      default_output_tokens: 1000
"""
HELLO = {"contents": [{"parts": [{"text": "hello"}]}]}


def test_answers_carry_the_limit_headers_and_the_request_past_the_limit_gets_429(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url, config=CONFIG) as gateway:
        first = gateway.generate(HELLO)
        with (
            gateway.client(headers={"x-goog-api-key": gateway.key}) as client,
            client.stream(
                "POST",
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                json=HELLO,
            ) as stream,
        ):
            stream.read()
        third = gateway.generate(HELLO)
        refused = gateway.generate(HELLO)
        sent = len(upstream.requests)

    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "3"
    assert first.headers["x-ratelimit-remaining-requests"] == "2"
    # The first answer's 13 tokens are settled; 2 + 1000 are reserved for the third.
    assert first.headers["x-ratelimit-remaining-tokens"] == str(100000 - 1002)
    assert stream.status_code == 200
    assert stream.headers["x-ratelimit-remaining-requests"] == "1"
    assert third.headers["x-ratelimit-remaining-tokens"] == str(100000 - 13 - 13 - 1002)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert "requests per minute limit of tenant acme" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert sent == 3  # the refused request never left


def test_a_key_of_its_own_is_limited_apart_from_the_tenant(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as probe:
        key_id = probe.key_id
    # The same data directory: the same key, now with a limit of its own.
    config = f"""
tenants:
  acme:
    limits:
      requests_per_minute: 100
      keys:
        {key_id}:
          requests_per_minute: 1
"""
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        with gateway.client(headers={"x-goog-api-key": probe.key}) as client:
            path = "/v1beta/models/gemini-2.5-flash:generateContent"
            statuses = [client.post(path, json=HELLO).status_code for _ in range(2)]
        other = gateway.generate(HELLO)  # the tenant's other key (run_gateway made one)

    assert statuses == [200, 429]
    assert other.status_code == 200
    assert other.headers["x-ratelimit-remaining-requests"] == "98"
