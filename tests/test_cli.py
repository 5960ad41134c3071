"""The localgate command as an operator uses it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from localgate.cli import main


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("LOCALGATE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("LOCALGATE_CONFIG", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    return CliRunner()


def test_keys_create_list_revoke(runner: CliRunner) -> None:
    created = runner.invoke(main, ["keys", "create", "--tenant", "acme", "--json"])
    assert created.exit_code == 0, created.output
    issued = json.loads(created.output)
    assert set(issued) == {"tenant", "key_id", "key"}
    assert issued["key"].startswith(f"lg_{issued['key_id']}_")

    listed = runner.invoke(main, ["keys", "list"])
    assert issued["key_id"] in listed.output
    assert "active" in listed.output
    assert issued["key"] not in listed.output

    revoked = runner.invoke(main, ["keys", "revoke", issued["key_id"]])
    assert revoked.exit_code == 0
    lines = runner.invoke(main, ["keys", "list", "--json"]).output.splitlines()
    assert json.loads(lines[0])["revoked_at"] is not None


def test_keys_create_human_output_shows_the_key_once(runner: CliRunner) -> None:
    result = runner.invoke(main, ["keys", "create", "--tenant", "acme"])

    assert result.exit_code == 0
    assert "cannot be shown again" in result.output
    assert "lg_" in result.output


def test_revoking_an_unknown_key_fails(runner: CliRunner) -> None:
    result = runner.invoke(main, ["keys", "revoke", "nope"])

    assert result.exit_code == 1
    assert "no key with id nope" in result.output


def test_bad_tenant_name(runner: CliRunner) -> None:
    result = runner.invoke(main, ["keys", "create", "--tenant", "a b"])

    assert result.exit_code == 2
    assert "tenant must be" in result.output


def test_check_lists_every_problem_and_exits_1(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("upstream:\n  timeout_s: -1\nserver:\n  max_body_bytes: 0\n")

    result = runner.invoke(main, ["check", "--config", str(config)])

    assert result.exit_code == 1
    assert "upstream.timeout_s: must be > 0" in result.output
    assert "server.max_body_bytes: must be > 0" in result.output


def test_check_accepts_the_example(runner: CliRunner) -> None:
    example = Path(__file__).parent.parent / "config" / "localization.yaml"

    result = runner.invoke(main, ["check", "--config", str(example)])

    assert result.exit_code == 0, result.output
    assert "OK" in result.output
    assert "no upstream API key" in result.output


def test_serve_refuses_a_bad_configuration(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("upstream:\n  timeout_s: 0\n")

    result = runner.invoke(main, ["serve", "--config", str(config)])

    assert result.exit_code == 1
    assert "upstream.timeout_s: must be > 0" in result.output


def test_redact_prints_the_redacted_text_and_findings_without_values(runner: CliRunner) -> None:
    result = runner.invoke(main, ["redact", "客户张伟，手机13812345678"])

    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "客户[PERSON_1]，手机[CN_MOBILE_1]"
    assert "CN_MOBILE" in result.stderr
    assert "7-18" in result.stderr
    assert "13812345678" not in result.stderr


def test_redact_applies_a_tenants_policy(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("tenants:\n  acme:\n    redaction:\n      actions: {API_SECRET: block}\n")

    blocked = runner.invoke(
        main, ["redact", "--config", str(config), "--tenant", "acme", "key AKIAIOSFODNN7EXAMPLE"]
    )
    default = runner.invoke(main, ["redact", "--config", str(config), "key AKIAIOSFODNN7EXAMPLE"])

    assert blocked.exit_code == 2
    assert "API_SECRET" in blocked.stderr
    assert default.stdout.startswith("key [API_SECRET_1]")


def test_detect_jsonl(runner: CliRunner) -> None:
    lines = '{"id": "a", "text": "邮箱a@b.cn"}\n\n{"id": 2, "text": "nothing here"}\n'

    result = runner.invoke(main, ["redact", "--detect-jsonl"], input=lines)

    assert result.exit_code == 0
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"id": "a", "entities": [{"start": 2, "end": 8, "type": "EMAIL"}]},
        {"id": 2, "entities": []},
    ]


def test_detect_jsonl_rejects_bad_lines(runner: CliRunner) -> None:
    result = runner.invoke(main, ["redact", "--detect-jsonl"], input="not json\n")

    assert result.exit_code == 1
    assert "line 1" in result.stderr


def test_help_lists_every_command_without_importing_the_heavy_groups() -> None:
    # `localgate --help` in a fresh interpreter: the audit store, the vector layer and the
    # settings models (about two seconds of imports) stay unimported, and each group's help
    # line is its own.
    script = (
        "import sys; from click.testing import CliRunner; from localgate.cli import main; "
        "out = CliRunner().invoke(main, ['--help']).output; "
        "print(out); print(sorted(m for m in sys.modules if m.startswith("
        "('localgate.audit', 'localgate.cache', 'localgate.rag', 'localgate.vectorstore', "
        "'localgate.config', 'chromadb', 'alembic'))))"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )

    assert result.stdout.rstrip().endswith("[]")
    context = click.Context(main)
    for name in ("audit", "cache", "rag"):
        group = main.get_command(context, name)
        assert group is not None
        assert group.get_short_help_str(200) in " ".join(result.stdout.split())
