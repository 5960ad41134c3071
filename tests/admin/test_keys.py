"""KeyAdmin on a real SQLite key store, and the gateway's store seeing its changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from localgate.admin.keys import KeyAdmin
from localgate.config import Settings, load_settings
from localgate.errors import InvalidArgument, NotFound, PermissionDenied
from localgate.identity import SqliteKeyStore


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(None, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})[0]


def test_create_list_revoke(settings: Settings) -> None:
    with KeyAdmin.open(settings) as admin:
        first = admin.create("acme", "billing")
        second = admin.create("globex")
        admin.revoke(first.key_id)
        listed = admin.list()
        of_globex = admin.list("globex")

    assert first.key.reveal().startswith(f"lg_{first.key_id}_")
    assert [(r.key_id, r.tenant, r.label) for r in listed] == [
        (first.key_id, "acme", "billing"),
        (second.key_id, "globex", ""),
    ]
    assert listed[0].revoked_at is not None
    assert listed[1].revoked_at is None
    assert [r.key_id for r in of_globex] == [second.key_id]
    assert first.key.reveal() not in repr(listed)


def test_the_gateways_store_sees_a_revocation_at_once(settings: Settings) -> None:
    gateway = SqliteKeyStore(settings.state_db_path)
    with KeyAdmin.open(settings) as admin:
        issued = admin.create("acme")
        assert gateway.authenticate(issued.key.reveal()).tenant == "acme"
        admin.revoke(issued.key_id)

    with pytest.raises(PermissionDenied):
        gateway.authenticate(issued.key.reveal())
    gateway.close()


def test_revoking_twice_is_fine_and_an_unknown_key_is_not_found(settings: Settings) -> None:
    with KeyAdmin.open(settings) as admin:
        issued = admin.create("acme")
        admin.revoke(issued.key_id)
        admin.revoke(issued.key_id)
        with pytest.raises(NotFound, match="no key with id nope"):
            admin.revoke("nope")


@pytest.mark.parametrize("tenant", ["", "a b", "-x", "x" * 65, "*"])
def test_a_bad_tenant_name_is_an_invalid_argument(settings: Settings, tenant: str) -> None:
    with KeyAdmin.open(settings) as admin:
        with pytest.raises(InvalidArgument, match="tenant must be 1-64 characters"):
            admin.create(tenant)
        assert admin.list() == []
