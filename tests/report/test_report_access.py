"""The report's payload-access section, read from the admin-action trail (`_admin`).

A real gateway serves tenants acme and globex with the admin API beside it; an auditor
decrypts one request of each through the API, and the master key's holder reads through
the CLI (`audit show --decrypt`, `audit export --decrypt`), each with a reason of its own.
Every test works on a copy of that data directory and checks the report against the rows
of the `_admin` log read with sqlite3.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from bs4 import BeautifulSoup
from click.testing import CliRunner, Result

from localgate.admin.audit import AuditAdmin
from localgate.admin.audit_report import ACCESS_RECORDED_SINCE
from localgate.admin.operators import OperatorAdmin, Role
from localgate.adminapi.trail import AdminTrail
from localgate.audit.records import ADMIN_LOG
from localgate.cli import main
from localgate.config import Settings, load_settings
from localgate.testing import FakeGemini
from tests.adminapi.conftest import FakeClock, audited_requests, gateway_and_admin
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

API = "/admin/api/v1"
REASONS = {
    "api-acme": "ticket SEC-1042: customer acme asked what was sent",
    "api-globex": "ticket SEC-2077: globex legal hold",
    "cli-acme": "incident INC-7: acme complaint about an answer",
    "cli-globex": "export for globex DPO review",
}


@dataclass
class Trail:
    """A stopped gateway's data directory after the reads, copied per test."""

    data_dir: Path
    config: Path
    day: str
    request_ids: dict[str, str]
    auditor: str  # the auditor token's actor name in the trail

    def settings(self) -> Settings:
        return load_settings(self.config, {"LOCALGATE_DATA_DIR": str(self.data_dir)})[0]

    def cli(self, *args: str) -> Result:
        command, rest = args[0], args[1:]
        return CliRunner().invoke(
            main,
            ["audit", command, "--config", str(self.config), *rest],
            env={"LOCALGATE_DATA_DIR": str(self.data_dir)},
        )

    def report(
        self, out: Path, tenant: str = "acme", period: tuple[str, str] | None = None
    ) -> Result:
        start, end = period or (self.day, self.day)
        return self.cli(
            "report", "--tenant", tenant, "--from", start, "--to", end, "--out", str(out)
        )

    def admin_headers(self) -> list[dict[str, Any]]:
        """Every header of the `_admin` log, read straight from the database."""
        with sqlite3.connect(self.settings().audit_db_path) as db:
            rows = db.execute(
                "SELECT header FROM audit_log WHERE tenant=? ORDER BY seq", (ADMIN_LOG,)
            ).fetchall()
        return [json.loads(row[0]) for row in rows]


def access(html: str) -> dict[str, Any]:
    """The payload-access section, read from the report's HTML."""
    soup = BeautifulSoup(html, "html.parser")

    def rows(name: str) -> list[list[str]]:
        cells = (
            [cell.get_text(" ", strip=True) for cell in row.select("td")]
            for row in soup.select(f"#{name} tr")
        )
        return [row for row in cells if row]

    figure = {
        str(cell.get("data-figure")): cell.get_text(" ", strip=True)
        for cell in soup.select("[data-figure]")
    }
    none = soup.select_one("#access-none")
    return {
        "trail": figure["admin-trail"],
        "reads": int(figure["payload-reads"]),
        "rows": rows("access-table"),
        "by_actor": {
            (row[0], row[1]): (int(row[2]), int(row[3])) for row in rows("access-by-actor")
        },
        "none": " ".join(none.get_text().split()) if none else None,
    }


@pytest.fixture(scope="module")
def made(fake_upstream: FakeGemini, tmp_path_factory: pytest.TempPathFactory) -> Trail:
    root = tmp_path_factory.mktemp("access")
    fake_upstream.reset()
    with gateway_and_admin(root / "data", fake_upstream.base_url, FakeClock()) as (
        gateway,
        admin_url,
    ):
        settings = gateway.settings
        request_ids, _ = audited_requests(gateway)
        with OperatorAdmin(settings.state_db_path) as operators:
            issued = operators.create_token(Role.AUDITOR, None)
        with httpx.Client(
            base_url=admin_url,
            headers={"authorization": f"Bearer {issued.token.reveal()}"},
            timeout=INFRASTRUCTURE_TIMEOUT_S,
        ) as client:
            auditor = client.get(f"{API}/whoami").json()["name"]
            for tenant in ("acme", "globex"):
                answer = client.post(
                    f"{API}/audit/requests/{request_ids[tenant]}/decrypt",
                    json={"reason": REASONS[f"api-{tenant}"]},
                )
                assert answer.status_code == 200, answer.text
                assert f"Hello from {tenant}" in answer.text
    made = Trail(
        settings.data_dir,
        root / "data-config.yaml",
        day="",
        request_ids=request_ids,
        auditor=auditor,
    )
    shown = made.cli(
        "show",
        "--request-id",
        request_ids["acme"],
        "--decrypt",
        "--reason",
        REASONS["cli-acme"],
    )
    assert shown.exit_code == 0, shown.output
    assert "Hello from acme" in shown.output
    exported = made.cli(
        "export", "--tenant", "globex", "--decrypt", "--reason", REASONS["cli-globex"]
    )
    assert exported.exit_code == 0, exported.output
    assert "Hello from globex" in exported.output
    AuditAdmin(settings).checkpoint()
    made.day = made.admin_headers()[0]["time"][:10]
    return made


