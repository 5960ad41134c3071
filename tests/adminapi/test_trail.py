"""The admin-action trail: decryptions and changes on record with who, what and why, before
they happen; a log `localgate audit verify` checks, so tampering with it shows."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner
from starlette.testclient import TestClient

from localgate.admin.audit import AuditAdmin
from localgate.admin.operators import Operator, OperatorAdmin, Role
from localgate.adminapi.app import create_admin_app
from localgate.adminapi.trail import ADMIN_LOG, AdminTrail
from localgate.audit.trail import signer
from localgate.cli import main
from localgate.config import load_settings
from tests.adminapi.conftest import AdminApi

API = "/admin/api/v1"


def trail(api: AdminApi, action: str) -> list[dict[str, Any]]:
    with api.client(Role.AUDITOR) as client:
        answer = client.get(
            f"{API}/audit/records", params={"tenant": ADMIN_LOG, "kind": "admin", "limit": 500}
        )
    assert answer.status_code == 200, answer.text
    return [r["header"] for r in answer.json()["records"] if r["header"]["action"] == action]


def test_a_decryption_is_on_record_with_its_reason(admin_api: AdminApi) -> None:
    request_id = admin_api.request_ids["acme"]
    reason = "ticket SEC-1042: customer asked what was sent"
    with admin_api.client(Role.AUDITOR) as client:
        whoami = client.get(f"{API}/whoami").json()
        answer = client.post(
            f"{API}/audit/requests/{request_id}/decrypt",
            json={"reason": reason},
            headers={"x-request-id": "decrypt-test-1"},
        )

    assert answer.status_code == 200, answer.text
    texts = [r["payload"] for r in answer.json()["records"] if r["payload"]]
    assert "Hello from acme" in orjson.dumps(texts).decode()
    [entry] = [h for h in trail(admin_api, "audit.decrypt") if h["reason"] == reason]
    assert entry["actor"] == whoami["name"]
    assert entry["role"] == "auditor"
    assert entry["target"] == {"request_id": request_id, "tenants": ["acme"]}
    assert entry["request_id"] == "decrypt-test-1"
    assert entry["time"]
    assert "Hello" not in orjson.dumps(entry).decode()  # the trail holds no payload


def test_a_decryption_needs_a_reason_and_the_auditor_role(admin_api: AdminApi) -> None:
    request_id = admin_api.request_ids["globex"]
    before = len(trail(admin_api, "audit.decrypt"))
    url = f"{API}/audit/requests/{request_id}/decrypt"

    with admin_api.client(Role.AUDITOR) as client:
        no_body = client.post(url)
        no_reason = client.post(url, json={})
        too_short = client.post(url, json={"reason": "x"})
    with admin_api.client(Role.SECURITY) as client:
        not_auditor = client.post(url, json={"reason": "a perfectly good reason"})

    assert [no_body.status_code, no_reason.status_code, too_short.status_code] == [400] * 3
    assert not_auditor.status_code == 403
    assert "Hello" not in no_body.text + no_reason.text + too_short.text + not_auditor.text
    assert len(trail(admin_api, "audit.decrypt")) == before


def test_a_key_revoked_through_the_api_is_refused_by_the_gateway_and_on_record(
    admin_api: AdminApi,
) -> None:
    gateway = admin_api.gateway
    with admin_api.client(Role.SECURITY) as client:
        created = client.post(f"{API}/tenants/acme/keys", json={"label": "short-lived"}).json()
        assert gateway_status(admin_api, created["key"]) == 200
        assert client.delete(f"{API}/keys/{created['key_id']}").status_code == 200

    assert gateway_status(admin_api, created["key"]) == 403
    assert gateway.base_url
    revocations = trail(admin_api, "key.revoke")
    assert {"tenant": "acme", "key_id": created["key_id"]} in [r["target"] for r in revocations]
    creations = [r["target"] for r in trail(admin_api, "key.create")]
    assert {"tenant": "acme", "label": "short-lived"} in creations


def gateway_status(api: AdminApi, key: str) -> int:
    with api.gateway.client(headers={"x-goog-api-key": key}) as client:
        return client.post(
            "/v1beta/models/gemini-2.5-flash:generateContent",
            json={"contents": [{"parts": [{"text": "hi"}]}]},
        ).status_code


def test_the_trail_verifies_and_tampering_with_it_is_detected(tmp_path: Path) -> None:
    settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path)})
    auditor = Operator("user:erin", Role.AUDITOR, None)

    async def write() -> None:
        admin_trail = AdminTrail.open(settings)
        try:
            for number in range(3):
                await admin_trail.record(
                    auditor, "audit.decrypt", target={"n": number}, reason=f"case {number}"
                )
        finally:
            admin_trail.close()

    asyncio.run(write())
    signer(settings, create=True)  # as the gateway's first start makes it
    audit = AuditAdmin(settings)
    audit.checkpoint()
    runner = CliRunner()
    env = {"LOCALGATE_DATA_DIR": str(tmp_path)}
    assert runner.invoke(main, ["audit", "verify"], env=env).exit_code == 0
    [report] = [r for r in audit.verify().reports if r.tenant == ADMIN_LOG]
    assert report.ok
    assert report.records == 3

    # Someone with the database rewrites why a payload was read.
    with sqlite3.connect(settings.audit_db_path) as db:
        raw = db.execute(
            "SELECT header FROM audit_log WHERE tenant=? AND seq=1", (ADMIN_LOG,)
        ).fetchone()[0]
        forged = bytes(raw).replace(b"case 1", b"audit")
        db.execute("UPDATE audit_log SET header=? WHERE tenant=? AND seq=1", (forged, ADMIN_LOG))

    [report] = [r for r in audit.verify().reports if r.tenant == ADMIN_LOG]
    assert not report.ok
    assert report.problem is not None
    assert report.problem.seq == 1
    result = runner.invoke(main, ["audit", "verify"], env=env)
    assert result.exit_code != 0
    assert ADMIN_LOG in result.output


def test_deleting_the_last_trail_record_is_detected(tmp_path: Path) -> None:
    settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path)})
    operator = Operator("token:0123456789abcdef", Role.SECURITY, None)

    async def write() -> None:
        admin_trail = AdminTrail.open(settings)
        try:
            for key in ("a", "b"):
                await admin_trail.record(operator, "key.revoke", target={"key_id": key})
        finally:
            admin_trail.close()

    asyncio.run(write())
    with sqlite3.connect(settings.audit_db_path) as db:
        db.execute("DELETE FROM audit_log WHERE tenant=? AND seq=1", (ADMIN_LOG,))

    [report] = [r for r in AuditAdmin(settings).verify().reports if r.tenant == ADMIN_LOG]
    assert not report.ok


def test_an_action_the_trail_cannot_record_is_not_performed(tmp_path: Path) -> None:
    settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path)})
    with OperatorAdmin(settings.state_db_path) as operators:
        token = operators.create_token(Role.SECURITY).token.reveal()
    headers = {"authorization": f"Bearer {token}"}
    with TestClient(create_admin_app(settings)) as client:
        services = client.app_state["services"]
        services.trail.close()  # the audit writer stops: nothing more can be recorded

        answer = client.post(f"{API}/tenants/acme/keys", json={"label": "x"}, headers=headers)
        keys = client.get(f"{API}/tenants/acme/keys", headers=headers)

    assert answer.status_code == 503
    assert answer.json()["error"]["status"] == "UNAVAILABLE"
    assert keys.json()["keys"] == []
