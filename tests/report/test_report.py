"""The auditor's report (`localgate audit report`) on a log made by real traffic.

One gateway (its own data directory, the exact cache on, ID numbers blocked) serves
forwarded, cached, blocked and failed requests carrying phone and ID numbers; the
gateway is then stopped, a checkpoint signed, and each test works on a copy of its data
directory. Every figure checked is recomputed here from the audit database's rows with
sqlite3, not through the report's code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup
from click.testing import CliRunner, Result
from pypdf import PdfReader

from localgate.admin.audit import AuditAdmin
from localgate.cli import main
from localgate.config import Settings, load_settings
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, run_gateway, wait_until

CONFIG = """
cache:
  enabled: true
proxy:
  redaction:
    actions: {CN_RESIDENT_ID: block}
"""
CHANGED = "    default_action: mask\n"
PHONES = ("13812345678", "13900001111", "15987654321")
ID_NUMBER = "110101199003074514"
PROMPT_WORDS = "话费余额"
LATER = datetime(2031, 6, 1, tzinfo=UTC)  # past every retention period of today's records
IN_CI = os.environ.get("CI") == "true"


@dataclass
class Log:
    """A stopped gateway's data directory and configuration, copied per test."""

    data_dir: Path
    config: Path
    day: str  # the UTC day of the traffic

    def settings(self) -> Settings:
        return load_settings(self.config, {"LOCALGATE_DATA_DIR": str(self.data_dir)})[0]

    def report(self, out: Path, *extra: str, period: tuple[str, str] | None = None) -> Result:
        start, end = period or (self.day, self.day)
        return CliRunner().invoke(
            main,
            [
                "audit",
                "report",
                "--config",
                str(self.config),
                "--tenant",
                "acme",
                "--from",
                start,
                "--to",
                end,
                "--out",
                str(out),
                *extra,
            ],
            env={"LOCALGATE_DATA_DIR": str(self.data_dir)},
        )

    def headers(self) -> list[dict[str, Any]]:
        """Every header of tenant acme, read straight from the database."""
        with sqlite3.connect(self.settings().audit_db_path) as db:
            rows = db.execute(
                "SELECT header FROM audit_log WHERE tenant='acme' ORDER BY seq"
            ).fetchall()
        return [json.loads(row[0]) for row in rows if row[0] is not None]


def ask(text: str) -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": text}]}],
        "generationConfig": {"temperature": 0},
    }


@pytest.fixture(scope="module")
def made(fake_upstream: FakeGemini, tmp_path_factory: pytest.TempPathFactory) -> Log:
    """The log of real traffic: forwarded, cached, blocked, failed; then a checkpoint."""
    root = tmp_path_factory.mktemp("report")
    fake_upstream.reset()
    with run_gateway(root / "data", fake_upstream.base_url, config=CONFIG) as gateway:
        day = datetime.now(UTC).date().isoformat()
        for phone in PHONES[:2]:
            assert (
                gateway.generate(ask(f"客户手机{phone}，请问{PROMPT_WORDS}多少？")).status_code
                == 200
            )

        def cached() -> bool:
            # The answer is stored after it is sent: ask again until the cache answers.
            response = gateway.generate(ask(f"客户手机{PHONES[2]}，请问{PROMPT_WORDS}多少？"))
            return str(response.headers.get("x-localgate-cache", "")).startswith("hit")

        wait_until(cached)
        blocked = gateway.generate(ask(f"身份证{ID_NUMBER}，请办理"))
        assert blocked.status_code == 400
        fake_upstream.fail_with(500, {"error": {"code": 500, "message": "x", "status": "INTERNAL"}})
        failed = gateway.generate(ask(f"手机{PHONES[0]}再试一次"))
        assert failed.status_code >= 500
        fake_upstream.reset()
    # A restart with another policy: the records name a second configuration.
    with run_gateway(root / "data", fake_upstream.base_url, config=CONFIG + CHANGED) as gateway:
        assert gateway.generate(ask("customer mail a.b@example.com")).status_code == 200
        settings = gateway.settings
        config = root / "data-config.yaml"
    AuditAdmin(settings).checkpoint()
    return Log(settings.data_dir, config, day)


@pytest.fixture
def log(made: Log, tmp_path: Path) -> Log:
    """A copy of the log this test may shred, purge or tamper with."""
    data = tmp_path / "data"
    shutil.copytree(made.data_dir, data)
    config = tmp_path / "config.yaml"
    config.write_text(made.config.read_text())
    return Log(data, config, made.day)


def figures(html: str) -> dict[str, Any]:
    """The report's figures, read from its HTML."""
    soup = BeautifulSoup(html, "html.parser")

    def rows(name: str) -> list[list[str]]:
        cells = (
            [cell.get_text() for cell in row.select("td")] for row in soup.select(f"#{name} tr")
        )
        return [row for row in cells if row]

    return {
        "figure": {
            str(cell.get("data-figure")): cell.get_text(" ", strip=True)
            for cell in soup.select("[data-figure]")
        },
        **{
            name: {row[0]: int(row[-1]) for row in rows(name)}
            for name in ("by-outcome", "by-model", "by-route", "by-upstream", "config-table")
        },
        "redaction": Counter({(row[0], row[1]): int(row[2]) for row in rows("redaction-table")}),
        "refused": sorted(row[0] for row in rows("refused-table")),
    }


