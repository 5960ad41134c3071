"""OIDC login from the console's login page, against the identity-provider stand-in on
loopback: the page offers it only when OIDC is configured, and a login begun there ends
in a console session (a page that moves the browser on to /admin/), or, refused, in a page
saying why, never in the API's JSON."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from localgate.adminapi.app import create_admin_app
from localgate.adminapi.handoff import CONSOLE_OIDC_COOKIE
from localgate.config import load_settings
from tests.adminapi.test_oidc import CLIENT_ID, REDIRECT, FakeIdentityProvider, idp  # noqa: F401
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S


@pytest.fixture
def console(idp: FakeIdentityProvider, tmp_path: Path) -> Iterator[TestClient]:  # noqa: F811
    idp.claims, idp.signing_key, idp.audience = {}, None, CLIENT_ID
    config = tmp_path / "localgate.yaml"
    config.write_text(
        "admin:\n  oidc:\n    enabled: true\n"
        f"    issuer: {idp.base_url}\n    client_id: {CLIENT_ID}\n    redirect_uri: {REDIRECT}\n"
        "    role_claim: groups\n"
        "    role_map: {lg-auditors: auditor, lg-staff: viewer}\n"
    )
    settings, _ = load_settings(config, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})
    with TestClient(create_admin_app(settings), follow_redirects=False) as client:
        yield client


def _round_trip(console: TestClient) -> Any:
    """The browser: the login page's button, the provider, and back to the callback."""
    page = console.get("/admin/login")
    assert page.status_code == 200
    found = re.search(r'<a href="(/admin/oidc/login)" id="oidc-login"[^>]*>([^<]+)</a>', page.text)
    assert found, page.text
    assert found.group(2).strip() == "Sign in with 127.0.0.1"
    start = console.get(found.group(1))
    assert start.status_code == 302
    cookies = start.headers.get_list("set-cookie")
    assert any(c.startswith(f"{CONSOLE_OIDC_COOKIE}=1;") and "SameSite=Lax" in c for c in cookies)
    with httpx.Client(follow_redirects=False, timeout=INFRASTRUCTURE_TIMEOUT_S) as browser:
        back = browser.get(start.headers["location"])
    assert back.status_code == 302
    callback = urllib.parse.urlsplit(back.headers["location"])
    return console.get(f"{callback.path}?{callback.query}")


def test_a_login_begun_in_the_console_ends_in_a_console_session(
    console: TestClient,
    idp: FakeIdentityProvider,  # noqa: F811
) -> None:
    idp.claims = {"email": "vera@example.com", "groups": ["lg-staff"]}
    assert console.get("/admin/").headers["location"] == "/admin/login"

    answer = _round_trip(console)

    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    assert '<meta http-equiv="refresh" content="0; url=/admin/">' in answer.text
    assert "<script" not in answer.text
    cookies = answer.headers.get_list("set-cookie")
    assert any("lg_admin_session=" in c and "SameSite=Strict" in c for c in cookies)
    assert any(c.startswith(f"{CONSOLE_OIDC_COOKIE}=;") for c in cookies)  # used up
    home = console.get("/admin/")
    assert home.status_code == 200
    assert '<strong id="who">oidc:vera@example.com</strong>' in home.text


def test_a_refused_console_login_says_why_and_leads_back(
    console: TestClient,
    idp: FakeIdentityProvider,  # noqa: F811
) -> None:
    idp.claims = {"email": "mallory@example.com", "groups": ["strangers"]}

    answer = _round_trip(console)

    assert answer.status_code == 403  # no role for these groups
    assert answer.headers["content-type"].startswith("text/html")
    assert 'href="/admin/login"' in answer.text
    assert 'id="error"' in answer.text
    assert "refresh" not in answer.text
    assert console.get("/admin/").headers["location"] == "/admin/login"


def test_the_api_login_still_answers_json(
    console: TestClient,
    idp: FakeIdentityProvider,  # noqa: F811
) -> None:
    idp.claims = {"email": "erin@example.com", "groups": ["lg-auditors"]}
    start = console.get("/admin/api/v1/oidc/login")
    with httpx.Client(follow_redirects=False, timeout=INFRASTRUCTURE_TIMEOUT_S) as browser:
        back = browser.get(start.headers["location"])
    callback = urllib.parse.urlsplit(back.headers["location"])
    answer = console.get(f"{callback.path}?{callback.query}")
    assert answer.status_code == 200
    assert answer.json()["role"] == "auditor"


def test_without_oidc_the_login_page_offers_no_button(tmp_path: Path) -> None:
    config = tmp_path / "localgate.yaml"
    config.write_text("logging:\n  level: warning\n")
    settings, _ = load_settings(config, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})
    with TestClient(create_admin_app(settings), follow_redirects=False) as client:
        assert 'id="oidc-login"' not in client.get("/admin/login").text
        assert client.get("/admin/oidc/login").status_code == 404
