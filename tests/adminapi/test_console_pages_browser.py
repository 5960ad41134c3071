"""The console's pages in real Chromium (as in test_console_browser): each role logs in and
finds in the navigation exactly its pages, and is refused (403) the others; a tenant-admin
is refused another tenant's pages; an admin creates a token, shown once; the pages for
policies, usage, the cache, retrieval collections, users and checkpoints render under the
strict CSP. And an OIDC login from the login page, with the identity provider on another
site (``localhost``, the console on ``127.0.0.1``), ends signed in to the console.

With LOCALGATE_CONSOLE_SCREENSHOTS=DIR the pages are saved there as PNGs (docs/console.md).
"""

from __future__ import annotations

import html
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route

from localgate.admin.audit import AuditAdmin
from localgate.admin.operators import Role
from localgate.adminapi.app import create_admin_app
from localgate.config import load_settings
from tests.adminapi.conftest import AdminApi
from tests.adminapi.test_console_browser import (  # noqa: F401  (browser: a fixture)
    _log_in,
    _shot,
    _wait,
    browser,
)
from tests.adminapi.test_oidc import CLIENT_ID, FakeIdentityProvider
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, STARTUP_TIMEOUT_S, wait_until

A, S, AU, T, V = Role.ADMIN, Role.SECURITY, Role.AUDITOR, Role.TENANT_ADMIN, Role.VIEWER
# Every page of the navigation, and the roles that see it there (and may open it).
NAVIGATION = {
    "/admin/": {A, S, AU, T, V},
    "/admin/tenants": {A, S, AU, T, V},
    "/admin/audit": {AU},
    "/admin/trail": {AU},
    "/admin/config": {A, S, V},
    "/admin/redact": {A, S},
    "/admin/checkpoints": {A, S, AU, V},
    "/admin/cache": {A, S, V},
    "/admin/collections": {A, S, V},
    "/admin/tokens": {A},
    "/admin/users": {A},
}


def _nav(driver: WebDriver) -> set[str]:
    # Read in one script, once the page has loaded: a page still being replaced after the
    # login left stale elements behind when each link was read on its own (seen in CI).
    hrefs = _wait(driver).until(
        lambda d: d.execute_script(
            "if (document.readyState !== 'complete') return null;"
            "return Array.from(document.querySelectorAll('nav[aria-label=main] a'), a => a.href);"
        )
    )
    return {str(href).removeprefix(_origin(driver)) for href in hrefs}


def _origin(driver: WebDriver) -> str:
    return "/".join(driver.current_url.split("/")[:3])


def _refused(driver: WebDriver, url: str) -> bool:
    """Whether the page at ``url`` answered 403 (as the browser's log reports the status;
    reading the log empties it) and shows the refusal."""
    driver.get(url)
    heading = _wait(driver).until(ec.presence_of_element_located((By.TAG_NAME, "h1"))).text
    log = driver.get_log("browser")  # type: ignore[attr-defined]  # Chrome's, not remote
    status = any(
        entry["message"].startswith(f"{url} - ") and "status of 403" in entry["message"]
        for entry in log
    )
    return status and heading == "Refused (403)" and bool(driver.find_elements(By.ID, "error"))


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_each_role_sees_its_pages_and_is_refused_the_others(
    admin_api: AdminApi,
    browser: WebDriver,  # noqa: F811
    role: Role,
) -> None:
    _log_in(browser, admin_api, role)
    expected = {page for page, roles in NAVIGATION.items() if role in roles}
    assert _nav(browser) == expected
    for page in NAVIGATION.keys() - expected:
        assert _refused(browser, admin_api.base_url + page), (role, page)
    for page in expected:
        browser.get(admin_api.base_url + page)
        heading = _wait(browser).until(ec.presence_of_element_located((By.TAG_NAME, "h1")))
        assert "(403)" not in heading.text, (role, page)
    if role is Role.TENANT_ADMIN:
        for page in ("/admin/tenants/globex", "/admin/tenants/globex/usage"):
            assert _refused(browser, admin_api.base_url + page)
        browser.get(admin_api.base_url + "/admin/tenants/acme")
        _wait(browser).until(ec.element_to_be_clickable((By.ID, "usage-link"))).click()
        _wait(browser).until(ec.presence_of_element_located((By.ID, "limits")))


def test_security_reads_a_policy_usage_and_clears_a_cache(
    admin_api: AdminApi,
    browser: WebDriver,  # noqa: F811
) -> None:
    _log_in(browser, admin_api, Role.SECURITY)
    browser.get(admin_api.base_url + "/admin/tenants/acme")
    _wait(browser).until(ec.element_to_be_clickable((By.ID, "policy-link"))).click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "policy-routing")))
    _shot(browser, "tenant-policy")
    browser.back()
    _wait(browser).until(ec.element_to_be_clickable((By.ID, "usage-link"))).click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "limits")))
    _shot(browser, "tenant-usage")
    browser.find_element(By.LINK_TEXT, "Cache").click()
    _wait(browser).until(ec.element_to_be_clickable((By.ID, "clear-cache"))).click()
    question = _wait(browser).until(ec.presence_of_element_located((By.ID, "question")))
    assert "all tenants" in question.text
    _shot(browser, "cache-clear-confirm")
    browser.find_element(By.ID, "confirm").click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "cleared")))
    _shot(browser, "cache")
    browser.find_element(By.LINK_TEXT, "Retrieval").click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "collections")))


