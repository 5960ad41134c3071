"""``localgate rag`` as an operator uses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from localgate.cli.rag import rag
from tests.rag.fixtures.texts import CONFIG, LEAVE, VPN


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOCALGATE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("LOCALGATE_CONFIG", raising=False)
    path = tmp_path / "localgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "leave.txt").write_text(LEAVE)
    (folder / "vpn.md").write_text(f"# VPN\n\n{VPN}\n")
    return folder


def run(config: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(rag, ["--config", str(config), *args], input=stdin)


def test_ingest_then_query(config: Path, docs: Path) -> None:
    ingested = run(config, "ingest", str(docs), "--collection", "handbook", "--tenant", "acme")
    found = run(
        config, "query", "员工每年有几天带薪年假", "--collection", "handbook", "--tenant", "acme"
    )

    assert ingested.exit_code == 0, ingested.output
    assert ingested.stdout == (
        "Stored 2 file(s), 2 chunk(s) in collection 'handbook' of tenant acme.\n"
    )
    assert found.exit_code == 0, found.output
    first, text = found.stdout.splitlines()[:2]
    assert first.endswith("  leave.txt")
    assert text == f"    {LEAVE}"


def test_ingest_and_query_json(config: Path, docs: Path) -> None:
    ingested = run(config, "ingest", str(docs), "--collection", "handbook", "--json")
    found = run(config, "query", "install the VPN client", "--collection", "handbook", "--json")

    assert json.loads(ingested.stdout) == {
        "tenant": "*",
        "collection": "handbook",
        "files": 2,
        "chunks": 2,
        "refused": [],
        "failed": [],
    }
    passages = [json.loads(line) for line in found.stdout.splitlines()]
    assert len(passages) == 1  # the leave policy is below rag.min_similarity
    assert passages[0]["text"] == f"# VPN\n\n{VPN}"
    assert passages[0]["page"] is None
    assert set(passages[0]) == {"id", "score", "source", "page", "text"}


def test_refused_and_unreadable_files_are_reported_and_exit_1(
    config: Path, docs: Path, tmp_path: Path
) -> None:
    (docs / "ids.txt").write_text("身份证 11010519491231002X")
    (docs / "legacy.txt").write_bytes(LEAVE.encode("gb18030"))

    result = run(config, "ingest", str(docs), "--collection", "hr", "--tenant", "strict")

    assert result.exit_code == 1
    assert result.stdout.startswith("Stored 2 file(s), 2 chunk(s)")
    assert f"refused {docs / 'ids.txt'}: " in result.stderr
    assert "CN_RESIDENT_ID" in result.stderr
    assert f"failed  {docs / 'legacy.txt'}: " in result.stderr
    assert "not UTF-8" in result.stderr


def test_no_documents_is_an_error(config: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    result = run(config, "ingest", str(tmp_path / "empty"), "--collection", "hr")

    assert result.exit_code == 1
    assert "no documents found; supported types are .txt" in result.stderr


def test_a_bad_collection_name_is_a_usage_error(config: Path, docs: Path) -> None:
    result = run(config, "ingest", str(docs), "--collection", "../etc")

    assert result.exit_code == 2
    assert "Invalid value for '--collection': Collection name '../etc' is not valid" in (
        result.stderr
    )


def test_a_missing_collection_is_a_clean_error(config: Path) -> None:
    result = run(config, "query", "年假", "--collection", "nothing", "--tenant", "acme")

    assert result.exit_code == 1
    assert result.stderr == (
        "Error: No retrieval collection 'nothing' of tenant 'acme', nor a shared one; "
        "documents are added with 'localgate rag ingest'.\n"
    )


def test_list(config: Path, docs: Path) -> None:
    run(config, "ingest", str(docs), "--collection", "handbook")
    run(config, "ingest", str(docs / "leave.txt"), "--collection", "hr", "--tenant", "acme")
    run(config, "ingest", str(docs / "leave.txt"), "--collection", "hr", "--tenant", "globex")

    table = run(config, "list", "--tenant", "acme")
    lines = [json.loads(line) for line in run(config, "list", "--json").stdout.splitlines()]

    assert table.exit_code == 0
    rows = [line.split() for line in table.stdout.splitlines()]
    assert rows == [
        ["TENANT", "COLLECTION", "CHUNKS", "EMBEDDER"],
        ["acme", "hr", "1", "localgate-terms-512"],
        ["*", "(shared)", "handbook", "2", "localgate-terms-512"],
    ]
    assert [(line["tenant"], line["collection"], line["chunks"]) for line in lines] == [
        ("*", "handbook", 2),
        ("acme", "hr", 1),
        ("globex", "hr", 1),
    ]


def test_list_when_empty(config: Path) -> None:
    assert run(config, "list").stdout == "No retrieval collections.\n"


def test_delete_asks_first(config: Path, docs: Path) -> None:
    run(config, "ingest", str(docs), "--collection", "handbook", "--tenant", "acme")

    kept = run(config, "delete", "--collection", "handbook", "--tenant", "acme", stdin="n\n")
    deleted = run(config, "delete", "--collection", "handbook", "--tenant", "acme", stdin="y\n")

    assert kept.exit_code == 1
    assert "Delete collection 'handbook' of tenant acme (2 chunks)?" in kept.output
    assert "Aborted" in kept.stderr
    assert deleted.exit_code == 0
    assert deleted.stdout.endswith("Deleted collection 'handbook' of tenant acme.\n")
    assert run(config, "list").stdout == "No retrieval collections.\n"


def test_delete_yes_and_a_missing_collection(config: Path, docs: Path) -> None:
    run(config, "ingest", str(docs), "--collection", "handbook")

    deleted = run(config, "delete", "--collection", "handbook", "--yes")
    again = run(config, "delete", "--collection", "handbook", "--yes")

    assert deleted.stdout == "Deleted collection 'handbook' shared by every tenant.\n"
    assert again.exit_code == 1
    assert "no retrieval collection 'handbook' shared by every tenant" in again.stderr


def test_an_empty_tenant_is_refused_not_taken_for_shared(config: Path, docs: Path) -> None:
    result = CliRunner().invoke(
        rag, ["--config", str(config), "ingest", str(docs), "--collection", "hr", "--tenant", ""]
    )

    assert result.exit_code == 2
    assert "leave --tenant out" in result.output
