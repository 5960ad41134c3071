"""Retrieval collections through the admin API: listed per tenant, deleted on record; a
tenant's collection is not another's to delete."""

from __future__ import annotations

from pathlib import Path

from localgate.admin.operators import Role
from localgate.admin.rag import RagAdmin
from localgate.adminapi.trail import ADMIN_LOG
from tests.adminapi.conftest import AdminApi

API = "/admin/api/v1"


def test_a_retrieval_collection_is_listed_and_deleted_on_record(
    admin_api: AdminApi, tmp_path: Path
) -> None:
    (tmp_path / "handbook.md").write_text("Expenses are filed within 30 days.\n")
    with RagAdmin.open(admin_api.settings) as rag:
        rag.ingest([tmp_path], "handbook", "acme")

    with admin_api.client(Role.SECURITY) as client:
        listed = client.get(f"{API}/rag/collections", params={"tenant": "acme"}).json()
        wrong_owner = client.delete(f"{API}/rag/collections/handbook", params={"tenant": "globex"})
        deleted = client.delete(f"{API}/rag/collections/handbook", params={"tenant": "acme"})
        after = client.get(f"{API}/rag/collections", params={"tenant": "acme"}).json()
    with admin_api.client(Role.AUDITOR) as client:
        trail = client.get(
            f"{API}/audit/records", params={"tenant": ADMIN_LOG, "limit": 500}
        ).json()["records"]

    assert [(c["collection"], c["tenant"]) for c in listed["collections"]] == [("handbook", "acme")]
    assert listed["collections"][0]["count"] >= 1
    assert wrong_owner.status_code == 404
    assert deleted.status_code == 200, deleted.text
    assert after["collections"] == []
    deletions = [
        (r["header"]["target"], r["header"]["outcome"])
        for r in trail
        if r["header"]["action"] == "rag.delete"
    ]
    # The refused attempt is on record, and that it failed; then the deletion.
    assert deletions[-3:] == [
        ({"collection": "handbook", "tenant": "globex"}, "attempted"),
        ({"collection": "handbook", "tenant": "globex"}, "failed: NOT_FOUND"),
        ({"collection": "handbook", "tenant": "acme"}, "attempted"),
    ]
