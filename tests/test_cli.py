"""The localgate command as an operator uses it."""

from __future__ import annotations

import json
import os
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
        "'localgate.config', 'localgate.admin', 'localgate.identity', 'pydantic', 'chromadb', "
        "'alembic'))))"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )

    assert result.stdout.rstrip().endswith("[]")
    context = click.Context(main)
    for name in ("keys", "tenants", "audit", "cache", "rag"):
        group = main.get_command(context, name)
        assert group is not None
        assert group.get_short_help_str(200) in " ".join(result.stdout.split())


# Every command that reads the configuration, with the arguments it needs to get that far.
CONFIGURED_COMMANDS = {
    "serve": [],
    "check": [],
    "reload": [],
    "doctor": ["--offline"],
    "migrate": [],
    "redact": ["text"],
    "keys create": ["--tenant", "acme"],
    "keys list": [],
    "keys revoke": ["0123456789abcdef"],
    "tenants list": [],
    "audit verify": [],
    "audit checkpoint": [],
    "audit verifier-key": [],
    "audit keygen": ["--out", "keys"],
    "audit show": ["--request-id", "r"],
    "audit export": [],
    "audit prove": ["--request-id", "r"],
    "audit rotate-key": ["--new-key-file", "new.key"],
    "audit shred": [],
    "audit purge": [],
    "audit find-prompt": ["--tenant", "acme", "text", "--reason", "tests: a reason"],
    "audit report": [
        "--tenant",
        "acme",
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-31",
        "--out",
        "r.html",
    ],
    "cache stats": [],
    "cache clear": ["--yes"],
    "rag ingest": [".", "--collection", "c"],
    "rag query": ["text", "--collection", "c"],
    "rag list": [],
    "rag delete": ["--collection", "c", "--yes"],
    "quality report": [],
    "admin token create": ["--role", "viewer"],
    "admin token list": [],
    "admin token revoke": ["0123456789abcdef"],
    "admin user create": ["alice", "--role", "viewer", "--password-stdin"],
    "admin user list": [],
    "admin user disable": ["alice"],
}
# Reads no configuration (a proof and a public key are all it needs), but takes --config too.
# Commands that read no configuration: a proof check, and the contract (the same for every
# configuration).
UNCONFIGURED_COMMANDS = {"audit check-proof", "openapi"}


def _leaf_commands() -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}

    def walk(group: click.Group, prefix: str) -> None:
        context = click.Context(group)
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            assert command is not None
            if isinstance(command, click.Group):
                assert "--config" in _options(command), f"{prefix}{name}"
                walk(command, f"{prefix}{name} ")
            else:
                found[f"{prefix}{name}"] = command

    walk(main, "")
    return found


def _options(command: click.Command) -> set[str]:
    return {option for param in command.params for option in param.opts}


def test_every_command_takes_config_after_its_own_name() -> None:
    leaves = _leaf_commands()

    assert set(leaves) == set(CONFIGURED_COMMANDS) | UNCONFIGURED_COMMANDS
    assert [
        name
        for name, command in leaves.items()
        if "--config" not in _options(command) and name != "openapi"
    ] == []


