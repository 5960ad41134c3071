"""Keys in PostgreSQL (database_url): one store per replica, each sees the others' changes
within a second, and fails closed when it cannot tell."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from localgate.errors import PermissionDenied, ServiceUnavailable, Unauthenticated
from localgate.identity import PostgresKeyStore
from localgate.identity.postgres import POLL_INTERVAL_S, STALE_AFTER_S
from localgate.state import StateDatabaseUnavailable
from tests.audit.conftest import postgres_schema
from tests.conftest import wait_until

# The promise is one second; the margin is for a loaded test machine, not the product.
PROMISE_S = 1.0 + 4.0


@pytest.fixture
def dsn() -> Iterator[str]:
    with postgres_schema() as found:
        yield found


def refused(store: PostgresKeyStore, key: str) -> bool:
    try:
        store.authenticate(key)
    except PermissionDenied:
        return True
    return False


def test_a_key_made_on_one_replica_is_honoured_and_its_revocation_seen_by_another(
    dsn: str,
) -> None:
    first, second = PostgresKeyStore(dsn), PostgresKeyStore(dsn)
    try:
        issued = first.create("acme", "app")
        assert second.authenticate(issued.key.reveal()).tenant == "acme"  # cached now
        assert second.authenticate(issued.key.reveal()).key_id == issued.key_id
        assert first.revoke(issued.key_id)
        wait_until(lambda: refused(second, issued.key.reveal()), timeout=PROMISE_S)
        assert [record.key_id for record in second.list("acme")] == [issued.key_id]
        assert second.list()[0].revoked_at is not None
    finally:
        first.close()
        second.close()


def test_a_revocation_by_hand_in_the_database_is_seen_too(dsn: str) -> None:
    store = PostgresKeyStore(dsn)
    try:
        issued = store.create("acme")
        store.authenticate(issued.key.reveal())
        with psycopg.connect(dsn, autocommit=True) as insider:
            insider.execute(
                "UPDATE api_keys SET revoked_at = 'now' WHERE key_id = %s", (issued.key_id,)
            )
        wait_until(lambda: refused(store, issued.key.reveal()), timeout=PROMISE_S)
    finally:
        store.close()


def test_without_its_poller_the_store_reads_the_database_instead_of_trusting_its_cache(
    dsn: str,
) -> None:
    admin, store = PostgresKeyStore(dsn, poll=False), PostgresKeyStore(dsn)
    try:
        issued = admin.create("acme")
        store.authenticate(issued.key.reveal())
        assert store.watch is not None
        store.watch.close()  # the poller stops, as if stuck or cut off from the database
        admin.revoke(issued.key_id)
        # Not by a lucky last poll: none runs; the cache ages out.
        wait_until(lambda: refused(store, issued.key.reveal()), timeout=PROMISE_S)
        assert STALE_AFTER_S + POLL_INTERVAL_S < 1.0
    finally:
        admin.close()
        store.close()


def test_unknown_and_wrong_keys_are_refused(dsn: str) -> None:
    store = PostgresKeyStore(dsn)
    try:
        issued = store.create("acme")
        wrong = issued.key.reveal()[:-4] + "AAAA"
        with pytest.raises(Unauthenticated):
            store.authenticate(wrong)
        with pytest.raises(Unauthenticated):
            store.authenticate("lg_0123456789abcdef_" + "A" * 43)
        with pytest.raises(ValueError, match="tenant must be"):
            store.create("no spaces")
        assert not store.revoke("0123456789abcdef")
    finally:
        store.close()


def test_a_lost_database_fails_requests_closed(dsn: str) -> None:
    store = PostgresKeyStore(dsn)
    try:
        issued = store.create("acme")
        store.authenticate(issued.key.reveal())
        # Neither the change counter nor the keys can be read any more.
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("ALTER TABLE state_generations RENAME TO generations_gone")
            admin.execute("ALTER TABLE api_keys RENAME TO api_keys_gone")

        def unavailable() -> bool:
            try:
                store.authenticate(issued.key.reveal())
            except ServiceUnavailable:
                return True
            return False

        wait_until(unavailable, timeout=PROMISE_S)
    finally:
        store.close()


def test_an_unreachable_database_is_one_line() -> None:
    with pytest.raises(StateDatabaseUnavailable) as raised:
        PostgresKeyStore("postgresql://nobody:secret-pw@127.0.0.1:1/none")
    assert "secret-pw" not in str(raised.value)
    assert "\n" not in str(raised.value)
