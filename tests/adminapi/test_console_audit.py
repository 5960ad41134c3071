"""The console's audit downloads and jobs over HTTP: a record's proof bundle (which the CLI
accepts), verification in the background with the overview showing its state, and the
auditor's report of a tenant and period, on record in the admin-action trail."""

from __future__ import annotations

import json
import re
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from localgate.admin.audit import AuditAdmin
from localgate.admin.operators import Role
from localgate.adminapi.console import TEXT, _environment
from localgate.adminapi.models import VerifyJobOut
from localgate.adminapi.permissions import Permission
from localgate.adminapi.trail import ADMIN_LOG
from localgate.cli import main
from tests.adminapi.conftest import AdminApi
from tests.adminapi.test_console import console
from tests.conftest import wait_until

API = "/admin/api/v1"


def _admin_actions(api: AdminApi, action: str) -> list[dict[str, Any]]:
    with api.client(Role.AUDITOR) as client:
        answer = client.get(
            f"{API}/audit/records", params={"tenant": ADMIN_LOG, "kind": "admin", "limit": 500}
        )
    assert answer.status_code == 200, answer.text
    return [r["header"] for r in answer.json()["records"] if r["header"]["action"] == action]


def test_the_record_page_offers_the_bundle_which_the_cli_accepts(
    admin_api: AdminApi, tmp_path: Path
) -> None:
    request_id = admin_api.request_ids["acme"]
    audit = AuditAdmin(admin_api.settings)
    audit.checkpoint()
    key = audit.verifier_key()
    client, _ = console(admin_api, Role.AUDITOR)
    with closing(client):
        page = client.get(f"/admin/audit/requests/{request_id}").text
        bundle = client.get(f"/admin/audit/requests/{request_id}/proof.json?kind=answer")
        missing = client.get(
            "/admin/audit/requests/no-such-request/proof.json",
            headers={"accept": "application/json"},
        )
        missing_page = client.get("/admin/audit/requests/no-such-request/proof.json")

    assert f'href="/admin/audit/requests/{request_id}/proof.json?kind=request"' in page
    assert f'id="verifier-key-id">{key.split("+")[1]}<' in page
    assert key in page  # the published key, in the field the check uses
    assert bundle.status_code == 200, bundle.text
    assert bundle.headers["content-disposition"] == (
        f'attachment; filename="proof-{request_id}-answer.json"'
    )
    assert bundle.headers["cache-control"] == "no-store"
    assert "Hello from acme" not in bundle.text
    saved = tmp_path / "bundle.json"
    saved.write_text(bundle.text)
    checked = CliRunner().invoke(main, ["audit", "check-proof", str(saved), "--key", key])
    assert checked.exit_code == 0, checked.output
    assert checked.output.startswith("OK: answer record")
    # A script asking for JSON gets the API's envelope; a browser, the error page.
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == "NOT_FOUND"
    assert missing_page.status_code == 404
    assert missing_page.headers["content-type"].startswith("text/html")


def test_only_the_auditor_downloads_a_bundle(admin_api: AdminApi) -> None:
    request_id = admin_api.request_ids["acme"]
    for role in (Role.VIEWER, Role.SECURITY, Role.ADMIN, Role.TENANT_ADMIN):
        client, _ = console(admin_api, role)
        with closing(client):
            answer = client.get(f"/admin/audit/requests/{request_id}/proof.json")
        assert answer.status_code == 403, role
        assert '"header"' not in answer.text


def test_the_overview_verifies_in_the_background_and_shows_when(admin_api: AdminApi) -> None:
    client, csrf = console(admin_api, Role.VIEWER)  # its overview started a verification
    with closing(client):
        first = client.get("/admin/").text
        assert 'id="verification"' in first
        assert 'id="verify-progress"' in first or 'id="verified-at"' in first

        def done() -> bool:
            job = client.get(f"{API}/audit/verify/job").json()
            return bool(job["state"] == "done")

        wait_until(done)
        shown = client.get("/admin/").text
        refused = client.post("/admin/audit/verify", data={})
        again = client.post("/admin/audit/verify", data={"csrf": csrf}, follow_redirects=False)
        wait_until(done)

    assert re.search(r'id="audit-health" class="ok">verified<', shown)
    assert 'id="verified-at"' in shown
    assert "user-viewer" in shown  # who started it
    assert 'id="verify-now"' in shown
    assert refused.status_code == 403
    assert again.status_code == 303
    assert again.headers["location"] == "/admin/"
    assert _admin_actions(admin_api, "audit.verify")


