"""``localgate doctor`` and ``localgate check --connect``: what each check finds, on real
files, a real SQLite and PostgreSQL store, and the fake upstream on loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from localgate.audit.crypto import MasterKey
from localgate.audit.trail import AuditTrail
from localgate.cli import main
from localgate.config import load_settings
from localgate.testing import FakeGemini
from tests.audit.conftest import postgres_schema
from tests.conftest import run_gateway
from tests.gateway_process import free_port

BODY = {"contents": [{"parts": [{"text": "hi"}]}]}


def doctor(tmp_path: Path, upstream: FakeGemini, config: str = "", *args: str) -> Result:
    path = tmp_path / "localgate.yaml"
    path.write_text(config)
    env = {
        "LOCALGATE_DATA_DIR": str(tmp_path / "data"),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
        "LOCALGATE_AUDIT_MASTER_KEY": "",
        "LOCALGATE_SIGNATURE_KEY": "",
    }
    return CliRunner().invoke(main, ["doctor", "--config", str(path), *args], env=env)


def checks(result: Result) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in json.loads(result.stdout)}


def open_trail_once(tmp_path: Path) -> None:
    """What a first start leaves: keys in the data directory, a migrated store."""
    settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})
    AuditTrail.open(settings).store.close()


def test_a_fresh_host_passes_and_says_what_the_first_start_will_create(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    result = doctor(tmp_path, upstream, "", "--json")

    assert result.exit_code == 0, result.output
    found = checks(result)
    assert found["data directory"]["ok"]
    assert found["audit master key"]["detail"].endswith("none yet")
    assert "the gateway creates schema" in found["audit store"]["detail"]
    assert found["upstream"]["detail"].endswith("reachable, the key is accepted")
    assert upstream.requests[-1].headers["x-goog-api-key"] == "upstream-key"
    assert not (tmp_path / "data" / "audit-master.key").exists()  # nothing created


def test_a_key_file_others_can_read_fails_with_the_fix(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    open_trail_once(tmp_path)
    master = tmp_path / "data" / "audit-master.key"
    master.chmod(0o644)

    result = doctor(tmp_path, upstream)

    assert result.exit_code == 1
    assert f"FAIL  audit master key: {master} can be read by others (mode 0644)" in result.output
    assert f"fix: chmod 600 {master}" in result.output
    assert "OK    audit store: sqlite: schema" in result.output


def test_the_wrong_master_key_fails_the_key_check(tmp_path: Path, upstream: FakeGemini) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        assert gateway.generate(BODY).status_code == 200  # a data key, wrapped by the key
    (tmp_path / "data" / "audit-master.key").write_text(MasterKey.generate().reveal() + "\n")

    result = doctor(tmp_path, upstream, "", "--json")

    assert result.exit_code == 1
    keys = checks(result)["audit keys"]
    assert not keys["ok"]
    assert "is not the audit store's" in keys["detail"]


def test_an_upstream_that_refuses_the_key_fails_and_offline_skips_it(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    upstream.fail_with(400, {"error": {"code": 400, "message": "API key not valid."}})

    refused = doctor(tmp_path, upstream)
    offline = doctor(tmp_path, upstream, "", "--offline")

    assert refused.exit_code == 1
    assert "FAIL  upstream:" in refused.output
    assert "the key was refused (400)" in refused.output
    assert offline.exit_code == 0, offline.output
    assert "not checked (--offline)" in offline.output


def test_check_connect_runs_only_the_connectivity_checks(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    path = tmp_path / "localgate.yaml"
    path.write_text(f"cache:\n  chroma_url: http://127.0.0.1:{free_port()}\n")
    env = {
        "LOCALGATE_DATA_DIR": str(tmp_path / "data"),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
    }

    result = CliRunner().invoke(main, ["check", "--connect", "--config", str(path)], env=env)

    assert result.exit_code == 1
    assert f"{path}: OK" in result.output
    assert "FAIL  vector store:" in result.output
    assert "unreachable" in result.output
    assert "OK    upstream:" in result.output
    assert "data directory" not in result.output


def test_postgres_unreachable_and_reachable(
    tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys"
    CliRunner().invoke(main, ["audit", "keygen", "--out", str(keys)])
    config = (
        "audit:\n  store: postgres\n"
        f"  master_key_file: {keys / 'master.key'}\n  signing_key_file: {keys / 'signing.key'}\n"
    )
    monkeypatch.setenv(
        "LOCALGATE_AUDIT_POSTGRES_DSN", f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    )
    down = doctor(tmp_path, upstream, config, "--offline")
    with postgres_schema() as dsn:
        monkeypatch.setenv("LOCALGATE_AUDIT_POSTGRES_DSN", dsn)
        up = doctor(tmp_path, upstream, config, "--offline", "--json")

    assert down.exit_code == 1
    assert "FAIL  audit store: postgres: cannot connect to PostgreSQL" in down.output
    assert "nobody@" not in down.output  # the DSN (it can hold a password) is never shown
    assert up.exit_code == 0, up.output
    found = checks(up)
    assert found["clock"]["ok"]
    assert found["clock"]["detail"].endswith("s against the database")


def test_every_check_line_has_a_fix_when_it_fails(tmp_path: Path, upstream: FakeGemini) -> None:
    upstream.fail_with(503, {"error": {"code": 503, "message": "down"}})

    result = doctor(tmp_path, upstream, "", "--json")

    failed = [check for check in json.loads(result.stdout) if not check["ok"]]
    assert failed
    assert all(check["fix"] for check in failed)


def test_with_database_url_the_state_store_and_the_shared_seal_key_are_checked(
    tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys"
    CliRunner().invoke(main, ["audit", "keygen", "--out", str(keys)])
    config = (
        f"audit:\n  master_key_file: {keys / 'master.key'}\n"
        f"  signing_key_file: {keys / 'signing.key'}\n"
        f"proxy:\n  signature_key_file: {keys / 'seal.key'}\n"
    )
    monkeypatch.setenv("LOCALGATE_DATABASE_URL", f"postgresql://x:pw@127.0.0.1:{free_port()}/n")
    down = doctor(tmp_path, upstream, config, "--offline")
    with postgres_schema() as dsn:
        monkeypatch.setenv("LOCALGATE_DATABASE_URL", dsn)
        fresh = checks(doctor(tmp_path, upstream, config, "--offline", "--json"))
        # A replica's start records the seal key; another key is then named.
        from localgate.state.startup import startup_problems

        settings, _ = load_settings(None, {"LOCALGATE_DATABASE_URL": dsn})
        monkeypatch.setenv("LOCALGATE_SIGNATURE_KEY", (keys / "seal.key").read_text())
        assert startup_problems(settings) == []
        monkeypatch.delenv("LOCALGATE_SIGNATURE_KEY")
        stray = tmp_path / "stray"
        CliRunner().invoke(main, ["audit", "keygen", "--out", str(stray)])
        config = config.replace(str(keys / "seal.key"), str(stray / "seal.key"))
        other = checks(doctor(tmp_path, upstream, config, "--offline", "--json"))

    assert down.exit_code == 1
    assert "FAIL  state store: database_url: cannot connect to PostgreSQL" in down.output
    assert ":pw@" not in down.output
    assert fresh["state store"]["detail"].startswith("postgres: empty; the gateway creates")
    assert fresh["shared seal key"]["ok"]
    assert other["state store"]["detail"].endswith(", current")
    assert not other["shared seal key"]["ok"]
    assert "is not the one the replicas on this database use" in other["shared seal key"]["detail"]
