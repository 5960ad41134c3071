"""What the admin API shows of, and does to, the gateway beside it: upstreams and their
circuit breakers, the running configuration, a reload and a rejected one."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from localgate.admin.operators import OperatorAdmin, Role
from localgate.adminapi.app import create_admin_app
from localgate.adminapi.trail import ADMIN_LOG
from localgate.config import load_settings
from tests.adminapi.conftest import AdminApi

API = "/admin/api/v1"


def test_upstreams_and_their_circuits(admin_api: AdminApi) -> None:
    with admin_api.client(Role.VIEWER) as client:
        answer = client.get(f"{API}/upstreams")

    assert answer.status_code == 200, answer.text
    [default] = [u for u in answer.json()["upstreams"] if u["name"] == "default"]
    assert default == {"name": "default", "local": False, "ready": None, "circuit": "closed"}


def test_a_reload_through_the_api_is_applied_or_rejected_and_on_record(
    admin_api: AdminApi,
) -> None:
    config = admin_api.settings.data_dir.parent / f"{admin_api.settings.data_dir.name}-config.yaml"
    good = config.read_text()
    with admin_api.client(Role.ADMIN) as client:
        before = client.get(f"{API}/config").json()
        assert before["running"] is True
        try:
            config.write_text(
                good + "tenants:\n  acme:\n    redaction:\n      detect_names: false\n"
            )
            applied = client.post(f"{API}/config/reload")
            config.write_text(good + "server:\n  max_body_bytes: -1\n")
            rejected = client.post(f"{API}/config/reload")
        finally:
            config.write_text(good)
        after = client.get(f"{API}/config").json()
    with admin_api.client(Role.AUDITOR) as client:
        trail = client.get(
            f"{API}/audit/records", params={"tenant": ADMIN_LOG, "limit": 500}
        ).json()["records"]

    assert applied.status_code == 200, applied.text
    assert applied.json()["applied"] is True
    assert applied.json()["version"] == before["version"] + 1
    assert applied.json()["hash"] != before["hash"]
    assert rejected.json()["applied"] is False
    assert any("server.max_body_bytes" in p for p in rejected.json()["problems"])
    assert after["version"] == applied.json()["version"]  # the rejected file changed nothing
    assert after["last_reload"]["problems"] == rejected.json()["problems"]
    outcomes = [r["header"]["outcome"] for r in trail if r["header"]["action"] == "config.reload"]
    assert outcomes[-3:] == ["attempted", "attempted", "rejected"]


def test_without_a_gateway_in_the_process_they_say_so(tmp_path: Path) -> None:
    # The fixture's admin API is linked to its gateway; this one stands alone.
    settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path / "d")})
    with OperatorAdmin(settings.state_db_path) as operators:
        token = operators.create_token(Role.ADMIN).token.reveal()
    with TestClient(create_admin_app(settings)) as client:
        headers = {"authorization": f"Bearer {token}"}
        upstreams = client.get(f"{API}/upstreams", headers=headers)
        reload = client.post(f"{API}/config/reload", headers=headers)
        config = client.get(f"{API}/config", headers=headers)

    assert upstreams.status_code == reload.status_code == 400
    assert "No gateway runs in this process" in upstreams.json()["error"]["message"]
    assert config.json()["running"] is False
