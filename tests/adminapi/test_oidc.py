"""OIDC login against an identity-provider stand-in on loopback: authorization code with
PKCE, the ID token verified, the role from a claim; and every way a login must fail."""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from localgate.adminapi.app import create_admin_app
from localgate.adminapi.logins import OIDC_COOKIE
from localgate.audit.crypto import MasterKey
from localgate.config import load_settings
from localgate.errors import ConfigError
from tests.audit.conftest import postgres_schema
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, STARTUP_TIMEOUT_S, wait_until

API = "/admin/api/v1"
CLIENT_ID = "localgate-admin"
REDIRECT = "http://testserver/admin/api/v1/oidc/callback"


@dataclass
class FakeIdentityProvider:
    """Discovery, authorize (answers at once for the user the test set), token, keys."""

    base_url: str = ""
    claims: dict[str, Any] = field(default_factory=dict)
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    signing_key: rsa.RSAPrivateKey | None = None  # a different key: a forged token
    audience: str = CLIENT_ID
    codes: dict[str, dict[str, str]] = field(default_factory=dict)

    def app(self) -> Starlette:
        async def discovery(request: Request) -> Response:
            return JSONResponse(
                {
                    "issuer": self.base_url,
                    "authorization_endpoint": f"{self.base_url}/authorize",
                    "token_endpoint": f"{self.base_url}/token",
                    "jwks_uri": f"{self.base_url}/jwks",
                }
            )

        async def authorize(request: Request) -> Response:
            q = request.query_params
            assert q["client_id"] == CLIENT_ID
            assert q["code_challenge_method"] == "S256"
            assert "openid" in q["scope"].split()
            code = secrets.token_urlsafe(16)
            self.codes[code] = {
                "challenge": q["code_challenge"],
                "nonce": q["nonce"],
                "redirect_uri": q["redirect_uri"],
            }
            query = urllib.parse.urlencode({"code": code, "state": q["state"]})
            return RedirectResponse(f"{q['redirect_uri']}?{query}", status_code=302)

        async def token(request: Request) -> Response:
            form = dict(urllib.parse.parse_qsl((await request.body()).decode()))
            grant = self.codes.pop(str(form["code"]), None)  # a code is good once
            verifier = str(form.get("code_verifier", ""))
            challenge = (
                base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
                .rstrip(b"=")
                .decode()
            )
            if (
                grant is None
                or grant["challenge"] != challenge
                or grant["redirect_uri"] != form["redirect_uri"]
            ):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            now = int(time.time())
            claims = {
                "iss": self.base_url,
                "aud": self.audience,
                "sub": "user-123",
                "iat": now,
                "exp": now + 300,
                "nonce": grant["nonce"],
                **self.claims,
            }
            signed = jwt.encode(
                claims, self.signing_key or self.key, algorithm="RS256", headers={"kid": "k1"}
            )
            return JSONResponse({"access_token": "x", "token_type": "Bearer", "id_token": signed})

        async def jwks(request: Request) -> Response:
            public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
            return JSONResponse({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})

        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", discovery),
                Route("/authorize", authorize),
                Route("/token", token, methods=["POST"]),
                Route("/jwks", jwks),
            ]
        )


@pytest.fixture(scope="module")
def idp() -> Iterator[FakeIdentityProvider]:
    provider = FakeIdentityProvider()
    server = uvicorn.Server(
        uvicorn.Config(provider.app(), host="127.0.0.1", port=0, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=STARTUP_TIMEOUT_S)
    provider.base_url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    yield provider
    server.should_exit = True
    thread.join(timeout=INFRASTRUCTURE_TIMEOUT_S)


@pytest.fixture
def admin(idp: FakeIdentityProvider, tmp_path: Path) -> Iterator[TestClient]:
    idp.claims, idp.signing_key, idp.audience = {}, None, CLIENT_ID
    config = tmp_path / "localgate.yaml"
    config.write_text(
        "admin:\n  oidc:\n    enabled: true\n"
        f"    issuer: {idp.base_url}\n    client_id: {CLIENT_ID}\n    redirect_uri: {REDIRECT}\n"
        "    role_claim: groups\n"
        "    role_map: {lg-auditors: auditor, lg-owners: tenant-admin, lg-ops: admin}\n"
    )
    settings, _ = load_settings(config, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})
    with TestClient(create_admin_app(settings), follow_redirects=False) as client:
        yield client


def log_in(client: TestClient) -> Any:
    """The browser's round trip: to the provider, and back with the code."""
    start = client.get(f"{API}/oidc/login")
    assert start.status_code == 302, start.text
    with httpx.Client(follow_redirects=False, timeout=INFRASTRUCTURE_TIMEOUT_S) as browser:
        back = browser.get(start.headers["location"])
    assert back.status_code == 302
    callback = urllib.parse.urlsplit(back.headers["location"])
    return client.get(f"{callback.path}?{callback.query}")


def test_an_auditor_logs_in_with_the_identity_provider(
    admin: TestClient, idp: FakeIdentityProvider
) -> None:
    idp.claims = {"email": "erin@example.com", "groups": ["staff", "lg-auditors"]}

    start = admin.get(f"{API}/oidc/login")
    target = urllib.parse.urlsplit(start.headers["location"])
    params = urllib.parse.parse_qs(target.query)
    assert params["code_challenge_method"] == ["S256"]
    assert params["redirect_uri"] == [REDIRECT]
    assert "SameSite=Lax" in start.headers["set-cookie"]
    answer = log_in(admin)

    assert answer.status_code == 200, answer.text
    assert answer.json()["role"] == "auditor"
    [session] = [c for c in answer.headers.get_list("set-cookie") if "lg_admin_session" in c]
    assert "HttpOnly" in session
    assert "SameSite=Strict" in session
    whoami = admin.get(f"{API}/whoami").json()
    assert whoami == {
        "name": "oidc:erin@example.com",
        "role": "auditor",
        "tenant": None,
        "via": "session",
    }
    # A change with the session needs its CSRF token, as for a password login.
    assert admin.post(f"{API}/audit/checkpoints").status_code == 403


