"""Console sessions and login throttling with database_url: two admin listeners on one
PostgreSQL act as one behind a load balancer without sticky sessions."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from starlette.testclient import TestClient

from localgate.admin.operator_stores import open_operator_store
from localgate.admin.operators import Role
from localgate.adminapi.app import create_admin_app
from localgate.audit.crypto import MasterKey
from localgate.config import Settings, load_settings
from localgate.secret import Secret
from tests.adminapi.conftest import PASSWORD, FakeClock
from tests.audit.conftest import postgres_schema
from tests.conftest import wait_until

API = "/admin/api/v1"
COOKIE = "lg_admin_session"
PROMISE_S = 1.0 + 4.0  # the one-second promise, with a margin for a loaded machine


@pytest.fixture
def dsn() -> Iterator[str]:
    with postgres_schema() as found:
        yield found


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@dataclass
class Replicas:
    clients: list[TestClient]
    settings: Settings
    admin_token: str


@pytest.fixture
def replicas(tmp_path: Path, dsn: str, clock: FakeClock) -> Iterator[Replicas]:
    """Two admin listeners, each with its own data directory, on one database."""
    master = MasterKey.generate().reveal()
    settings = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        # Replicas share the audit trail's master key, as they must (docs/shared-state.md).
        (tmp_path / name / "audit-master.key").write_text(master)
        env = {"LOCALGATE_DATA_DIR": str(tmp_path / name), "LOCALGATE_DATABASE_URL": dsn}
        settings.append(load_settings(None, env)[0])
    with open_operator_store(settings[0], serving=False) as operators:
        operators.create_user("root", Role.ADMIN, Secret(PASSWORD))
        operators.create_user("vera", Role.VIEWER, Secret(PASSWORD))
        admin_token = operators.create_token(Role.ADMIN).token.reveal()
    with ExitStack() as stack:
        clients = [
            stack.enter_context(TestClient(create_admin_app(each, clock=clock)))
            for each in settings
        ]
        yield Replicas(clients, settings[0], admin_token)


def login(client: TestClient, name: str, password: str = PASSWORD) -> tuple[str, str]:
    """The session id from the cookie, and the CSRF token."""
    answer = client.post(f"{API}/session", json={"name": name, "password": password})
    assert answer.status_code == 200, answer.text
    session_id = answer.cookies[COOKIE]
    client.cookies.clear()  # sent by hand below, to whichever replica the test picks
    return session_id, answer.json()["csrf_token"]


def whoami(client: TestClient, session_id: str) -> int:
    return client.get(f"{API}/whoami", headers={"cookie": f"{COOKIE}={session_id}"}).status_code


def test_a_login_on_one_replica_is_a_session_on_the_other(replicas: Replicas) -> None:
    first, second = replicas.clients
    session_id, csrf = login(first, "root")

    answer = second.get(f"{API}/whoami", headers={"cookie": f"{COOKIE}={session_id}"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"name": "user:root", "role": "admin", "tenant": None, "via": "session"}
    # A change on the other replica still needs the session's CSRF token, and takes it.
    with open_operator_store(replicas.settings, serving=False) as ops:
        token_id = ops.create_token(Role.VIEWER).token_id
    cookie = {"cookie": f"{COOKIE}={session_id}"}
    assert second.delete(f"{API}/tokens/{token_id}", headers=cookie).status_code == 403
    changed = second.delete(f"{API}/tokens/{token_id}", headers={**cookie, "x-csrf-token": csrf})
    assert changed.status_code == 200, changed.text


def test_a_logout_on_one_replica_ends_the_session_on_all(replicas: Replicas) -> None:
    first, second = replicas.clients
    session_id, csrf = login(first, "vera")
    assert whoami(second, session_id) == 200
    out = second.delete(
        f"{API}/session", headers={"cookie": f"{COOKIE}={session_id}", "x-csrf-token": csrf}
    )
    assert out.status_code == 200, out.text
    assert whoami(first, session_id) == 401  # at once: sessions are never cached


def test_a_session_expires_on_every_replica(replicas: Replicas, clock: FakeClock) -> None:
    first, second = replicas.clients
    session_id, _ = login(first, "vera")
    clock.now += 8 * 3600 - 1
    assert whoami(second, session_id) == 200
    clock.now += 1
    assert whoami(second, session_id) == 401
    assert whoami(first, session_id) == 401


def test_a_user_disabled_on_one_replica_loses_their_session_on_the_other(
    replicas: Replicas,
) -> None:
    first, second = replicas.clients
    session_id, _ = login(first, "vera")
    assert whoami(second, session_id) == 200
    root = {"authorization": f"Bearer {replicas.admin_token}"}
    assert first.delete(f"{API}/users/vera", headers=root).status_code == 200
    wait_until(lambda: whoami(second, session_id) == 401, timeout=PROMISE_S)


def test_failed_logins_are_counted_across_replicas(replicas: Replicas) -> None:
    first, second = replicas.clients
    for attempt in range(5):  # admin.login_max_failures, spread over both
        client = replicas.clients[attempt % 2]
        wrong = client.post(f"{API}/session", json={"name": "vera", "password": "not it, no"})
        assert wrong.status_code == 401
    for client in (first, second):
        refused = client.post(f"{API}/session", json={"name": "vera", "password": PASSWORD})
        assert refused.status_code == 429, refused.text
        assert 0 < int(refused.headers["retry-after"]) <= 900


def test_only_the_session_ids_digest_is_stored(replicas: Replicas, dsn: str) -> None:
    session_id, _ = login(replicas.clients[0], "vera")
    with psycopg.connect(dsn, autocommit=True) as insider:
        rows = insider.execute("SELECT digest FROM admin_sessions").fetchall()
    assert [bytes(row[0]) for row in rows] == [hashlib.sha256(session_id.encode()).digest()]
