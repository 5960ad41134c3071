"""The console's pages for policies, usage and limits, the cache and retrieval collections,
admin tokens and users, and checkpoints, over HTTP: each per role (allowed and refused), a
tenant-admin kept to its own tenant, changes only with the session's CSRF token and on the
admin-action trail, a new token shown once and working, then revoked and refused."""

from __future__ import annotations

import re
from contextlib import closing

import httpx
import pytest

from localgate.admin.audit import AuditAdmin
from localgate.admin.operators import OperatorAdmin, Role
from localgate.adminapi.console import CONSOLE_CSP, TEXT
from localgate.adminapi.console_pages import PAGE_TEXT
from localgate.secret import Secret
from localgate.testing import FakeGemini
from tests.adminapi.conftest import PASSWORD, AdminApi, FakeClock, gateway_and_admin
from tests.adminapi.test_console import _hidden, console
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

PAGES = [
    "/tenants/acme/policy",
    "/tenants/acme/usage",
    "/cache",
    "/cache/clear",
    "/collections",
    "/collections/handbook/delete",
    "/tokens",
    "/users",
    "/checkpoints",
]
EVERYONE = {"/tenants/acme/policy"}
ALLOWED = {
    Role.ADMIN: EVERYONE
    | {
        "/tenants/acme/usage",
        "/cache",
        "/cache/clear",
        "/collections",
        "/collections/handbook/delete",
        "/tokens",
        "/users",
        "/checkpoints",
    },
    Role.SECURITY: EVERYONE
    | {
        "/tenants/acme/usage",
        "/cache",
        "/cache/clear",
        "/collections",
        "/collections/handbook/delete",
        "/checkpoints",
    },
    Role.AUDITOR: EVERYONE | {"/checkpoints"},
    Role.TENANT_ADMIN: EVERYONE | {"/tenants/acme/usage"},
    Role.VIEWER: EVERYONE | {"/tenants/acme/usage", "/cache", "/collections", "/checkpoints"},
}
# The navigation's links to these pages, per role.
NAV = {
    "/admin/checkpoints": {Role.ADMIN, Role.SECURITY, Role.AUDITOR, Role.VIEWER},
    "/admin/cache": {Role.ADMIN, Role.SECURITY, Role.VIEWER},
    "/admin/collections": {Role.ADMIN, Role.SECURITY, Role.VIEWER},
    "/admin/tokens": {Role.ADMIN},
    "/admin/users": {Role.ADMIN},
}


def _trail(api: AdminApi) -> str:
    """The admin-action trail's records, as the auditor's token reads them."""
    with api.client(Role.AUDITOR) as client:
        answer = client.get(
            "/admin/api/v1/audit/records", params={"tenant": "_admin", "limit": 500}
        )
    assert answer.status_code == 200, answer.text
    return answer.text


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_every_page_per_role_and_its_navigation(admin_api: AdminApi, role: Role) -> None:
    client, _ = console(admin_api, role)
    with closing(client):
        nav = client.get("/admin/").text.split("</nav>")[0]
        for link, roles in NAV.items():
            assert (f'href="{link}"' in nav) == (role in roles), (role, link)
        for page in PAGES:
            answer = client.get("/admin" + page)
            expected = 200 if page in ALLOWED[role] else 403
            assert answer.status_code == expected, (role, page, answer.text[:300])
            assert answer.headers["content-security-policy"] == CONSOLE_CSP
            assert answer.headers["cache-control"] == "no-store"
            assert " style=" not in answer.text
            assert not re.search(r"\son[a-z]+=", answer.text)


def test_a_tenant_admin_cannot_open_another_tenants_policy_or_usage(
    admin_api: AdminApi,
) -> None:
    client, _ = console(admin_api, Role.TENANT_ADMIN)
    with closing(client):
        for page in ("/tenants/globex/policy", "/tenants/globex/usage"):
            answer = client.get("/admin" + page)
            assert answer.status_code == 403, page
            assert "globex" not in answer.text.split('id="main"')[1].replace(page, "")
        acme = client.get("/admin/tenants/acme").text
        assert 'href="/admin/tenants/acme/usage"' in acme
        assert 'href="/admin/tenants/acme/policy"' in acme


def test_the_policy_page_shows_the_effective_policy(admin_api: AdminApi) -> None:
    client, _ = console(admin_api, Role.VIEWER)
    with closing(client):
        page = client.get("/admin/tenants/acme/policy").text
        client.get("/admin/lang/zh")
        chinese = client.get("/admin/tenants/acme/policy").text
    for section in ("redaction", "routing", "limits", "cache", "rag"):
        assert f'id="policy-{section}"' in page
    assert "<code>pseudonymize</code>" in page  # the default action of the default policy
    assert '<span id="allowed-upstreams">any</span>' in page
    assert "<td>default</td>" in page  # where requests no route takes go
    assert "生效策略" in chinese
    assert "不限" in chinese


