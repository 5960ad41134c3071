"""``localgate migrate``: the configured databases brought to this version's schema, on a
real SQLite file and a real PostgreSQL schema; a database it cannot reach is one line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
from click.testing import CliRunner, Result

from localgate.audit.migrate import head_revision
from localgate.cli import main
from localgate.state.migrate import head_revision as state_head
from tests.audit.conftest import postgres_schema


def migrate(tmp_path: Path, config: str = "", **env: str) -> Result:
    path = tmp_path / "localgate.yaml"
    path.write_text(config)
    environment = {"LOCALGATE_DATA_DIR": str(tmp_path / "data"), "LOCALGATE_CONFIG": "", **env}
    return CliRunner().invoke(main, ["migrate", "--config", str(path)], env=environment)


def test_an_empty_data_directory_is_migrated_to_the_head_and_a_second_run_changes_nothing(
    tmp_path: Path,
) -> None:
    first = migrate(tmp_path)

    assert first.exit_code == 0, first.output
    assert f"audit store ({tmp_path / 'data' / 'audit.db'}): schema none -> {head_revision()}" in (
        first.output
    )
    with sqlite3.connect(tmp_path / "data" / "audit.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() == (
            head_revision(),
        )
    with sqlite3.connect(tmp_path / "data" / "localgate.db") as db:
        assert db.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)
    # No key material is made by a migration: keys are the deployment's to provide.
    assert not (tmp_path / "data" / "audit-master.key").exists()
    assert not (tmp_path / "data" / "audit-signing.key").exists()

    second = migrate(tmp_path)

    assert second.exit_code == 0, second.output
    assert f"schema {head_revision()}, current" in second.output


def test_a_postgresql_audit_store_is_migrated_and_its_dsn_is_never_printed(
    tmp_path: Path,
) -> None:
    with postgres_schema() as dsn:
        result = migrate(tmp_path, "audit:\n  store: postgres\n", LOCALGATE_AUDIT_POSTGRES_DSN=dsn)

        assert result.exit_code == 0, result.output
        assert f"audit store (postgres (audit.postgres_dsn)): schema none -> {head_revision()}" in (
            result.output
        )
        assert dsn not in result.output
        with psycopg.connect(dsn) as db:
            row = db.execute("SELECT version_num FROM alembic_version").fetchone()
        assert row == (head_revision(),)


def test_an_unreachable_database_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    dsn = "postgresql://localgate:hunter2-secret@127.0.0.1:1/nowhere?connect_timeout=5"

    result = migrate(tmp_path, "audit:\n  store: postgres\n", LOCALGATE_AUDIT_POSTGRES_DSN=dsn)

    assert result.exit_code == 1
    assert result.output.startswith("Error: audit store (postgres): ")
    assert len(result.output.strip().splitlines()) == 1
    assert "hunter2-secret" not in result.output
    assert "Traceback" not in result.output


def test_with_the_audit_trail_off_only_the_state_store_is_migrated(tmp_path: Path) -> None:
    result = migrate(tmp_path, "proxy:\n  enable_audit: false\n")

    assert result.exit_code == 0, result.output
    assert result.output.startswith("state store (")
    assert "audit store" not in result.output
    assert not (tmp_path / "data" / "audit.db").exists()


def test_with_database_url_the_shared_state_and_the_audit_trail_are_migrated_there(
    tmp_path: Path,
) -> None:
    with postgres_schema() as dsn:
        first = migrate(tmp_path, LOCALGATE_DATABASE_URL=dsn)
        second = migrate(tmp_path, LOCALGATE_DATABASE_URL=dsn)

        with psycopg.connect(dsn) as db:
            state = db.execute("SELECT version_num FROM localgate_state_version").fetchone()
            audit = db.execute("SELECT version_num FROM alembic_version").fetchone()

    assert first.exit_code == 0, first.output
    assert f"state store (postgres (database_url)): schema none -> {state_head()}" in first.output
    assert state == (state_head(),)
    assert audit == (head_revision(),)
    assert f"state store (postgres (database_url)): schema {state_head()}, current" in (
        second.output
    )
    assert dsn not in first.output + second.output
    assert not (tmp_path / "data" / "localgate.db").exists()  # nothing embedded was made


def test_the_upstream_key_file_is_not_read_a_migration_job_is_run_without_it(
    tmp_path: Path,
) -> None:
    # The gateways' configuration, whose upstream key file the job does not mount.
    config = f"upstream:\n  api_key_file: {tmp_path / 'not-mounted' / 'gemini-api-key'}\n"

    migrated = migrate(tmp_path, config, GEMINI_API_KEY="")

    assert migrated.exit_code == 0, migrated.output
    assert "audit store" in migrated.output
    # Every other command still needs it.
    checked = CliRunner().invoke(
        main,
        ["check", "--config", str(tmp_path / "localgate.yaml")],
        env={"LOCALGATE_DATA_DIR": str(tmp_path / "data"), "GEMINI_API_KEY": ""},
    )
    assert checked.exit_code == 1
    assert "upstream.api_key_file: cannot read" in checked.output