def test_an_admin_creates_a_token_shown_once_and_revokes_it(
    admin_api: AdminApi,
    browser: WebDriver,  # noqa: F811
) -> None:
    _log_in(browser, admin_api, Role.ADMIN)
    browser.find_element(By.LINK_TEXT, "Admin tokens").click()
    _wait(browser).until(ec.element_to_be_clickable((By.ID, "label"))).send_keys("deploy bot")
    browser.find_element(By.ID, "expires").send_keys("30d")
    browser.find_element(By.ID, "create-token").click()
    token = _wait(browser).until(ec.presence_of_element_located((By.ID, "new-token"))).text
    token_id = browser.find_element(By.ID, "new-token-id").text
    assert token.startswith(f"lga_{token_id}_")
    assert token not in browser.current_url
    assert browser.find_element(By.CSS_SELECTOR, "button[data-copy]").is_displayed()
    _shot(browser, "tokens-created")
    with admin_api.client(headers={"authorization": f"Bearer {token}"}) as client:
        assert client.get("/admin/api/v1/whoami").status_code == 200
    browser.find_element(By.ID, f"revoke-token-{token_id}").click()
    _wait(browser).until(ec.alert_is_present()).accept()
    _wait(browser).until(ec.invisibility_of_element_located((By.ID, f"revoke-token-{token_id}")))
    assert token not in browser.page_source  # shown once only
    with admin_api.client(headers={"authorization": f"Bearer {token}"}) as client:
        assert client.get("/admin/api/v1/whoami").status_code == 401
    browser.find_element(By.LINK_TEXT, "Users").click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "users")))
    _shot(browser, "users")


def test_an_auditor_lists_checkpoints_with_signer_key_ids(
    admin_api: AdminApi,
    browser: WebDriver,  # noqa: F811
) -> None:
    AuditAdmin(admin_api.settings).checkpoint()
    _log_in(browser, admin_api, Role.AUDITOR)
    browser.find_element(By.LINK_TEXT, "Checkpoints").click()
    table = _wait(browser).until(ec.presence_of_element_located((By.ID, "checkpoints")))
    assert "acme" in table.text
    assert "+" in table.find_elements(By.TAG_NAME, "code")[0].text  # <name>+<key id>
    _shot(browser, "checkpoints")


# -- OIDC ------------------------------------------------------------------------------


@dataclass
class OidcConsole:
    base_url: str
    idp: FakeIdentityProvider


def _serve(app: object, sock: socket.socket) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=STARTUP_TIMEOUT_S)
    if not server.started:
        raise RuntimeError("a server did not start")
    return server, thread


def _loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def _asking(provider: FakeIdentityProvider) -> Starlette:
    """The stand-in, but asking the user first, as a real provider does: the way back to the
    console then starts on the provider's page (another site), where a redirect would arrive
    without the console's SameSite=Strict session cookie."""

    async def ask(request: Request) -> Response:
        query = html.escape(request.url.query)
        return HTMLResponse(f'<a id="approve" href="/idp/authorize?{query}">Approve</a>')

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)

    return Starlette(
        routes=[
            Route("/favicon.ico", no_icon),
            Route("/authorize", ask),
            Mount("/idp", provider.app()),
            Mount("/", provider.app()),
        ]
    )


@pytest.fixture
def oidc_console(tmp_path: Path) -> Iterator[OidcConsole]:
    """The identity-provider stand-in at http://localhost:<port>, and an admin listener with
    OIDC at http://127.0.0.1:<port>: two sites, as a real provider is to the console."""
    idp_socket, admin_socket = _loopback_socket(), _loopback_socket()
    provider = FakeIdentityProvider(
        base_url=f"http://localhost:{idp_socket.getsockname()[1]}",
        claims={"email": "vera@example.com", "groups": ["lg-staff"]},
    )
    admin_url = f"http://127.0.0.1:{admin_socket.getsockname()[1]}"
    config = tmp_path / "localgate.yaml"
    config.write_text(
        "logging:\n  level: warning\n"
        "admin:\n  oidc:\n    enabled: true\n"
        f"    issuer: {provider.base_url}\n    client_id: {CLIENT_ID}\n"
        f"    redirect_uri: {admin_url}/admin/api/v1/oidc/callback\n"
        "    role_claim: groups\n    role_map: {lg-staff: viewer}\n"
    )
    settings, _ = load_settings(config, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})
    servers = [
        _serve(_asking(provider), idp_socket),
        _serve(create_admin_app(settings, config), admin_socket),
    ]
    try:
        yield OidcConsole(admin_url, provider)
    finally:
        for server, thread in servers:
            server.should_exit = True
            thread.join(timeout=INFRASTRUCTURE_TIMEOUT_S)


def test_oidc_login_from_the_login_page_ends_in_the_console(
    oidc_console: OidcConsole,
    browser: WebDriver,  # noqa: F811
) -> None:
    browser.get(oidc_console.base_url + "/admin/")
    button = _wait(browser).until(ec.element_to_be_clickable((By.ID, "oidc-login")))
    assert button.text == "Sign in with localhost"
    _shot(browser, "login-oidc")
    button.click()
    _wait(browser).until(ec.element_to_be_clickable((By.ID, "approve"))).click()
    who = _wait(browser).until(ec.presence_of_element_located((By.ID, "who")))
    assert who.text == "oidc:vera@example.com"
    assert browser.current_url == oidc_console.base_url + "/admin/"
    assert _nav(browser) == {page for page, roles in NAVIGATION.items() if V in roles}
