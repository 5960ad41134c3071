"""The checkpoint signer's election on PostgreSQL: one leader, a standby takes over when
the leader's connection goes (a replica killed: the server ends its session)."""

from __future__ import annotations

import psycopg

from localgate.audit.database import PostgresDatabase
from localgate.audit.election import PostgresElection
from tests.conftest import wait_until


def elector(dsn: str, log_name: str = "localgate") -> PostgresElection:
    return PostgresElection(lambda: PostgresDatabase(dsn), log_name)


def test_one_replica_leads_and_a_standby_takes_over_when_it_goes(dsn: str) -> None:
    first, second = elector(dsn), elector(dsn)
    try:
        assert first.lead()
        assert not second.lead()
        assert first.lead()  # still
        first.close()
        # The server ends the closed session, and frees its lock, on its own time.
        wait_until(second.lead)
        assert not first.lead()
    finally:
        first.close()
        second.close()


def test_a_leader_whose_session_the_server_ended_stops_signing(dsn: str) -> None:
    first, second = elector(dsn), elector(dsn)
    try:
        assert first.lead()
        assert first._db is not None
        leader = first._db.execute("SELECT pg_backend_pid()").fetchone()[0]
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (leader,))
        assert not first.lead()  # its session is gone, and with it the lock
        # pg_terminate_backend only signals: the lock goes when the backend has exited.
        wait_until(second.lead)
        assert not first.lead()
    finally:
        first.close()
        second.close()


def test_each_log_name_elects_its_own_signer(dsn: str) -> None:
    one, other = elector(dsn, "one"), elector(dsn, "other")
    try:
        assert one.lead()
        assert other.lead()
    finally:
        one.close()
        other.close()
