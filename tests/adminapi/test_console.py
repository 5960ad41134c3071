"""The web console over HTTP: every page per role (allowed and refused), a tenant-admin kept
to its own tenant, the Content-Security-Policy on every answer, CSRF tokens on every form
(and the login form's own), a new key shown once and never in a URL, a decryption only
with a reason and then listed in the admin-action trail."""

from __future__ import annotations

import re
from contextlib import closing

import httpx
import pytest

from localgate.admin.operators import Role
from localgate.adminapi.console import CONSOLE_CSP, TEXT
from localgate.secret import Secret
from tests.adminapi.conftest import PASSWORD, AdminApi
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S


def _hidden(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no {name} field"
    return found.group(1)


def console(api: AdminApi, role: Role, name: str | None = None) -> tuple[httpx.Client, str]:
    """A browser-like client logged in as ``role``'s user (or ``name``), and its CSRF
    token."""
    client = httpx.Client(base_url=api.base_url, timeout=INFRASTRUCTURE_TIMEOUT_S)
    form = client.get("/admin/login")
    assert form.status_code == 200
    answer = client.post(
        "/admin/login",
        data={
            "login_token": _hidden(form.text, "login_token"),
            "name": name or api.users[role],
            "password": PASSWORD,
        },
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/admin/"
    home = client.get("/admin/")
    assert home.status_code == 200, home.text
    return client, _hidden(home.text, "csrf")


PAGES = [
    "/",
    "/tenants",
    "/tenants/acme",
    "/audit",
    "/audit/requests/{acme}",
    "/audit/report",
    "/trail",
    "/config",
    "/redact",
]
ALLOWED = {
    Role.ADMIN: {"/", "/tenants", "/tenants/acme", "/config", "/redact"},
    Role.SECURITY: {"/", "/tenants", "/tenants/acme", "/config", "/redact"},
    Role.AUDITOR: {
        "/",
        "/tenants",
        "/tenants/acme",
        "/audit",
        "/audit/requests/{acme}",
        "/audit/report",
        "/trail",
    },
    Role.TENANT_ADMIN: {"/", "/tenants", "/tenants/acme"},
    Role.VIEWER: {"/", "/tenants", "/tenants/acme", "/config"},
}


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_every_page_per_role(admin_api: AdminApi, role: Role) -> None:
    client, _ = console(admin_api, role)
    with closing(client):
        for page in PAGES:
            answer = client.get("/admin" + page.format(acme=admin_api.request_ids["acme"]))
            expected = 200 if page in ALLOWED[role] else 403
            assert answer.status_code == expected, (role, page, answer.text[:300])
            assert answer.headers["content-security-policy"] == CONSOLE_CSP
            assert answer.headers["cache-control"] == "no-store"
            assert "text/html" in answer.headers["content-type"]
            if expected == 403:
                assert 'id="error"' in answer.text


def test_pages_need_a_session_and_a_bearer_token_is_not_one(admin_api: AdminApi) -> None:
    with admin_api.client(Role.ADMIN) as client:  # a valid admin token, no session
        for page in PAGES:
            answer = client.get("/admin" + page.format(acme="x"))
            assert answer.status_code == 303, page
            assert answer.headers["location"] == "/admin/login"
        forged = client.post("/admin/tenants/acme/keys", data={"csrf": "x", "label": "l"})
        assert forged.status_code == 303
    client = httpx.Client(base_url=admin_api.base_url, cookies={"lg_admin_session": "forged"})
    with closing(client):
        assert client.get("/admin/").headers["location"] == "/admin/login"


def test_csp_forbids_inline_script_and_the_pages_use_none(admin_api: AdminApi) -> None:
    assert "script-src 'self'" in CONSOLE_CSP
    assert "unsafe-inline" not in CONSOLE_CSP
    assert "frame-ancestors 'none'" in CONSOLE_CSP
    client, _ = console(admin_api, Role.AUDITOR)
    with closing(client):
        for page in ["/login", "/", "/audit", "/audit/requests/" + admin_api.request_ids["acme"]]:
            html = client.get("/admin" + page).text
            assert re.findall(r"<script[^>]*>", html) == [
                '<script src="/admin/static/console.js" defer>'
            ]
            assert " style=" not in html
            assert "<style" not in html
            assert not re.search(r"\son[a-z]+=", html)  # no inline event handlers
        for name, media in (("console.js", "text/javascript"), ("console.css", "text/css")):
            static = client.get(f"/admin/static/{name}")
            assert static.status_code == 200
            assert static.headers["content-type"].startswith(media)
            assert static.headers["content-security-policy"] == CONSOLE_CSP
        assert client.get("/admin/static/..%2Fconsole.py").status_code == 404
        assert client.get("/admin/static/console.py").status_code == 404


def test_login_needs_the_forms_own_token_and_a_right_password(admin_api: AdminApi) -> None:
    name = admin_api.users[Role.SECURITY]
    with httpx.Client(base_url=admin_api.base_url) as client:
        # A page elsewhere cannot log this browser in: it has no token for the cookie.
        answer = client.post("/admin/login", data={"name": name, "password": PASSWORD})
        assert answer.status_code == 403
        assert "lg_admin_session" not in answer.headers.get("set-cookie", "")
        form = client.get("/admin/login")
        wrong = client.post(
            "/admin/login",
            data={"login_token": _hidden(form.text, "login_token"), "name": name, "password": "x"},
        )
        assert wrong.status_code == 401
        assert "lg_admin_session=" not in wrong.headers.get("set-cookie", "")
        assert PASSWORD not in wrong.text
        assert "password=" not in str(wrong.url)


def test_forms_refuse_a_missing_or_wrong_csrf_token(admin_api: AdminApi) -> None:
    client, csrf = console(admin_api, Role.SECURITY)
    acme = admin_api.key_ids["acme"]
    with closing(client):
        for token in (None, "", csrf[:-1] + ("A" if csrf[-1] != "A" else "B")):
            data = {"label": "csrf-test"} | ({"csrf": token} if token is not None else {})
            assert client.post("/admin/tenants/acme/keys", data=data).status_code == 403
            revoke = {} if token is None else {"csrf": token}
            answer = client.post(f"/admin/tenants/acme/keys/{acme}/revoke", data=revoke)
            assert answer.status_code == 403
            assert client.post("/admin/logout", data=revoke).status_code == 403
        page = client.get("/admin/tenants/acme").text
        assert "csrf-test" not in page
        assert f"revoke-{acme}" in page  # still active
        assert client.get("/admin/").status_code == 200  # still logged in
        # A JSON body is not a form.
        answer = client.post("/admin/tenants/acme/keys", json={"csrf": csrf, "label": "j"})
        assert answer.status_code == 400
    auditor, _ = console(admin_api, Role.AUDITOR)
    with closing(auditor):
        request_id = admin_api.request_ids["acme"]
        answer = auditor.post(
            f"/admin/audit/requests/{request_id}/decrypt", data={"reason": "no token at all"}
        )
        assert answer.status_code == 403
        assert "Hello from acme" not in answer.text


def test_a_new_key_is_shown_once_and_revoking_it_refuses_the_data_plane(
    admin_api: AdminApi,
) -> None:
    client, csrf = console(admin_api, Role.SECURITY)
    with closing(client):
        created = client.post("/admin/tenants/globex/keys", data={"csrf": csrf, "label": "once"})
        assert created.status_code == 200
        assert created.headers["cache-control"] == "no-store"
        key = re.search(r'<output id="new-key" class="secret">([^<]+)</output>', created.text)
        key_id = re.search(r'<span id="new-key-id">([^<]+)</span>', created.text)
        assert key
        assert key_id
        assert key.group(1) not in str(created.url)
        again = client.get("/admin/tenants/globex").text
        assert key.group(1) not in again
        assert key_id.group(1) in again

        def generate() -> int:
            with admin_api.gateway.client(headers={"x-goog-api-key": key.group(1)}) as gateway:
                return gateway.post(
                    "/v1beta/models/gemini-2.5-flash:generateContent",
                    json={"contents": [{"parts": [{"text": "hi"}]}]},
                ).status_code

        assert generate() == 200
        revoked = client.post(
            f"/admin/tenants/globex/keys/{key_id.group(1)}/revoke", data={"csrf": csrf}
        )
        assert revoked.status_code == 303
        assert revoked.headers["location"] == "/admin/tenants/globex"
        assert generate() in (401, 403)


def test_a_tenant_admin_sees_and_changes_only_its_own_tenant(admin_api: AdminApi) -> None:
    client, csrf = console(admin_api, Role.TENANT_ADMIN)
    globex = admin_api.key_ids["globex"]
    with closing(client):
        tenants = client.get("/admin/tenants").text
        assert "/admin/tenants/acme" in tenants
        assert "globex" not in tenants
        assert "globex" not in client.get("/admin/").text
        assert client.get("/admin/tenants/globex").status_code == 403
        assert (
            client.post("/admin/tenants/globex/keys", data={"csrf": csrf, "label": "x"}).status_code
            == 403
        )
        # Another tenant's key, through its own tenant's page or the other's.
        assert (
            client.post(
                f"/admin/tenants/acme/keys/{globex}/revoke", data={"csrf": csrf}
            ).status_code
            == 404
        )
        assert (
            client.post(
                f"/admin/tenants/globex/keys/{globex}/revoke", data={"csrf": csrf}
            ).status_code
            == 403
        )
    keys = admin_api.gateway.keys()
    try:
        assert not next(k for k in keys.list("globex") if k.key_id == globex).revoked_at
    finally:
        keys.close()


def test_decrypting_needs_a_reason_and_shows_in_the_admin_trail(admin_api: AdminApi) -> None:
    request_id = admin_api.request_ids["acme"]
    client, csrf = console(admin_api, Role.AUDITOR)
    with closing(client):
        search = client.get("/admin/audit", params={"tenant": "acme"})
        assert f'href="/admin/audit/requests/{request_id}"' in search.text
        record = client.get(f"/admin/audit/requests/{request_id}")
        assert 'id="decrypt"' in record.text
        assert "Hello from acme" not in record.text
        short = client.post(
            f"/admin/audit/requests/{request_id}/decrypt", data={"csrf": csrf, "reason": "why"}
        )
        assert short.status_code == 400
        assert "Hello from acme" not in short.text
        reason = "console test: case 4711"
        opened = client.post(
            f"/admin/audit/requests/{request_id}/decrypt", data={"csrf": csrf, "reason": reason}
        )
        assert opened.status_code == 200, opened.text
        assert "Hello from acme" in opened.text
        assert opened.headers["cache-control"] == "no-store"
        trail = client.get("/admin/trail").text
        while reason not in trail and 'id="next"' in trail:
            following = re.search(r'href="(\?[^"]+)" rel="next"', trail)
            assert following
            trail = client.get("/admin/trail" + following.group(1).replace("&amp;", "&")).text
        assert reason in trail
        assert "audit.decrypt" in trail
    # Viewers and security officers see no decrypt form and cannot post one.
    for role in (Role.SECURITY, Role.VIEWER):
        other, token = console(admin_api, role)
        with closing(other):
            answer = other.post(
                f"/admin/audit/requests/{request_id}/decrypt",
                data={"csrf": token, "reason": "I am curious, really"},
            )
            assert answer.status_code == 403
            assert "Hello from acme" not in answer.text


def test_audit_search_pages_server_side(admin_api: AdminApi) -> None:
    client, _ = console(admin_api, Role.AUDITOR)
    with closing(client):
        first = client.get("/admin/audit").text
        ids = re.findall(r'<td class="num">(\d+)</td>', first)
        assert ids
        bad = client.get("/admin/audit", params={"since": "yesterday"})
        assert bad.status_code == 400
        assert "since" in bad.text


def test_configuration_page_and_reload(admin_api: AdminApi) -> None:
    client, csrf = console(admin_api, Role.ADMIN)
    with closing(client):
        page = client.get("/admin/config").text
        assert 'id="config-hash"' in page
        assert 'id="reload"' in page
        assert client.post("/admin/config/reload", data={}).status_code == 403
        answer = client.post("/admin/config/reload", data={"csrf": csrf})
        assert answer.status_code == 200
        assert 'id="reloaded"' in answer.text
    viewer, token = console(admin_api, Role.VIEWER)
    with closing(viewer):
        assert 'id="reload"' not in viewer.get("/admin/config").text
        assert viewer.post("/admin/config/reload", data={"csrf": token}).status_code == 403


def test_chinese_and_english(admin_api: AdminApi) -> None:
    client, _csrf = console(admin_api, Role.VIEWER)
    with closing(client):
        assert "Overview" in client.get("/admin/").text
        switched = client.get("/admin/lang/zh")
        assert switched.status_code == 303
        page = client.get("/admin/").text
        assert "概览" in page
        assert 'lang="zh-CN"' in page
        client.get("/admin/lang/en")
        assert "Overview" in client.get("/admin/").text


def test_logout_ends_the_session(admin_api: AdminApi) -> None:
    client, csrf = console(admin_api, Role.VIEWER)
    with closing(client):
        cookie = client.cookies["lg_admin_session"]
        answer = client.post("/admin/logout", data={"csrf": csrf})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/admin/login"
    with httpx.Client(base_url=admin_api.base_url, cookies={"lg_admin_session": cookie}) as old:
        assert old.get("/admin/").headers["location"] == "/admin/login"


def test_both_languages_have_every_text_and_none_hides_a_dict_method() -> None:
    assert TEXT["en"].keys() == TEXT["zh"].keys()
    # Jinja looks up t.name as an attribute first: t.keys would print a method.
    assert not [name for name in TEXT["en"] if hasattr(dict, name)]


def test_the_keys_table_is_headed_in_each_language(admin_api: AdminApi) -> None:
    client, _ = console(admin_api, Role.SECURITY)
    with closing(client):
        assert "<h2>Keys</h2>" in client.get("/admin/tenants/acme").text
        client.get("/admin/lang/zh")
        assert "<h2>密钥</h2>" in client.get("/admin/tenants/acme").text


def test_the_redaction_playground_shows_what_would_be_sent(admin_api: AdminApi) -> None:
    text = "请联系张伟，手机 13800138000，邮箱 zhang.wei@example.com"
    client, csrf = console(admin_api, Role.SECURITY)
    with closing(client):
        assert client.post("/admin/redact", data={"text": text}).status_code == 403
        answer = client.post("/admin/redact", data={"csrf": csrf, "text": text, "tenant": "acme"})
        assert answer.status_code == 200
        assert text not in str(answer.url)
        sent = re.search(r'<pre id="sent">([^<]*)</pre>', answer.text)
        assert sent
        assert "13800138000" not in sent.group(1)
        assert "CN_MOBILE" in answer.text
        assert "EMAIL" in answer.text
    auditor, token = console(admin_api, Role.AUDITOR)
    with closing(auditor):
        refused = auditor.post("/admin/redact", data={"csrf": token, "text": text})
        assert refused.status_code == 403
        assert "13800138000" not in refused.text


def test_markup_in_labels_and_search_fields_is_shown_as_text(admin_api: AdminApi) -> None:
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    client, csrf = console(admin_api, Role.SECURITY)
    with closing(client):
        created = client.post("/admin/tenants/acme/keys", data={"csrf": csrf, "label": evil})
        assert created.status_code == 200
        for page in (created.text, client.get("/admin/tenants/acme").text):
            assert evil not in page
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    auditor, _ = console(admin_api, Role.AUDITOR)
    with closing(auditor):
        page = auditor.get("/admin/audit", params={"model": evil}).text
        assert evil not in page
        assert "<img src=x" not in page


def test_a_disabled_user_is_logged_out_of_the_console(admin_api: AdminApi) -> None:
    with admin_api.operators() as operators:
        operators.create_user("console-leaver", Role.VIEWER, Secret(PASSWORD))
    client, _ = console(admin_api, Role.VIEWER, name="console-leaver")
    with closing(client):
        assert client.get("/admin/tenants").status_code == 200
        with admin_api.operators() as operators:
            operators.disable_user("console-leaver")
        answer = client.get("/admin/tenants")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/admin/login"