def test_the_auditor_downloads_the_report_and_it_is_on_record(admin_api: AdminApi) -> None:
    client, csrf = console(admin_api, Role.AUDITOR)
    form = {"csrf": csrf, "tenant": "acme", "from": "2000-01-01", "to": "2099-12-31"}
    with closing(client):
        page = client.get("/admin/audit/report")
        report = client.post("/admin/audit/report", data={**form, "format": "html"})
        no_token = client.post("/admin/audit/report", data={**form, "csrf": ""})
        empty = client.post("/admin/audit/report", data={**form, "to": "1999-01-01"})
        unknown = client.post("/admin/audit/report", data={**form, "tenant": "nobody"})
    viewer, token = console(admin_api, Role.VIEWER)
    with closing(viewer):
        refused = viewer.post("/admin/audit/report", data={**form, "csrf": token})

    assert page.status_code == 200
    assert 'id="report-tenant"' in page.text
    assert report.status_code == 200, report.text
    assert report.headers["content-type"].startswith("text/html")
    assert report.headers["content-disposition"] == (
        'attachment; filename="audit-report-acme-2000-01-01-2100-01-01.html"'
    )
    assert admin_api.request_ids["acme"] in report.text or "acme" in report.text
    assert "Hello from acme" not in report.text  # counts, ids and hashes only
    assert no_token.status_code == 403
    assert empty.status_code == 400
    assert unknown.status_code == 404
    assert refused.status_code == 403
    recorded = [
        h for h in _admin_actions(admin_api, "audit.report") if h["actor"] == "user:user-auditor"
    ]
    assert {"tenant": "acme", "from": "2000-01-01", "to": "2099-12-31", "format": "html"} in [
        h["target"] for h in recorded
    ]
    assert all(json.dumps(h).find("Hello") < 0 for h in recorded)


def test_a_record_no_checkpoint_covers_yet_can_be_signed_from_its_page(
    admin_api: AdminApi,
) -> None:
    gateway = admin_api.gateway
    with gateway.client(headers={"x-goog-api-key": gateway.key}) as data_plane:
        answer = data_plane.post(
            "/v1beta/models/gemini-2.5-flash:generateContent",
            json={"contents": [{"parts": [{"text": "a fresh request"}]}]},
        )
    request_id = answer.headers["x-request-id"]
    gateway.audit_headers(request_id)
    client, csrf = console(admin_api, Role.AUDITOR)
    with closing(client):
        before = client.get(f"/admin/audit/requests/{request_id}").text
        signed = client.post(
            "/admin/audit/checkpoints", data={"csrf": csrf, "request_id": request_id}
        )
        after = client.get(signed.headers["location"]).text
    viewer, token = console(admin_api, Role.VIEWER)
    with closing(viewer):
        refused = viewer.post("/admin/audit/checkpoints", data={"csrf": token})

    # Unless the gateway's own checkpointer signed in between (every 60 s), no proof yet.
    if "data-proof-url" not in before:
        assert 'id="sign-request"' in before
        assert "No signed checkpoint covers this record yet" in before
    assert signed.status_code == 303
    assert signed.headers["location"] == f"/admin/audit/requests/{request_id}"
    assert f'data-proof-url="/admin/audit/requests/{request_id}/proof.json?kind=request"' in after
    assert 'id="sign-request"' not in after
    assert refused.status_code == 403


def test_a_running_verification_shows_its_progress_without_script() -> None:
    job = VerifyJobOut(
        state="running",
        tenant=None,
        started_by="user:alice",
        started_at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        finished_at=None,
        checked=1234,
        total=5000,
        result=None,
        error=None,
    )
    pages = {
        lang: _environment.get_template("overview.html.j2").render(
            t=TEXT[lang],
            lang=lang,
            operator=None,
            csrf="token",
            may=lambda permission: True,
            P=Permission,
            path="/admin/",
            usage=[],
            job=job,
            health=None,
        )
        for lang in TEXT
    }

    english = pages["en"]
    assert 'data-state="running"' in english
    assert (
        '<progress id="verify-progress" aria-labelledby="verify-count" max="5000" value="1234">'
        in english
    )
    assert "1234 of 5000 records checked" in english
    assert 'role="status"' in english
    assert 'href="/admin/" id="verify-refresh"' in english  # reloading shows how far it is
    assert 'id="verify-now"' not in english  # one at a time
    assert "已检查 1234 / 5000 条记录" in pages["zh"]
    assert "正在验证" in pages["zh"]
