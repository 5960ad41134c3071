"""The admin API's operators in PostgreSQL (database_url): one store per replica, each
refuses what another revoked or disabled within a second, fails closed when it cannot
tell, and the CLI and the admin API work on it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from localgate.admin.operator_stores import open_operator_store
from localgate.admin.operators import OperatorAdmin, Role
from localgate.admin.operators_postgres import PostgresOperatorStore
from localgate.adminapi.app import create_admin_app
from localgate.audit.crypto import MasterKey
from localgate.cli import main
from localgate.config import load_settings
from localgate.errors import InvalidArgument, NotFound, ServiceUnavailable, Unauthenticated
from localgate.secret import Secret
from localgate.state import StateDatabaseUnavailable
from localgate.state.generations import POLL_INTERVAL_S, STALE_AFTER_S
from localgate.state.migrate import head_revision
from tests.audit.conftest import postgres_schema
from tests.conftest import wait_until

# The promise is one second; the margin is for a loaded test machine, not the product.
PROMISE_S = 1.0 + 4.0
PASSWORD = "a long passphrase"
API = "/admin/api/v1"


@pytest.fixture
def dsn() -> Iterator[str]:
    with postgres_schema() as found:
        yield found


def token_refused(store: PostgresOperatorStore, token: str) -> bool:
    try:
        store.authenticate_token(token)
    except Unauthenticated:
        return True
    return False


def test_a_token_made_on_one_replica_works_on_another_until_revoked_there(dsn: str) -> None:
    first, second = PostgresOperatorStore(dsn), PostgresOperatorStore(dsn)
    try:
        issued = first.create_token(Role.TENANT_ADMIN, "acme", label="ci")
        token = issued.token.reveal()
        assert second.authenticate_token(token).tenant == "acme"  # cached now
        assert second.authenticate_token(token).name == f"token:{issued.token_id}"
        first.revoke_token(issued.token_id)
        wait_until(lambda: token_refused(second, token), timeout=PROMISE_S)
        [listed] = second.list_tokens()
        assert (listed.token_id, listed.label) == (issued.token_id, "ci")
        assert listed.revoked_at is not None
    finally:
        first.close()
        second.close()


def test_a_user_disabled_on_one_replica_is_refused_by_another(dsn: str) -> None:
    first, second = PostgresOperatorStore(dsn), PostgresOperatorStore(dsn)
    try:
        first.create_user("erin", Role.AUDITOR, Secret(PASSWORD))
        assert second.check_password("erin", PASSWORD) is not None
        assert second.user("erin") is not None  # cached now
        first.disable_user("erin")
        wait_until(lambda: second.user("erin") is None, timeout=PROMISE_S)
        assert second.check_password("erin", PASSWORD) is None
        assert [user.disabled_at is not None for user in second.list_users()] == [True]
    finally:
        first.close()
        second.close()


def test_a_revocation_by_hand_in_the_database_is_seen_too(dsn: str) -> None:
    store = PostgresOperatorStore(dsn)
    try:
        issued = store.create_token(Role.ADMIN)
        store.authenticate_token(issued.token.reveal())
        with psycopg.connect(dsn, autocommit=True) as insider:
            insider.execute("DELETE FROM admin_tokens WHERE token_id = %s", (issued.token_id,))
        wait_until(lambda: token_refused(store, issued.token.reveal()), timeout=PROMISE_S)
    finally:
        store.close()


def test_without_its_poller_the_store_reads_the_database_instead_of_trusting_its_cache(
    dsn: str,
) -> None:
    cli, store = PostgresOperatorStore(dsn, poll=False), PostgresOperatorStore(dsn)
    try:
        issued = cli.create_token(Role.VIEWER)
        store.authenticate_token(issued.token.reveal())
        assert store._watch is not None
        store._watch.close()  # the poller stops, as if stuck or cut off from the database
        cli.revoke_token(issued.token_id)
        # Not by a lucky last poll: none runs; the cache ages out.
        wait_until(lambda: token_refused(store, issued.token.reveal()), timeout=PROMISE_S)
        assert STALE_AFTER_S + POLL_INTERVAL_S < 1.0
    finally:
        cli.close()
        store.close()


def test_a_lost_database_fails_closed(dsn: str) -> None:
    store = PostgresOperatorStore(dsn)
    try:
        issued = store.create_token(Role.ADMIN)
        store.create_user("erin", Role.VIEWER, Secret(PASSWORD))
        store.authenticate_token(issued.token.reveal())
        store.user("erin")
        with psycopg.connect(dsn, autocommit=True) as insider:
            insider.execute("ALTER TABLE state_generations RENAME TO generations_gone")
            insider.execute("ALTER TABLE admin_tokens RENAME TO admin_tokens_gone")
            insider.execute("ALTER TABLE admin_users RENAME TO admin_users_gone")

        def unavailable() -> bool:
            try:
                store.authenticate_token(issued.token.reveal())
            except ServiceUnavailable:
                pass
            else:
                return False
            with pytest.raises(ServiceUnavailable):
                store.user("erin")
            return True

        wait_until(unavailable, timeout=PROMISE_S)
    finally:
        store.close()


def test_the_rules_hold_on_postgres_as_on_sqlite(dsn: str) -> None:
    with PostgresOperatorStore(dsn, poll=False) as store:
        issued = store.create_token(Role.ADMIN)
        forged = f"lga_{issued.token_id}_{'A' * 43}"
        for presented in (forged, "", "lga_", issued.token.reveal() + "x"):
            with pytest.raises(Unauthenticated):
                store.authenticate_token(presented)
        with pytest.raises(InvalidArgument):
            store.create_token(Role.TENANT_ADMIN)
        with pytest.raises(NotFound):
            store.revoke_token("0000000000000000")
        store.create_user("alice", Role.SECURITY, Secret(PASSWORD))
        with pytest.raises(InvalidArgument, match="exists"):
            store.create_user("alice", Role.VIEWER, Secret("another passphrase"))
        with pytest.raises(NotFound):
            store.disable_user("nobody")
        assert store.check_password("alice", PASSWORD + "!") is None
        assert store.check_password("nobody", PASSWORD) is None

    secret = issued.token.reveal().split("_", 2)[2]  # lga_<id>_<secret>: see test_operators
    assert len(secret) >= 40
    with psycopg.connect(dsn, autocommit=True) as insider:
        digests = insider.execute("SELECT digest FROM admin_tokens").fetchall()
        [(stored_hash,)] = insider.execute("SELECT password_hash FROM admin_users").fetchall()
    assert all(secret.encode() not in bytes(digest) for (digest,) in digests)
    assert stored_hash.startswith("$argon2id$")


def test_an_unreachable_database_is_one_line() -> None:
    with pytest.raises(StateDatabaseUnavailable) as raised:
        PostgresOperatorStore("postgresql://nobody:secret-pw@127.0.0.1:1/none")
    assert "secret-pw" not in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_cli_works_on_postgres_and_writes_nothing_to_sqlite(tmp_path: Path, dsn: str) -> None:
    runner = CliRunner()
    env = {"LOCALGATE_DATA_DIR": str(tmp_path), "LOCALGATE_DATABASE_URL": dsn}
    created = runner.invoke(
        main, ["admin", "token", "create", "--role", "auditor", "--json"], env=env
    )
    assert created.exit_code == 0, created.output
    token = json.loads(created.output)["token"]
    user = runner.invoke(
        main,
        ["admin", "user", "create", "erin", "--role", "viewer", "--password-stdin"],
        input=PASSWORD + "\n",
        env=env,
    )
    assert user.exit_code == 0, user.output

    with PostgresOperatorStore(dsn, poll=False) as replica:
        token_id = replica.authenticate_token(token).name.removeprefix("token:")
        assert replica.check_password("erin", PASSWORD) is not None
    listed = runner.invoke(main, ["admin", "token", "list", "--json"], env=env)
    assert json.loads(listed.output)["token_id"] == token_id
    assert runner.invoke(main, ["admin", "token", "revoke", token_id], env=env).exit_code == 0
    assert runner.invoke(main, ["admin", "user", "disable", "erin"], env=env).exit_code == 0
    with PostgresOperatorStore(dsn, poll=False) as replica:
        with pytest.raises(Unauthenticated):
            replica.authenticate_token(token)
        assert replica.user("erin") is None
    # The SQLite state database, if any, holds no operator.
    with OperatorAdmin(tmp_path / "localgate.db") as local:
        assert local.list_tokens() == []
        assert local.list_users() == []

    with psycopg.connect(dsn, autocommit=True) as insider:
        [(version,)] = insider.execute("SELECT version_num FROM localgate_state_version")
    assert version == head_revision()


def test_the_cli_on_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    env = {
        "LOCALGATE_DATA_DIR": str(tmp_path),
        "LOCALGATE_DATABASE_URL": "postgresql://nobody:secret-pw@127.0.0.1:1/none",
    }
    result = CliRunner().invoke(main, ["admin", "token", "list"], env=env)
    assert result.exit_code == 1
    assert "cannot connect to PostgreSQL" in result.output
    assert "secret-pw" not in result.output


def test_without_database_url_the_store_is_the_sqlite_file(tmp_path: Path) -> None:
    settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path)})
    with open_operator_store(settings) as store:
        assert isinstance(store, OperatorAdmin)
        store.create_token(Role.VIEWER)
    assert (tmp_path / "localgate.db").exists()


def test_a_token_revoked_through_one_replicas_admin_api_is_refused_by_the_others(
    tmp_path: Path, dsn: str
) -> None:
    # The replicas share the audit trail's master key, as they must (docs/shared-state.md).
    master = MasterKey.generate().reveal()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "audit-master.key").write_text(master)
    replicas = [
        load_settings(
            None, {"LOCALGATE_DATA_DIR": str(tmp_path / name), "LOCALGATE_DATABASE_URL": dsn}
        )[0]
        for name in ("a", "b")
    ]
    with open_operator_store(replicas[0], serving=False) as cli:
        admin = cli.create_token(Role.ADMIN).token.reveal()
        viewer = cli.create_token(Role.VIEWER)
    bearer = {"authorization": f"Bearer {viewer.token.reveal()}"}
    with (
        TestClient(create_admin_app(replicas[0])) as first,
        TestClient(create_admin_app(replicas[1])) as second,
    ):
        assert second.get(f"{API}/whoami", headers=bearer).status_code == 200
        revoked = first.delete(
            f"{API}/tokens/{viewer.token_id}",
            headers={"authorization": f"Bearer {admin}"},
        )
        assert revoked.status_code == 200, revoked.text
        wait_until(
            lambda: second.get(f"{API}/whoami", headers=bearer).status_code == 401,
            timeout=PROMISE_S,
        )
    # Shut down, each listener has stopped its poller.
    assert not [t for t in threading.enumerate() if t.name == "admin_operators-poller"]