def test_a_tenant_admin_gets_its_tenant_from_the_claim(
    admin: TestClient, idp: FakeIdentityProvider
) -> None:
    idp.claims = {"groups": ["lg-owners"], "lg_tenant": "acme", "email": "o@acme.example"}
    assert log_in(admin).json()["tenant"] == "acme"

    idp.claims = {"groups": ["lg-owners"], "email": "o@acme.example"}
    assert log_in(admin).status_code == 403


@pytest.mark.parametrize("groups", [["staff"], ["lg-auditors", "lg-ops"], "nothing", None], ids=str)
def test_no_role_or_several_roles_are_refused(
    admin: TestClient, idp: FakeIdentityProvider, groups: Any
) -> None:
    idp.claims = {"groups": groups} if groups is not None else {}

    answer = log_in(admin)

    assert answer.status_code == 403
    assert admin.get(f"{API}/whoami").status_code == 401


def test_a_forged_or_misaddressed_id_token_is_refused(
    admin: TestClient, idp: FakeIdentityProvider
) -> None:
    idp.claims = {"groups": ["lg-ops"]}
    idp.signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert log_in(admin).status_code == 401

    idp.signing_key, idp.audience = None, "another-client"
    assert log_in(admin).status_code == 401
    assert admin.get(f"{API}/whoami").status_code == 401


def test_a_callback_not_started_in_this_browser_or_replayed_is_refused(
    admin: TestClient, idp: FakeIdentityProvider
) -> None:
    idp.claims = {"groups": ["lg-ops"]}
    start = admin.get(f"{API}/oidc/login")
    with httpx.Client(follow_redirects=False) as browser:
        back = urllib.parse.urlsplit(browser.get(start.headers["location"]).headers["location"])
    callback = f"{back.path}?{back.query}"

    # Another browser (no state cookie) brings the code: login CSRF.
    with TestClient(admin.app, follow_redirects=False) as other:
        assert other.get(callback).status_code == 401
    # A made-up state, and then the real callback, which works once.
    code = urllib.parse.parse_qs(back.query)["code"][0]
    assert admin.get(f"{API}/oidc/callback", params={"code": code, "state": "x"}).status_code == 401
    assert admin.get(callback).status_code == 200
    assert admin.get(callback).status_code == 401
    # An error from the provider.
    refused = admin.get(f"{API}/oidc/callback", params={"error": "access_denied"})
    assert refused.status_code == 401
    assert "access_denied" in refused.json()["error"]["message"]


def test_without_oidc_configured_its_routes_are_not_found(tmp_path: Path) -> None:
    settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path)})
    with TestClient(create_admin_app(settings), follow_redirects=False) as client:
        assert client.get(f"{API}/oidc/login").status_code == 404
        assert (
            client.get(f"{API}/oidc/callback", params={"code": "c", "state": "s"}).status_code
            == 404
        )


def test_an_enabled_oidc_login_needs_its_provider_client_and_redirect(tmp_path: Path) -> None:
    config = tmp_path / "localgate.yaml"
    config.write_text("admin:\n  oidc:\n    enabled: true\n    client_id: lg\n")

    with pytest.raises(ConfigError) as raised:
        load_settings(config, {"LOCALGATE_DATA_DIR": str(tmp_path)})

    assert raised.value.problems == [
        "admin.oidc: needs issuer, client_id and redirect_uri when enabled"
    ]


def test_with_database_url_a_login_started_on_one_replica_finishes_on_another(
    idp: FakeIdentityProvider, tmp_path: Path
) -> None:
    idp.claims, idp.signing_key, idp.audience = {"groups": ["lg-ops"]}, None, CLIENT_ID
    config = tmp_path / "localgate.yaml"
    config.write_text(
        "admin:\n  oidc:\n    enabled: true\n"
        f"    issuer: {idp.base_url}\n    client_id: {CLIENT_ID}\n    redirect_uri: {REDIRECT}\n"
        "    role_claim: groups\n    role_map: {lg-ops: admin}\n"
    )
    master = MasterKey.generate().reveal()
    with postgres_schema() as dsn, ExitStack() as stack:
        clients = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "audit-master.key").write_text(master)  # shared, as it must be
            env = {"LOCALGATE_DATA_DIR": str(tmp_path / name), "LOCALGATE_DATABASE_URL": dsn}
            app = create_admin_app(load_settings(config, env)[0])
            clients.append(stack.enter_context(TestClient(app, follow_redirects=False)))
        first, second = clients

        start = first.get(f"{API}/oidc/login")
        with httpx.Client(follow_redirects=False, timeout=INFRASTRUCTURE_TIMEOUT_S) as browser:
            back = urllib.parse.urlsplit(browser.get(start.headers["location"]).headers["location"])
        callback = f"{back.path}?{back.query}"
        state_cookie = {"cookie": f"{OIDC_COOKIE}={start.cookies[OIDC_COOKIE]}"}

        # The load balancer sends the provider's redirect to the other replica.
        answer = second.get(callback, headers=state_cookie)
        assert answer.status_code == 200, answer.text
        session = answer.cookies["lg_admin_session"]
        assert (
            first.get(f"{API}/whoami", headers={"cookie": f"lg_admin_session={session}"}).json()[
                "role"
            ]
            == "admin"
        )
        # Used once, on every replica.
        assert first.get(callback, headers=state_cookie).status_code == 401
        assert second.get(callback, headers=state_cookie).status_code == 401