def without_generation_time(html: str) -> str:
    return re.sub(r'<span id="generated">.*?</span>', "", html)


def test_the_figures_are_the_trails(log: Log, tmp_path: Path) -> None:
    out = tmp_path / "report.html"

    result = log.report(out)
    shown = figures(out.read_text())

    assert result.exit_code == 0, result.output
    headers = log.headers()
    answers = {h["request_id"]: h for h in headers if h["kind"] == "answer"}
    requests = {h["request_id"]: h for h in headers if h["kind"] == "request"}
    ids = set(answers) | set(requests)
    outcomes = Counter(answers[i]["outcome"] if i in answers else "?" for i in ids)
    # Every kind of request the fixture made is in the log, each counted as the trail says.
    assert {"forwarded", "served from cache", "blocked by policy", "upstream error"} <= set(
        outcomes
    )
    assert shown["by-outcome"] == dict(outcomes)
    assert shown["figure"]["requests"] == str(len(ids))
    first = {i: requests.get(i) or answers[i] for i in ids}
    assert shown["by-model"] == dict(Counter(h["model"] for h in first.values()))
    assert shown["by-route"] == dict(Counter(h["route"] for h in first.values()))
    upstreams = Counter(
        answers[i].get("upstream") or ("local" if answers[i].get("served_from") else "-")
        for i in ids
    )
    assert shown["by-upstream"] == dict(upstreams)
    assert shown["figure"]["upstream"] == str(sum("sent_digest" in h for h in requests.values()))
    findings: Counter[tuple[str, str]] = Counter()
    for header in first.values():
        for kind, actions in header["redaction"].items():
            for action, number in actions.items():
                findings[(kind, action)] += number
    assert shown["redaction"] == findings
    assert ("CN_RESIDENT_ID", "block") in findings
    assert shown["refused"] == sorted(
        i for i in ids if answers[i]["outcome"] == "blocked by policy"
    )
    assert shown["figure"]["verification"] == "OK"
    configs = list(dict.fromkeys(h["config"] for h in sorted(first.values(), key=_time)))
    assert len(configs) == 2  # the restart with another policy
    assert shown["config-table"] == {
        config: sum(h["config"] == config for h in first.values()) for config in configs
    }
    assert list(shown["config-table"]) == configs  # in the order first seen


def _time(header: dict[str, Any]) -> str:
    return str(header["time"])


