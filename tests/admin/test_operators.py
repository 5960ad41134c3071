"""The admin API's operators: tokens stored hashed, expiring and revocable; users'
passwords as argon2id hashes; roles and tenants checked; the CLI over them."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from localgate.admin.operators import OperatorAdmin, Role, parse_duration
from localgate.cli import main
from localgate.errors import InvalidArgument, NotFound, Unauthenticated
from localgate.secret import Secret


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_token_is_stored_only_as_a_digest(tmp_path: Path) -> None:
    with OperatorAdmin(tmp_path / "state.db") as operators:
        issued = operators.create_token(Role.AUDITOR, label="siem")
        token = issued.token.reveal()
        assert operators.authenticate_token(token).role is Role.AUDITOR
        assert str(issued.token) == "**********"

    stored = (tmp_path / "state.db").read_bytes()
    # lga_<id>_<secret>: the secret is URL-safe base64, which may hold "_" itself (read
    # from the right, a short tail such as "Q" could be found in the file by chance).
    secret = token.split("_", 2)[2]
    assert len(secret) >= 40
    assert secret.encode() not in stored


def test_tokens_expire_and_are_revoked(tmp_path: Path) -> None:
    clock = Clock()
    with OperatorAdmin(tmp_path / "state.db", now=clock) as operators:
        issued = operators.create_token(Role.VIEWER, expires_in=timedelta(days=30))
        token = issued.token.reveal()
        clock.now += timedelta(days=29)
        assert operators.authenticate_token(token).name == f"token:{issued.token_id}"
        clock.now += timedelta(days=1)
        with pytest.raises(Unauthenticated):
            operators.authenticate_token(token)

        other = operators.create_token(Role.VIEWER)
        operators.revoke_token(other.token_id)
        with pytest.raises(Unauthenticated):
            operators.authenticate_token(other.token.reveal())
        with pytest.raises(NotFound):
            operators.revoke_token("0000000000000000")


def test_a_forged_token_with_a_known_id_is_refused(tmp_path: Path) -> None:
    with OperatorAdmin(tmp_path / "state.db") as operators:
        issued = operators.create_token(Role.ADMIN)
        forged = f"lga_{issued.token_id}_{'A' * 43}"
        for presented in (forged, "", "lga_", issued.token.reveal() + "x"):
            with pytest.raises(Unauthenticated):
                operators.authenticate_token(presented)


def test_only_a_tenant_admin_is_scoped_and_it_must_be(tmp_path: Path) -> None:
    with OperatorAdmin(tmp_path / "state.db") as operators:
        with pytest.raises(InvalidArgument):
            operators.create_token(Role.TENANT_ADMIN)
        with pytest.raises(InvalidArgument):
            operators.create_token(Role.AUDITOR, "acme")
        scoped = operators.create_token(Role.TENANT_ADMIN, "acme")
        assert operators.authenticate_token(scoped.token.reveal()).tenant == "acme"


def test_passwords_are_argon2id_hashes(tmp_path: Path) -> None:
    with OperatorAdmin(tmp_path / "state.db") as operators:
        operators.create_user("alice", Role.SECURITY, Secret("a long passphrase"))
        with pytest.raises(InvalidArgument):
            operators.create_user("alice", Role.SECURITY, Secret("another passphrase"))
        with pytest.raises(InvalidArgument):
            operators.create_user("bob", Role.SECURITY, Secret("short"))
        assert operators.check_password("alice", "a long passphrase") is not None
        assert operators.check_password("alice", "a long passphrasE") is None
        assert operators.check_password("nobody", "a long passphrase") is None

    with sqlite3.connect(tmp_path / "state.db") as db:
        [(stored,)] = db.execute("SELECT password_hash FROM admin_users").fetchall()
    assert stored.startswith("$argon2id$")
    assert "a long passphrase" not in stored


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), ("45m", timedelta(minutes=45))],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "0d", "1w", "-1d", "1.5h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_duration(text)


def test_the_cli_prints_a_token_once_and_creates_users_from_stdin(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"LOCALGATE_DATA_DIR": str(tmp_path)}
    created = runner.invoke(
        main,
        [
            *("admin", "token", "create", "--role", "tenant-admin", "--tenant", "acme"),
            *("--expires", "30d", "--json"),
        ],
        env=env,
    )
    assert created.exit_code == 0, created.output
    token = json.loads(created.output)["token"]
    assert token.startswith("lga_")
    listed = runner.invoke(main, ["admin", "token", "list", "--json"], env=env)
    assert token not in listed.output
    assert json.loads(listed.output)["tenant"] == "acme"

    refused = runner.invoke(main, ["admin", "token", "create", "--role", "tenant-admin"], env=env)
    assert refused.exit_code == 1
    assert "--tenant" in refused.output

    user = runner.invoke(
        main,
        ["admin", "user", "create", "erin", "--role", "auditor", "--password-stdin"],
        input="a long passphrase\n",
        env=env,
    )
    assert user.exit_code == 0, user.output
    with OperatorAdmin(tmp_path / "localgate.db") as operators:
        assert operators.check_password("erin", "a long passphrase") is not None
    assert runner.invoke(main, ["admin", "user", "disable", "erin"], env=env).exit_code == 0
    assert "disabled" in runner.invoke(main, ["admin", "user", "list"], env=env).output