@pytest.fixture
def log(made: Trail, tmp_path: Path) -> Trail:
    data = tmp_path / "data"
    shutil.copytree(made.data_dir, data)
    config = tmp_path / "config.yaml"
    config.write_text(made.config.read_text())
    return Trail(data, config, made.day, made.request_ids, made.auditor)


def test_every_read_of_the_tenants_payloads_is_listed_with_who_and_why(
    log: Trail, tmp_path: Path
) -> None:
    out = tmp_path / "acme.html"

    result = log.report(out)
    shown = access(out.read_text())

    assert result.exit_code == 0, result.output
    assert shown["trail"].startswith("OK")
    reads = [
        h
        for h in log.admin_headers()
        if h["action"] in {"audit.decrypt", "audit.export"}
        and "acme" in h["target"].get("tenants", [])
    ]
    assert len(reads) == 2  # the API's and the CLI's, each on record once
    assert shown["reads"] == 2
    by_reason = {row[5]: row for row in shown["rows"]}
    assert set(by_reason) == {REASONS["api-acme"], REASONS["cli-acme"]}
    api = by_reason[REASONS["api-acme"]]
    assert api[1:5] == [
        log.auditor,
        "auditor",
        "audit.decrypt",
        f"request {log.request_ids['acme']}",
    ]
    cli = by_reason[REASONS["cli-acme"]]
    assert cli[1].startswith("os:")
    assert cli[2] == "cli"
    assert [row[0] for row in shown["rows"]] == [h["time"] for h in reads]
    assert shown["by_actor"] == {(log.auditor, "auditor"): (1, 0), (cli[1], "cli"): (1, 0)}
    assert shown["none"] is None
    # Ids and reasons only: never what was read.
    assert "Hello from" not in out.read_text()


def test_another_tenants_reads_stay_in_its_own_report(log: Trail, tmp_path: Path) -> None:
    acme, globex = tmp_path / "acme.html", tmp_path / "globex.html"

    log.report(acme)
    log.report(globex, tenant="globex")

    acme_text, globex_text = acme.read_text(), globex.read_text()
    for reason in (REASONS["api-globex"], REASONS["cli-globex"]):
        assert reason not in acme_text
        assert reason in globex_text
    for reason in (REASONS["api-acme"], REASONS["cli-acme"]):
        assert reason not in globex_text
    assert "whole log(s) of globex" in globex_text
    assert log.request_ids["globex"] not in acme_text


def test_two_runs_give_the_same_section(log: Trail, tmp_path: Path) -> None:
    first, second = tmp_path / "one.html", tmp_path / "two.html"

    log.report(first)
    log.report(second)

    def without_time(path: Path) -> str:
        return re.sub(r'<span id="generated">.*?</span>', "", path.read_text())

    assert without_time(first) == without_time(second)
    assert access(first.read_text())["reads"] == 2