def test_the_usage_page_shows_what_the_limits_backend_counted(
    fake_upstream: FakeGemini, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fake_upstream.reset()
    limits = "{requests_per_minute: 50, tokens_per_day: 100000, concurrent_requests: 4}"
    servers = gateway_and_admin(
        tmp_path_factory.mktemp("limited"),
        fake_upstream.base_url,
        FakeClock(),
        f"tenants:\n  acme:\n    limits: {limits}\n",
    )
    with servers as (gateway, base_url), httpx.Client(timeout=INFRASTRUCTURE_TIMEOUT_S) as http:
        for _ in range(3):
            answer = http.post(
                gateway.base_url + "/v1beta/models/gemini-2.5-flash:generateContent",
                headers={"x-goog-api-key": gateway.key},
                json={"contents": [{"parts": [{"text": "hi"}]}]},
            )
            assert answer.status_code == 200, answer.text
        with OperatorAdmin(gateway.settings.state_db_path) as operators:
            operators.create_user("owner", Role.TENANT_ADMIN, Secret(PASSWORD), "acme")
            token = operators.create_token(Role.VIEWER).token.reveal()
        counted = http.get(
            base_url + "/admin/api/v1/tenants/acme/limits",
            headers={"authorization": f"Bearer {token}"},
        ).json()
        api = AdminApi(base_url, gateway.settings, FakeClock(), {}, {}, {}, gateway)
        client, _ = console(api, Role.TENANT_ADMIN, name="owner")
        with closing(client):
            page = client.get("/admin/tenants/acme/usage").text

    rows = {row["limit"]: row for row in counted["limits"]}
    assert counted["backend"] == "memory"
    assert (rows["requests_per_minute"]["used"], rows["requests_per_minute"]["value"]) == (3, 50)
    assert 0 < rows["requests_per_minute"]["resets_in_s"] <= 60
    assert rows["tokens_per_day"]["used"] > 0
    assert rows["tokens_per_minute"]["value"] is None
    assert (rows["concurrent_requests"]["used"], rows["concurrent_requests"]["value"]) == (0, 4)
    row = page.split('id="limit-requests_per_minute"')[1].split("</tr>")[0]
    assert '<td class="num">3</td>' in row
    assert '<td class="num">50</td>' in row
    assert '<meter min="0" max="50" value="3">' in row
    day = page.split('id="limit-tokens_per_day"')[1].split("</tr>")[0]
    assert f'<td class="num">{rows["tokens_per_day"]["used"]}</td>' in day
    assert "this process" in page  # which backend counted, and what that means
    assert '<strong id="requests-total">3</strong>' in page


def test_without_limits_nothing_is_counted_and_the_page_says_so(admin_api: AdminApi) -> None:
    client, _ = console(admin_api, Role.VIEWER)
    with closing(client):
        page = client.get("/admin/tenants/acme/usage").text
    row = page.split('id="limit-requests_per_minute"')[1].split("</tr>")[0]
    assert "no limit" in row
    assert 'id="backend"' in page


def test_clearing_the_cache_asks_first_needs_csrf_and_is_on_the_trail(
    admin_api: AdminApi,
) -> None:
    client, csrf = console(admin_api, Role.SECURITY)
    with closing(client):
        confirm = client.get("/admin/cache/clear", params={"tenant": "acme"})
        assert confirm.status_code == 200
        assert 'id="question"' in confirm.text
        assert "acme" in confirm.text
        assert _hidden(confirm.text, "tenant") == "acme"
        refused = client.post("/admin/cache/clear", data={"tenant": "acme"})
        assert refused.status_code == 403
        done = client.post("/admin/cache/clear", data={"tenant": "acme", "csrf": csrf})
        assert done.status_code == 200, done.text
        assert 'id="cleared"' in done.text
    assert "cache.clear" in _trail(admin_api)


def test_deleting_a_collection_that_is_not_there_is_refused_and_recorded(
    admin_api: AdminApi,
) -> None:
    client, csrf = console(admin_api, Role.ADMIN)
    with closing(client):
        confirm = client.get("/admin/collections/nosuch/delete", params={"tenant": "acme"})
        assert _hidden(confirm.text, "tenant") == "acme"
        answer = client.post(
            "/admin/collections/nosuch/delete", data={"tenant": "acme", "csrf": csrf}
        )
        assert answer.status_code == 404, answer.text
        assert 'id="error"' in answer.text
    assert "rag.delete" in _trail(admin_api)


def test_a_token_is_shown_once_works_and_revoked_is_refused(admin_api: AdminApi) -> None:
    client, csrf = console(admin_api, Role.ADMIN)
    with closing(client):
        created = client.post(
            "/admin/tokens",
            data={"csrf": csrf, "role": "admin", "expires": "1d", "label": "console"},
        )
        assert created.status_code == 200, created.text
        token = re.search(r'<output id="new-token" class="secret">([^<]+)</output>', created.text)
        assert token
        token_id = re.search(r'<span id="new-token-id">([0-9a-f]+)</span>', created.text)
        assert token_id
        listed = client.get("/admin/tokens").text
        assert token.group(1) not in listed
        assert f'id="token-{token_id.group(1)}"' in listed

        def whoami() -> int:
            with httpx.Client(base_url=admin_api.base_url) as bearer:
                return bearer.get(
                    "/admin/api/v1/whoami",
                    headers={"authorization": f"Bearer {token.group(1)}"},
                ).status_code

        assert whoami() == 200
        revoked = client.post(f"/admin/tokens/{token_id.group(1)}/revoke", data={"csrf": csrf})
        assert revoked.status_code == 303
        assert whoami() == 401
        # Only roles holding no more than the admin's own permissions are offered, and
        # an auditor's token is refused if asked for anyway.
        assert re.findall(r'<option value="([a-z-]+)"', listed) == ["admin"]
        auditor = client.post("/admin/tokens", data={"csrf": csrf, "role": "auditor"})
        assert auditor.status_code == 403
        # A bad lifetime is refused with the field named.
        bad = client.post("/admin/tokens", data={"csrf": csrf, "role": "admin", "expires": "0d"})
        assert bad.status_code == 400
        assert "expires" in bad.text
    trail = _trail(admin_api)
    assert "token.create" in trail
    assert "token.revoke" in trail
    assert token.group(1) not in trail


def test_a_user_created_in_the_console_logs_in_and_is_disabled(admin_api: AdminApi) -> None:
    client, csrf = console(admin_api, Role.ADMIN)
    with closing(client):
        short = client.post(
            "/admin/users",
            data={"csrf": csrf, "name": "dora", "role": "admin", "password": "short"},
        )
        assert short.status_code == 400
        created = client.post(
            "/admin/users",
            data={"csrf": csrf, "name": "dora", "role": "admin", "password": PASSWORD},
        )
        assert created.status_code == 200, created.text
        assert 'id="user-created"' in created.text
        assert PASSWORD not in created.text
        dora, _ = console(admin_api, Role.ADMIN, name="dora")
        with closing(dora):
            assert dora.get("/admin/users").status_code == 200
            disabled = client.post("/admin/users/dora/disable", data={"csrf": csrf})
            assert disabled.status_code == 303
            assert dora.get("/admin/").headers["location"] == "/admin/login"
    trail = _trail(admin_api)
    assert "user.create" in trail
    assert PASSWORD not in trail


def test_checkpoints_show_size_time_and_signer(admin_api: AdminApi) -> None:
    AuditAdmin(admin_api.settings).checkpoint()
    client, _ = console(admin_api, Role.AUDITOR)
    with closing(client):
        page = client.get("/admin/checkpoints", params={"tenant": "acme"}).text
    with admin_api.client(Role.AUDITOR) as api:
        [*_, latest] = api.get("/admin/api/v1/audit/checkpoints", params={"tenant": "acme"}).json()[
            "checkpoints"
        ]
    assert latest["signers"]
    assert re.fullmatch(r".+\+[0-9a-f]{8}", latest["signers"][0])
    assert latest["time"]
    row = page.split("<tbody>")[1].split("</tr>")[0]
    assert f'<td class="num">{latest["size"]}</td>' in row
    assert f"<code>{latest['signers'][0]}</code>" in row


def test_lists_are_paged_on_the_server(admin_api: AdminApi) -> None:
    with admin_api.operators() as operators:
        for n in range(25):
            operators.create_token(Role.VIEWER, label=f"paging {n}")
    client, _ = console(admin_api, Role.ADMIN)
    with closing(client):
        first = client.get("/admin/tokens").text
        assert 'rel="next"' in first
        second = client.get("/admin/tokens", params={"page": "2"}).text
    rows = re.findall(r'<tr id="token-([0-9a-f]+)"', first)
    assert len(rows) == 20
    assert not set(rows) & set(re.findall(r'<tr id="token-([0-9a-f]+)"', second))


def test_both_languages_have_every_text_and_none_hides_a_dict_method() -> None:
    assert PAGE_TEXT["en"].keys() == PAGE_TEXT["zh"].keys()
    assert not [name for name in PAGE_TEXT["en"] if hasattr(dict, name)]
    assert not set(PAGE_TEXT["en"]) & set(TEXT["en"])
