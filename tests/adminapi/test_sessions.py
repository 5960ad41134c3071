"""Console sessions: the cookie's flags, CSRF tokens on changes, login throttling and
expiry (on the clock the admin API was given), logout, disabled users."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from localgate.admin.operators import OperatorAdmin, Role
from localgate.adminapi.app import create_admin_app
from localgate.config import load_settings
from localgate.secret import Secret
from tests.adminapi.conftest import PASSWORD, AdminApi

API = "/admin/api/v1"


def login(client: httpx.Client, name: str, password: str = PASSWORD) -> httpx.Response:
    return client.post(f"{API}/session", json={"name": name, "password": password})


@pytest.fixture
def browser(admin_api: AdminApi) -> Iterator[httpx.Client]:
    with admin_api.client() as client:
        yield client


def test_a_login_sets_a_strict_http_only_cookie_and_no_secret_in_the_body(
    admin_api: AdminApi, browser: httpx.Client
) -> None:
    answer = login(browser, admin_api.users[Role.SECURITY])

    assert answer.status_code == 200, answer.text
    cookie = answer.headers["set-cookie"]
    flags = [part.strip() for part in cookie.split(";")]
    assert flags[0].startswith("lg_admin_session=")
    assert {"HttpOnly", "SameSite=Strict", "Path=/admin/", "Max-Age=28800"} <= set(flags)
    assert "Secure" not in flags  # plain HTTP here; see the HTTPS test
    session_id = flags[0].split("=", 1)[1]
    assert session_id not in answer.text
    assert answer.json()["role"] == "security"
    assert answer.headers["cache-control"] == "no-store"
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    assert browser.get(f"{API}/whoami").json()["via"] == "session"


def test_the_cookie_is_secure_over_https(tmp_path: Path) -> None:
    settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path)})
    with OperatorAdmin(settings.state_db_path) as operators:
        operators.create_user("carol", Role.VIEWER, Secret(PASSWORD))
    app = create_admin_app(settings)
    with TestClient(app, base_url="https://admin.example") as client:
        answer = client.post(f"{API}/session", json={"name": "carol", "password": PASSWORD})

    assert answer.status_code == 200
    assert "Secure" in [part.strip() for part in answer.headers["set-cookie"].split(";")]


def test_a_change_made_with_a_session_needs_its_csrf_token(
    admin_api: AdminApi, browser: httpx.Client
) -> None:
    csrf = login(browser, admin_api.users[Role.SECURITY]).json()["csrf_token"]
    body = {"label": "csrf test"}

    without = browser.post(f"{API}/tenants/acme/keys", json=body)
    wrong = browser.post(
        f"{API}/tenants/acme/keys", json=body, headers={"x-csrf-token": csrf[:-1] + "x"}
    )
    with_it = browser.post(f"{API}/tenants/acme/keys", json=body, headers={"x-csrf-token": csrf})

    assert without.status_code == 403
    assert "CSRF" in without.json()["error"]["message"]
    assert wrong.status_code == 403
    assert with_it.status_code == 200, with_it.text
    # Reading needs no CSRF token.
    assert browser.get(f"{API}/tenants/acme/keys").status_code == 200
    # Nor can the token of another session stand in.
    with httpx.Client(base_url=admin_api.base_url) as other:
        other_csrf = login(other, admin_api.users[Role.SECURITY]).json()["csrf_token"]
    stolen = browser.post(
        f"{API}/tenants/acme/keys", json=body, headers={"x-csrf-token": other_csrf}
    )
    assert stolen.status_code == 403


def test_failed_logins_are_throttled_per_user_and_address(
    admin_api: AdminApi, browser: httpx.Client
) -> None:
    name = admin_api.users[Role.VIEWER]
    for _ in range(5):
        assert login(browser, name, "wrong password!").status_code == 401

    refused = login(browser, name)  # the right password, but too late
    other_user = login(browser, admin_api.users[Role.AUDITOR])

    assert refused.status_code == 429
    assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert 0 < int(refused.headers["retry-after"]) <= 900
    assert other_user.status_code == 200
    admin_api.clock.now += 901
    assert login(browser, name).status_code == 200


def test_a_wrong_password_and_an_unknown_user_answer_alike(
    admin_api: AdminApi, browser: httpx.Client
) -> None:
    wrong = login(browser, admin_api.users[Role.ADMIN], "not the password")
    unknown = login(browser, "nobody-at-all", "not the password")

    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()


def test_a_session_expires(admin_api: AdminApi, browser: httpx.Client) -> None:
    login(browser, admin_api.users[Role.ADMIN])
    assert browser.get(f"{API}/whoami").status_code == 200

    admin_api.clock.now += admin_api.settings.admin.session_ttl_s + 1

    answer = browser.get(f"{API}/whoami")
    assert answer.status_code == 401
    assert answer.json()["error"]["status"] == "UNAUTHENTICATED"


def test_logout_ends_the_session(admin_api: AdminApi, browser: httpx.Client) -> None:
    csrf = login(browser, admin_api.users[Role.ADMIN]).json()["csrf_token"]
    session = browser.cookies["lg_admin_session"]

    assert browser.delete(f"{API}/session", headers={"x-csrf-token": csrf}).status_code == 200

    with httpx.Client(base_url=admin_api.base_url) as replay:
        replay.cookies.set("lg_admin_session", session)
        assert replay.get(f"{API}/whoami").status_code == 401


def test_a_disabled_user_loses_their_session(admin_api: AdminApi) -> None:
    with admin_api.operators() as operators:
        operators.create_user("dave", Role.SECURITY, Secret(PASSWORD))
    with admin_api.client() as browser:
        login(browser, "dave")
        assert browser.get(f"{API}/whoami").status_code == 200

        with admin_api.client(Role.ADMIN) as admin:
            assert admin.delete(f"{API}/users/dave").status_code == 200

        assert browser.get(f"{API}/whoami").status_code == 401
        assert login(browser, "dave").status_code == 401


def test_expired_and_revoked_tokens_are_refused(admin_api: AdminApi) -> None:
    with admin_api.operators() as operators:
        expired = operators.create_token(Role.ADMIN, expires_in=None)
        operators.revoke_token(expired.token_id)
        short = OperatorAdmin(
            admin_api.settings.state_db_path,
            now=lambda: datetime(2000, 1, 1, tzinfo=UTC),
        )
        with short:
            old = short.create_token(Role.ADMIN, expires_in=timedelta(days=30))
    for token in (expired.token.reveal(), old.token.reveal()):
        with admin_api.client(headers={"authorization": f"Bearer {token}"}) as client:
            assert client.get(f"{API}/whoami").status_code == 401