def test_a_period_without_reads_says_none_recorded_and_since_when(
    log: Trail, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"

    result = log.report(out, period=("2020-01-01", "2020-12-31"))
    shown = access(out.read_text())

    assert result.exit_code == 0, result.output
    assert shown["reads"] == 0
    assert shown["rows"] == []
    assert shown["none"] is not None
    assert "None recorded" in shown["none"]
    assert f"since localgate {ACCESS_RECORDED_SINCE}" in shown["none"]


def test_a_tampered_admin_trail_shows_as_failed(log: Trail, tmp_path: Path) -> None:
    # Someone rewrites the reason of the CLI's read after the fact.
    with sqlite3.connect(log.settings().audit_db_path) as db:
        rows = db.execute(
            "SELECT seq, header FROM audit_log WHERE tenant=? ORDER BY seq", (ADMIN_LOG,)
        ).fetchall()
        [(seq, raw)] = [(s, h) for s, h in rows if REASONS["cli-acme"].encode() in h]
        forged = raw.replace(REASONS["cli-acme"].encode(), b"routine maintenance")
        db.execute(
            "UPDATE audit_log SET header=? WHERE tenant=? AND seq=?", (forged, ADMIN_LOG, seq)
        )
    out = tmp_path / "report.html"

    result = log.report(out)
    shown = access(out.read_text())

    assert result.exit_code == 1
    assert "admin-action trail VERIFICATION FAILED" in result.output
    assert shown["trail"].startswith(f"FAILED: record {seq}")
    assert "did not verify" in out.read_text()


def test_a_deleted_read_shows_as_a_failed_trail(log: Trail, tmp_path: Path) -> None:
    # Someone removes the record of the CLI's read, the log's last signed record.
    with sqlite3.connect(log.settings().audit_db_path) as db:
        rows = db.execute(
            "SELECT seq, header FROM audit_log WHERE tenant=? ORDER BY seq", (ADMIN_LOG,)
        ).fetchall()
        [seq] = [s for s, h in rows if REASONS["cli-globex"].encode() in h]
        db.execute("DELETE FROM audit_log WHERE tenant=? AND seq=?", (ADMIN_LOG, seq))
    out = tmp_path / "report.html"

    result = log.report(out, tenant="globex")
    shown = access(out.read_text())

    assert result.exit_code == 1
    assert shown["trail"].startswith("FAILED")
    assert REASONS["cli-globex"] not in out.read_text()


def test_the_cli_decrypts_nothing_without_a_reason(log: Trail) -> None:
    before = log.admin_headers()

    for args in (
        ("show", "--request-id", log.request_ids["acme"], "--decrypt"),
        ("show", "--request-id", log.request_ids["acme"], "--decrypt", "--reason", "   "),
        ("show", "--request-id", log.request_ids["acme"], "--decrypt", "--reason", "why"),
        ("export", "--decrypt"),
        ("export", "--tenant", "acme", "--reason", "a reason without --decrypt"),
    ):
        result = log.cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Hello from" not in result.output
        assert "--reason" in result.output

    assert log.admin_headers() == before


def test_without_the_master_key_nothing_is_read_or_put_on_record(log: Trail) -> None:
    before = log.admin_headers()
    log.settings().audit_master_key_path.unlink()

    result = log.cli(
        "show",
        "--request-id",
        log.request_ids["acme"],
        "--decrypt",
        "--reason",
        "checking a complaint again",
    )

    assert result.exit_code == 1
    assert "nothing was read" in result.output
    assert "Hello from" not in result.output
    assert log.admin_headers() == before


def test_a_failed_read_shows_its_failure_and_counts_once(log: Trail, tmp_path: Path) -> None:
    target = {"request_id": log.request_ids["acme"], "tenants": ["acme"]}
    trail = AdminTrail.open(log.settings(), create_keys=False)
    try:
        trail.record_local("os:mallory@db1", "audit.decrypt", target=target, reason="one more look")
        trail.record_local("os:mallory@db1", "audit.decrypt", target=target, outcome="failed: X")
    finally:
        trail.close()
    out = tmp_path / "report.html"

    result = log.report(out)
    shown = access(out.read_text())

    assert result.exit_code == 0, result.output
    assert shown["reads"] == 3
    assert shown["by_actor"][("os:mallory@db1", "cli")] == (1, 1)
    assert [row[6] for row in shown["rows"] if row[1] == "os:mallory@db1"] == [
        "on record before the read",
        "failed: X",
    ]


def test_a_prompt_search_is_a_recorded_access_without_its_texts(log: Trail, tmp_path: Path) -> None:
    refused = log.cli("find-prompt", "--tenant", "acme", "Hello from acme")
    found = log.cli(
        "find-prompt", "--tenant", "acme", "Hello from acme", "--reason", "case 88: was it sent?"
    )
    acme, globex = tmp_path / "acme.html", tmp_path / "globex.html"
    log.report(acme)
    log.report(globex, tenant="globex")

    assert refused.exit_code == 2
    assert "--reason" in refused.output
    assert found.exit_code == 0, found.output
    assert log.request_ids["acme"] in found.output
    [entry] = [h for h in log.admin_headers() if h["action"] == "audit.find-prompt"]
    assert entry["target"] == {"tenant": "acme", "texts": 1}
    assert "Hello" not in json.dumps(entry)  # the texts compared are not on record
    [row] = [row for row in access(acme.read_text())["rows"] if row[3] == "audit.find-prompt"]
    assert row[4:6] == ["prompts of acme compared with 1 text(s)", "case 88: was it sent?"]
    assert "case 88" not in globex.read_text()