def test_the_page_names_its_chinese_fonts_in_css_that_parses(log: Log, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    log.report(out)

    style = out.read_text().split("<style>", 1)[1].split("</style>", 1)[0]

    assert '"WenQuanYi Zen Hei"' in style
    assert '"Noto Sans CJK SC"' in style
    assert "&#34;" not in style  # HTML escapes are not decoded in CSS
    assert "&quot;" not in style


def test_a_period_without_the_traffic_counts_none_of_it(log: Log, tmp_path: Path) -> None:
    out = tmp_path / "report.html"

    result = log.report(out, period=("2020-01-01", "2020-12-31"))

    assert result.exit_code == 0, result.output
    assert figures(out.read_text())["figure"]["requests"] == "0"


def test_two_runs_give_the_same_document(log: Log, tmp_path: Path) -> None:
    first, second = tmp_path / "one.html", tmp_path / "two.html"

    log.report(first)
    log.report(second)

    assert without_generation_time(first.read_text()) == without_generation_time(second.read_text())
    assert "<svg" in "".join(  # the charts are there, drawn the same both times
        __import__("base64").b64decode(src.split(",", 1)[1]).decode()
        for src in re.findall(r'src="(data:image/svg\+xml;base64,[^"]+)"', first.read_text())
    )


def test_nothing_personal_is_in_the_report(log: Log, tmp_path: Path) -> None:
    html, pdf = tmp_path / "report.html", tmp_path / "report.pdf"

    log.report(html)
    made_pdf = log.report(pdf)
    texts = [html.read_text(), "".join(page.extract_text() for page in PdfReader(pdf).pages)]

    assert made_pdf.exit_code == 0, made_pdf.output
    for text in texts:
        for secret in (*PHONES, ID_NUMBER, PROMPT_WORDS, "再试一次", "a.b@example.com"):
            assert secret not in text
        assert "CN_MOBILE" in text  # the types are there, the values are not
    # Not even the client's address or the end-user and prompt HMACs.
    headers = log.headers()
    for header in headers:
        for field in ("prompt_hmac", "user_hmac", "sent_digest", "client"):
            if header.get(field):
                assert str(header[field]) not in texts[0]


def test_a_tampered_log_shows_as_failed(log: Log, tmp_path: Path) -> None:
    with sqlite3.connect(log.settings().audit_db_path) as db:
        (raw,) = db.execute("SELECT header FROM audit_log WHERE tenant='acme' AND seq=1").fetchone()
        forged = raw.replace(b'"forwarded"', b'"blocked by policy"')
        assert forged != raw
        db.execute("UPDATE audit_log SET header=? WHERE tenant='acme' AND seq=1", (forged,))
    out = tmp_path / "report.html"

    result = log.report(out)
    shown = figures(out.read_text())

    assert result.exit_code == 1  # as `audit verify`; the report is written all the same
    assert "VERIFICATION FAILED" in result.output
    assert shown["figure"]["verification"].startswith("FAILED: record 1: modified")
    assert "验证失败 FAILED" in out.read_text()


def test_shredded_and_purged_periods_show_their_keys_and_signed_markers(
    log: Log, tmp_path: Path
) -> None:
    admin = AuditAdmin(log.settings())
    destroyed = admin.shred(LATER)
    shredded = tmp_path / "shredded.html"
    log.report(shredded)
    admin.purge(LATER)
    purged = tmp_path / "purged.html"
    log.report(purged)

    after_shred = figures(shredded.read_text())["figure"]
    with sqlite3.connect(log.settings().audit_db_path) as db:
        keys = db.execute(
            "SELECT key_id FROM audit_keys WHERE tenant='acme' AND purpose='payload'"
        ).fetchall()
        markers = db.execute(
            "SELECT header FROM audit_log WHERE tenant='acme' AND kind='purge'"
        ).fetchall()
        erased = db.execute(
            "SELECT count(*) FROM audit_log WHERE tenant='acme' AND header IS NULL"
        ).fetchone()[0]
    assert destroyed
    assert after_shred["payload_keys_destroyed"] == str(len(keys))
    assert after_shred["requests_readable"] == "0"
    assert int(after_shred["requests_unreadable"]) > 0
    after_purge = purged.read_text()
    assert figures(after_purge)["figure"]["metadata_purged"] == str(erased)
    assert erased > 0
    note = json.loads(markers[0][0])["note"]
    assert note.splitlines()[0] in after_purge  # the signed marker, quoted
    assert re.search(r'signature\s*<span class="ok">valid</span>', after_purge)


def test_a_bad_period_is_refused_clearly(log: Log, tmp_path: Path) -> None:
    result = log.report(tmp_path / "r.html", period=("2026-12-31", "2026-01-01"))

    assert result.exit_code == 2
    assert "the period is empty" in result.output
    assert not (tmp_path / "r.html").exists()


def test_an_unknown_tenant_is_refused_not_reported_empty(log: Log, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        main,
        [
            "audit",
            "report",
            "--config",
            str(log.config),
            "--tenant",
            "acmee",
            "--from",
            log.day,
            "--to",
            log.day,
            "--out",
            str(out),
        ],
        env={"LOCALGATE_DATA_DIR": str(log.data_dir)},
    )

    assert result.exit_code == 1
    assert "knows no tenant 'acmee' (tenants: acme)" in result.output
    assert not out.exists()


def test_a_deleted_tenant_is_reported_as_failed_not_unknown(log: Log, tmp_path: Path) -> None:
    with sqlite3.connect(log.settings().audit_db_path) as db:
        for table in ("audit_log", "audit_frontier", "audit_checkpoints"):
            db.execute(f"DELETE FROM {table} WHERE tenant='acme'")  # noqa: S608 - fixed names
    out = tmp_path / "r.html"

    result = log.report(out)

    assert result.exit_code == 1
    assert figures(out.read_text())["figure"]["verification"].startswith("FAILED")


def _tool(name: str, *others: str) -> str:
    found = next((path for path in map(shutil.which, (name, *others)) if path), None)
    if found is None:
        if IN_CI:
            pytest.fail(f"{name} is missing; `make tools` installs it")
        pytest.skip(f"{name} is not installed (`make tools`)")
    return found


def test_the_html_opens_in_chromium_and_the_pdf_converts_to_images(
    log: Log, tmp_path: Path
) -> None:
    chromium = _tool("chromium", "chromium-browser", "google-chrome")
    pdftoppm = _tool("pdftoppm")
    html, pdf = tmp_path / "report.html", tmp_path / "report.pdf"
    log.report(html)
    log.report(pdf)
    shot = tmp_path / "report.png"

    subprocess.run(  # noqa: S603 - fixed arguments
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1100,2400",
            html.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=INFRASTRUCTURE_TIMEOUT_S * 2,
    )
    subprocess.run(  # noqa: S603 - fixed arguments
        [pdftoppm, "-png", "-r", "50", str(pdf), str(tmp_path / "page")],
        check=True,
        capture_output=True,
        timeout=INFRASTRUCTURE_TIMEOUT_S * 2,
    )

    assert shot.read_bytes().startswith(b"\x89PNG")
    pages = sorted(tmp_path.glob("page-*.png"))
    assert len(pages) == len(PdfReader(pdf).pages) > 1
    assert all(page.stat().st_size > 5000 for page in pages)  # drawn, not blank