@pytest.mark.parametrize(
    ("command", "spelling"),
    [
        (command, spelling)
        for command in sorted(CONFIGURED_COMMANDS)
        for spelling in ("after the command", "before it", "environment")
        # A command outside a group has one place for --config only.
        if " " in command or spelling != "before it"
    ],
)
def test_every_command_refuses_a_bad_configuration_however_it_is_named(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    spelling: str,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  port: 0\n")
    words = command.split()
    arguments = CONFIGURED_COMMANDS[command]
    if spelling == "after the command":
        args = [*words, "--config", str(bad), *arguments]
    elif spelling == "before it":
        args = [words[0], "--config", str(bad), *words[1:], *arguments]
    else:
        monkeypatch.setenv("LOCALGATE_CONFIG", str(bad))
        args = [*words, *arguments]

    result = runner.invoke(main, args)

    assert result.exit_code == 1, result.output
    assert f"localgate: invalid configuration in {bad}:" in result.stderr
    assert "server.port: must be >= 1" in result.stderr


@pytest.mark.parametrize("group", ["keys", "tenants"])
def test_both_places_of_config_read_the_same_file(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str
) -> None:
    monkeypatch.delenv("LOCALGATE_DATA_DIR")  # it would win over the file's data_dir
    monkeypatch.chdir(tmp_path)  # the default data_dir, ./data
    config = tmp_path / "elsewhere.yaml"
    config.write_text(f"data_dir: {tmp_path / 'elsewhere'}\ntenants:\n  globex: {{}}\n")
    created = runner.invoke(main, ["keys", "create", "--tenant", "acme", "--config", str(config)])
    assert created.exit_code == 0, created.output

    after = runner.invoke(main, [group, "list", "--config", str(config)])
    before = runner.invoke(main, [group, "--config", str(config), "list"])
    default = runner.invoke(main, [group, "list"])

    assert after.exit_code == 0, after.output
    assert after.output == before.output
    assert "acme" in after.output
    assert "acme" not in default.output


def test_audit_and_rag_read_the_file_named_before_or_after_the_subcommand(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCALGATE_DATA_DIR")  # it would win over the file's data_dir
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    config = tmp_path / "elsewhere.yaml"
    config.write_text(f"data_dir: {elsewhere}\n")
    (tmp_path / "leave.txt").write_text("Annual leave is fifteen days.")
    ingest = ["leave.txt", "--collection", "handbook"]
    assert runner.invoke(main, ["rag", "ingest", *ingest, "--config", str(config)]).exit_code == 0

    verify_after = runner.invoke(main, ["audit", "verify", "--config", str(config)])
    verify_before = runner.invoke(main, ["audit", "--config", str(config), "verify"])
    rag_after = runner.invoke(main, ["rag", "list", "--config", str(config)])
    rag_before = runner.invoke(main, ["rag", "--config", str(config), "list"])
    rag_default = runner.invoke(main, ["rag", "list"])

    assert verify_after.output == verify_before.output
    assert f"no audit log at {elsewhere / 'audit.db'}" in verify_after.output
    assert rag_after.output == rag_before.output
    assert "handbook" in rag_after.output
    assert rag_default.output == "No retrieval collections.\n"


def test_two_different_configuration_files_are_refused(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        main, ["audit", "--config", str(tmp_path / "a.yaml"), "verify", "--config", "b.yaml"]
    )

    assert result.exit_code == 2
    assert "two configuration files" in result.output


def test_tenants_list(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "tenants:\n  acme:\n    redaction: {actions: {PERSON: block}}\n"
        "    rag: {enabled: true, collection: handbook}\n"
        "    limits: {requests_per_minute: 600, concurrent_requests: 8}\n"
    )
    runner.invoke(main, ["keys", "create", "--tenant", "zeta"])

    table = runner.invoke(main, ["tenants", "list", "--config", str(config)])
    lines = runner.invoke(main, ["tenants", "list", "--config", str(config), "--json"])
    empty = runner.invoke(main, ["tenants", "list", "--config", str(tmp_path / "none.yaml")])

    assert table.exit_code == 0, table.output
    rows = table.output.splitlines()
    assert rows[0].split() == ["TENANT", "KEYS", "REVOKED", "CONFIGURED", "POLICY"]
    assert rows[1].startswith("acme")
    assert "redaction pseudonymize (PERSON block); cache off; rag handbook" in rows[1]
    assert rows[1].endswith("; limits 600 rpm, 8 concurrent")
    assert "limits" not in rows[2]
    assert rows[2].split()[:4] == ["zeta", "1", "0", "no"]
    found = [json.loads(line) for line in lines.output.splitlines()]
    assert [(t["name"], t["configured"]) for t in found] == [("acme", True), ("zeta", False)]
    assert found[0]["policy"]["redaction"]["actions"] == {"PERSON": "block"}
    assert found[0]["policy"]["limits"]["requests_per_minute"] == 600
    assert found[1]["policy"]["limits"]["concurrent_requests"] is None
    assert empty.exit_code == 1  # the file does not exist: refused like any bad configuration


def test_keys_list_loads_the_settings_and_the_key_store_only(tmp_path: Path) -> None:
    # `localgate keys list` in a fresh interpreter: the configuration is validated (the settings
    # models load), and nothing of the audit trail, the vector layer, redaction or the server.
    script = (
        "import sys; from click.testing import CliRunner; from localgate.cli import main; "
        "result = CliRunner().invoke(main, ['keys', 'list']); "
        "assert result.exit_code == 0, result.output; "
        "print(' '.join(sorted(sys.modules)))"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LOCALGATE_DATA_DIR": str(tmp_path / "data")},
    )
    modules = result.stdout.split()

    assert "localgate.config" in modules
    assert "localgate.identity.keys" in modules
    heavy = (
        "localgate.audit", "localgate.cache", "localgate.rag", "localgate.vectorstore",
        "localgate.redaction", "localgate.app", "localgate.frontdoor", "localgate.pipeline",
        "localgate.upstream", "localgate.observability", "localgate.admin.audit",
        "chromadb", "alembic", "sqlalchemy", "cryptography", "psycopg", "re2", "rjieba",
        "numpy", "uvicorn", "starlette", "aiohttp", "orjson",
    )  # fmt: skip
    assert [m for m in modules if m.startswith(heavy)] == []
