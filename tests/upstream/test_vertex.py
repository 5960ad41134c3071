"""The Vertex AI upstream offline: a service-account file whose token_uri is a token
endpoint on loopback, and the fake Gemini API as the regional endpoint."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from localgate.errors import Unimplemented, UpstreamCredentialsRejected
from localgate.exchange.replies import UpstreamCall
from localgate.gemini.routes import match_route
from localgate.testing import FakeGemini
from localgate.upstream import GeminiUpstream
from localgate.upstream.gemini import open_session
from localgate.upstream.vertex import ServiceAccountTokens, VertexPaths
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
STREAM = match_route("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent")
EMBED = match_route("POST", "/v1beta/models/text-embedding-004:embedContent")
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
VERTEX_PATH = (
    "/v1/projects/acme-prod/locations/europe-west4/publishers/google/models/gemini-2.5-flash"
)


class TokenEndpoint:
    """An OAuth token endpoint on loopback: grants tokens ``tok-1``, ``tok-2``, ... valid
    for ``expires_in`` seconds, or refuses with ``status``."""

    def __init__(self) -> None:
        self.grants: list[str] = []
        self.expires_in = 3600
        self.status = 200
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"])).decode()
                endpoint.grants.append(body)
                answer: dict[str, Any] = {
                    "access_token": f"tok-{len(endpoint.grants)}",
                    "expires_in": endpoint.expires_in,
                    "token_type": "Bearer",
                }
                if endpoint.status != 200:
                    answer = {"error": "invalid_grant", "error_description": "revoked"}
                raw = json.dumps(answer).encode()
                self.send_response(endpoint.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    endpoint = TokenEndpoint()
    yield endpoint
    endpoint.close()


def service_account_file(directory: Path, token_uri: str) -> Path:
    """A service-account key file as the Cloud console writes it, with a fresh key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path = directory / "service-account.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "acme-prod",
                "private_key_id": "k1",
                "private_key": pem,
                "client_email": "localgate@acme-prod.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": token_uri,
            }
        )
    )
    return path


def run(base_url: str, credentials: Path, steps: Any) -> Any:
    async def main() -> Any:
        session = open_session(4, INFRASTRUCTURE_TIMEOUT_S, INFRASTRUCTURE_TIMEOUT_S)
        tokens = ServiceAccountTokens("vertex", credentials)
        upstream = GeminiUpstream(
            name="vertex",
            base_url=base_url,
            api_key=None,
            session=session,
            read_timeout_s=INFRASTRUCTURE_TIMEOUT_S,
            authorize=tokens.headers,
            path=VertexPaths("vertex", "acme-prod", "europe-west4"),
            not_ready=lambda: tokens.problem,
        )
        try:
            return await steps(upstream)
        finally:
            await session.close()

    return asyncio.run(main())


def test_calls_go_to_the_vertex_path_with_a_service_account_token(
    tmp_path: Path, upstream: FakeGemini, token_endpoint: TokenEndpoint
) -> None:
    credentials = service_account_file(tmp_path, token_endpoint.url)

    async def steps(vertex: GeminiUpstream) -> list[Any]:
        first = await vertex.unary(UpstreamCall(route=GENERATE, body=BODY))
        second = await vertex.unary(UpstreamCall(route=GENERATE, body=BODY))
        return [vertex.ready, first.body, second.body]

    ready, first, _ = run(upstream.base_url, credentials, steps)

    assert ready is None
    assert first["candidates"][0]["content"]["parts"][0]["text"] == "echo: hi"
    assert [r.path for r in upstream.requests] == [f"{VERTEX_PATH}:generateContent"] * 2
    sent = upstream.requests[0].headers
    assert sent["authorization"] == "Bearer tok-1"
    assert "x-goog-api-key" not in sent
    # One grant, reused; google-auth's JWT assertion, signed with the file's key.
    assert len(token_endpoint.grants) == 1
    assert (
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
        in (token_endpoint.grants[0])
    )


def test_a_token_close_to_its_expiry_is_refreshed_before_it_is_used(
    tmp_path: Path, upstream: FakeGemini, token_endpoint: TokenEndpoint
) -> None:
    token_endpoint.expires_in = 120  # inside the five minutes: refreshed every time
    credentials = service_account_file(tmp_path, token_endpoint.url)

    async def steps(vertex: GeminiUpstream) -> None:
        for _ in range(2):
            await vertex.unary(UpstreamCall(route=GENERATE, body=BODY))

    run(upstream.base_url, credentials, steps)

    assert [r.headers["authorization"] for r in upstream.requests] == [
        "Bearer tok-1",
        "Bearer tok-2",
    ]


def test_streams_use_the_vertex_path_too(
    tmp_path: Path, upstream: FakeGemini, token_endpoint: TokenEndpoint
) -> None:
    credentials = service_account_file(tmp_path, token_endpoint.url)

    async def steps(vertex: GeminiUpstream) -> list[Any]:
        reply = await vertex.stream(UpstreamCall(route=STREAM, body=BODY))
        try:
            return [event async for event in reply.events]
        finally:
            await reply.close()

    events = run(upstream.base_url, credentials, steps)

    assert len(events) == 3
    assert upstream.requests[0].path == f"{VERTEX_PATH}:streamGenerateContent"
    assert ("alt", "sse") in upstream.requests[0].query


def test_a_refused_token_is_the_gateways_credentials_problem(
    tmp_path: Path, upstream: FakeGemini, token_endpoint: TokenEndpoint
) -> None:
    token_endpoint.status = 400
    credentials = service_account_file(tmp_path, token_endpoint.url)

    async def steps(vertex: GeminiUpstream) -> None:
        await vertex.unary(UpstreamCall(route=GENERATE, body=BODY))

    with pytest.raises(UpstreamCredentialsRejected, match="'vertex'"):
        run(upstream.base_url, credentials, steps)
    assert upstream.requests == []


def test_routes_vertex_does_not_serve_are_refused_without_sending(
    tmp_path: Path, upstream: FakeGemini, token_endpoint: TokenEndpoint
) -> None:
    credentials = service_account_file(tmp_path, token_endpoint.url)

    async def steps(vertex: GeminiUpstream) -> None:
        await vertex.unary(UpstreamCall(route=EMBED, body={}))

    with pytest.raises(Unimplemented, match="Vertex AI"):
        run(upstream.base_url, credentials, steps)
    assert upstream.requests == []


def test_an_unreadable_credentials_file_makes_the_upstream_not_ready(tmp_path: Path) -> None:
    tokens = ServiceAccountTokens("vertex", tmp_path / "missing.json")

    assert tokens.problem is not None
    assert "missing.json" in tokens.problem
