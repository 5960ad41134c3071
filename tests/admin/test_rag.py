"""RagAdmin on a real embedded ChromaDB with the builtin embedder."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from localgate.admin.rag import SHARED, RagAdmin, RetrievalCollection, describe_owner
from localgate.config import load_settings
from localgate.errors import InvalidArgument, NotFound
from tests.rag.fixtures.texts import CONFIG, LEAVE, VPN


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "leave.txt").write_text(LEAVE)
    (folder / "vpn.md").write_text(f"# VPN\n\n{VPN}\n")
    return folder


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[RagAdmin]:
    config = tmp_path / "localgate.yaml"
    config.write_text(CONFIG)
    settings = load_settings(config, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})[0]
    with RagAdmin.open(settings) as opened:
        yield opened


def test_ingest_query_list_delete(admin: RagAdmin, docs: Path) -> None:
    report = admin.ingest([docs], "handbook", "acme")
    admin.ingest([docs / "vpn.md"], "handbook")
    passages = admin.query("员工每年有几天带薪年假", "handbook", "acme")
    shared = admin.query("install the VPN client", "handbook", "globex")
    listed = [(info.tenant, info.collection, info.count) for info in admin.collections()]
    of_acme = admin.collection("handbook", "acme")

    admin.delete("handbook", "acme")

    assert (report.files, report.chunks, report.ok) == (2, 2, True)
    assert passages[0].source == "leave.txt"
    assert passages[0].text == LEAVE
    assert [passage.source for passage in shared] == ["vpn.md"]  # globex falls back on shared
    assert listed == [(SHARED, "handbook", 1), ("acme", "handbook", 2)]
    assert of_acme == RetrievalCollection("acme", "handbook", 2)
    assert [(info.tenant, info.collection) for info in admin.collections()] == [
        (SHARED, "handbook")
    ]
    with pytest.raises(NotFound, match="no retrieval collection 'handbook' of tenant acme"):
        admin.collection("handbook", "acme")
    with pytest.raises(NotFound, match="no retrieval collection 'handbook' of tenant acme"):
        admin.delete("handbook", "acme")


def test_a_file_the_policy_blocks_is_refused_whole(admin: RagAdmin, docs: Path) -> None:
    (docs / "ids.txt").write_text("身份证 11010519491231002X")

    report = admin.ingest([docs], "hr", "strict")

    assert (report.files, report.ok) == (2, False)
    assert [Path(problem.path).name for problem in report.refused] == ["ids.txt"]
    assert "CN_RESIDENT_ID" in report.refused[0].reason


def test_bad_names_and_no_documents_are_invalid_arguments(
    admin: RagAdmin, docs: Path, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()

    with pytest.raises(
        InvalidArgument, match=re.escape("no documents found; supported types are .txt")
    ):
        admin.ingest([tmp_path / "empty"], "hr")
    with pytest.raises(InvalidArgument, match=re.escape("Collection name '../etc' is not valid")):
        admin.ingest([docs], "../etc")
    # An empty tenant (an unset variable) is refused rather than taken for "shared".
    with pytest.raises(InvalidArgument, match="'' is not a tenant name"):
        admin.ingest([docs], "hr", "")
    with pytest.raises(NotFound, match="nor a shared one"):
        admin.query("年假", "nothing", "acme")
    assert admin.collections() == []


def test_owners_are_described_as_messages_say_them() -> None:
    assert describe_owner(SHARED) == "shared by every tenant"
    assert describe_owner("acme") == "of tenant acme"
