"""The report's figures on both audit stores, and with an anchor, from records written
directly (the live-gateway tests are in test_report.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from localgate.admin.audit import AuditAdmin
from localgate.admin.audit_report import collect
from localgate.admin.audit_report_html import Rendering, render_html
from localgate.audit.crypto import CipherSuite
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditStore
from localgate.audit.trail import database, master_key
from tests.admin.test_audit import LATER, Trail, _trail


def write(
    trail: Trail, tenant: str, requests: list[tuple[str, str, dict[str, dict[str, int]]]]
) -> None:
    """Request and completion records as the audit stage writes them."""
    store = AuditStore(
        database(trail.settings), master_key(trail.settings, create=True), CipherSuite("standard")
    )
    store.start()
    for number, (outcome, model, redaction) in enumerate(requests):
        request_id = f"{tenant}-{number}"
        common = {
            "route": "generateContent",
            "model": model,
            "redaction": redaction,
            "config": "c1",
        }
        if outcome != "blocked by policy":
            store.submit(
                PendingRecord(tenant, "request", request_id, common, payload=b"{}", sent=b"{}")
            ).result(timeout=30)
        fields = {**common, "outcome": outcome, "status": 200 if outcome == "forwarded" else 400}
        if outcome == "forwarded":
            fields["upstream"] = "default"
        store.submit(PendingRecord(tenant, "answer", request_id, fields)).result(timeout=30)
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_figures_on_each_store_with_an_anchor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    with _trail(tmp_path, monkeypatch, backend) as trail:
        write(
            trail,
            "acme",
            [
                ("forwarded", "models/a", {"CN_MOBILE": {"pseudonymize": 2}}),
                ("forwarded", "models/b", {}),
                ("blocked by policy", "models/a", {"CN_RESIDENT_ID": {"block": 1}}),
            ],
        )
        write(trail, "globex", [("forwarded", "models/a", {})])
        admin = AuditAdmin(trail.settings)
        admin.checkpoint()
        now = datetime.now(UTC)

        figures = collect(admin, "acme", now - timedelta(days=1), now + timedelta(days=1))
        admin.shred(LATER)
        shredded = collect(admin, "acme", now - timedelta(days=1), now + timedelta(days=1))

    assert figures.verified
    assert figures.anchor == "OK"
    assert figures.count("outcome") == [("forwarded", 2), ("blocked by policy", 1)]
    assert figures.count("model") == [("models/a", 2), ("models/b", 1)]
    assert figures.redaction() == [("CN_MOBILE", "pseudonymize", 2), ("CN_RESIDENT_ID", "block", 1)]
    assert figures.transfers() == [("CN_MOBILE", 2, 0, 0), ("CN_RESIDENT_ID", 0, 0, 1)]
    assert [r.request_id for r in figures.refused()] == ["acme-2"]
    assert figures.upstream_requests() == 2
    assert figures.retention["payload_keys"] == 1
    assert figures.retention["payload_keys_destroyed"] == 0
    assert figures.retention["requests_readable"] == 2
    assert shredded.retention["payload_keys_destroyed"] == 1
    assert shredded.retention["requests_unreadable"] == 2
    assert all(r.request_id.startswith("acme-") for r in figures.requests)  # no other tenant
    assert figures.checkpoints
    assert figures.checkpoints[-1].size == 5


def test_a_missing_anchor_fails_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _trail(tmp_path, monkeypatch, "sqlite") as trail:
        write(trail, "acme", [("forwarded", "models/a", {})])
        admin = AuditAdmin(trail.settings)
        admin.checkpoint()
        for note in trail.anchor.rglob("*.note"):
            note.unlink()
        for folder in sorted(trail.anchor.rglob("*"), reverse=True):
            folder.rmdir()
        trail.anchor.rmdir()
        now = datetime.now(UTC)

        figures = collect(admin, "acme", now - timedelta(days=1), now + timedelta(days=1))

    assert not figures.verified
    assert figures.anchor.startswith("FAILED")


def test_hostile_values_in_records_are_text_not_markup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whoever writes the database (or a future field) must not put script into the page.
    hostile = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    with _trail(tmp_path, monkeypatch, "sqlite") as trail:
        write(trail, "acme", [("forwarded", hostile, {hostile: {"mask": 1}})])
        admin = AuditAdmin(trail.settings)
        now = datetime.now(UTC)
        figures = collect(admin, "acme", now - timedelta(days=1), now + timedelta(days=1))

    html = render_html(figures, Rendering("localgate audit report", "test", now))

    assert "<script>" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_long_list_of_refusals_is_cut_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _trail(tmp_path, monkeypatch, "sqlite") as trail:
        write(trail, "acme", [("blocked by policy", "models/a", {})] * 3)
        admin = AuditAdmin(trail.settings)
        now = datetime.now(UTC)
        figures = collect(admin, "acme", now - timedelta(days=1), now + timedelta(days=1))
    monkeypatch.setattr("localgate.admin.audit_report_html.REFUSALS_LISTED", 2)

    html = render_html(figures, Rendering("localgate audit report", "test", now))

    table = html.split('id="refused-table"', 1)[1].split("</table>", 1)[0]
    assert table.count("<code>acme-") == 2
    assert "The first 2 of 3" in html
    assert 'data-figure="blocked">3<' in html  # the count is complete
