"""Ingesting and searching retrieval collections, on a real embedded ChromaDB."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from localgate.config import Settings
from localgate.errors import InvalidArgument, NotFound
from localgate.rag.library import SHARED, Library, Passage
from localgate.redaction.session import PolicyBlocked
from localgate.vectorstore.embedders import HashingEmbedder, Vectors
from localgate.vectorstore.store import VectorStore
from tests.cache.helpers import settings_from
from tests.rag.fixtures.pdf import text_pdf
from tests.rag.fixtures.texts import CONFIG, EXPENSES, LEAVE, VPN

PERSONAL = ("张伟", "13812345678", "11010519491231002X", "zhang.wei@example.com")


class RecordingEmbedder:
    """The built-in embedder, remembering every text it was asked to embed."""

    def __init__(self, dimensions: int = 512) -> None:
        self._inner = HashingEmbedder(dimensions)
        self.name = self._inner.name
        self.space = self._inner.space
        self.dimensions = dimensions
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed with the built-in embedder and keep the texts."""
        self.texts += texts
        return self._inner.embed(texts)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_from(tmp_path, CONFIG)


@pytest.fixture
def store(settings: Settings) -> Iterator[VectorStore]:
    store = VectorStore(settings)
    yield store
    store.close()


@pytest.fixture
def embedder() -> RecordingEmbedder:
    return RecordingEmbedder()


@pytest.fixture
def library(settings: Settings, store: VectorStore, embedder: RecordingEmbedder) -> Library:
    return Library(settings, store, embedder)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "leave.txt").write_text(LEAVE)
    (folder / "expenses.md").write_text(f"# 报销\n\n{EXPENSES}\n")
    (folder / "vpn.html").write_text(f"<title>VPN</title><p>{VPN}</p>")
    return folder


def stored(store: VectorStore, embedder: RecordingEmbedder, tenant: str, name: str) -> Any:
    """Everything in one collection, as Chroma holds it."""

    def read() -> Any:
        found = store.collection(tenant, "rag", embedder.space, embedder.name, name, create=False)
        assert found is not None
        return found.get(include=["documents", "metadatas", "embeddings"])

    return store.sync(read)


def sources(passages: list[Passage]) -> list[str]:
    return [Path(passage.source).name for passage in passages]


def test_ingest_then_query_finds_the_relevant_passage_first(
    library: Library, store: VectorStore, docs: Path
) -> None:
    report = store.sync(library.ingest, "acme", "handbook", [docs])

    assert report.ok
    assert (report.files, report.chunks) == (3, 3)
    leave = store.sync(library.query, "acme", "handbook", "员工每年有几天带薪年假")
    expenses = store.sync(library.query, "acme", "handbook", "差旅费用多久内提交报销申请？")
    vpn = store.sync(library.query, "acme", "handbook", "how do I install the VPN client")
    assert sources(leave)[0] == "leave.txt"
    assert leave[0].text == LEAVE
    assert leave[0].page is None
    assert 0.3 <= leave[0].score <= 1
    assert sources(expenses)[0] == "expenses.md"
    assert sources(vpn)[0] == "vpn.html"


def test_metadata_locates_each_chunk(
    library: Library, store: VectorStore, embedder: RecordingEmbedder, tmp_path: Path
) -> None:
    path = tmp_path / "long.txt"
    path.write_text("".join(f"第{n}条：员工应当遵守公司的信息安全规定。" for n in range(30)))

    report = store.sync(library.ingest, "acme", "rules", [path])
    everything = stored(store, embedder, "acme", "rules")

    assert report.chunks == len(everything["ids"]) > 2
    text = path.read_text()
    for document, metadata in zip(everything["documents"], everything["metadatas"], strict=True):
        assert metadata["source"] == path.name
        assert text[metadata["start"] : metadata["end"]] == document
        assert len(metadata["sha256"]) == 64
        assert metadata["ingested_at"] > 0
        assert "page" not in metadata
    assert sorted(m["chunk"] for m in everything["metadatas"]) == list(range(report.chunks))


def test_pdf_passages_carry_their_page(
    library: Library, store: VectorStore, tmp_path: Path
) -> None:
    path = tmp_path / "manual.pdf"
    path.write_bytes(text_pdf(["Security badges are issued at reception", "Parking is free"]))

    store.sync(library.ingest, "acme", "manual", [path])
    [best, *_] = store.sync(library.query, "acme", "manual", "where is parking free")

    assert (best.text, best.page) == ("Parking is free", 2)


def test_personal_data_never_reaches_the_store_nor_the_embedder(
    library: Library,
    store: VectorStore,
    embedder: RecordingEmbedder,
    settings: Settings,
    tmp_path: Path,
) -> None:
    # The file's name holds personal data too.
    path = tmp_path / "客户张伟-13812345678.txt"
    path.write_text(
        "客户档案\n\n联系人：张伟 13812345678 11010519491231002X zhang.wei@example.com\n\n"
        + "".join(f"第{n}次回访记录：客户张伟对服务满意，电话13812345678。" for n in range(12))
    )

    store.sync(library.ingest, "acme", "crm", [path])
    passages = store.sync(library.query, "acme", "crm", "张伟的电话13812345678", 50, 0.0)
    everything = stored(store, embedder, "acme", "crm")

    readable = repr(everything["documents"]) + repr(everything["metadatas"])
    readable += repr(passages) + repr(embedder.texts)
    for value in PERSONAL:
        assert value not in readable
    for placeholder in ("[PERSON]", "[CN_MOBILE]", "[CN_RESIDENT_ID]", "[EMAIL]"):
        assert placeholder in readable
    # The vectors are those of the redacted text, not of the original.
    vectors = np.asarray(everything["embeddings"])
    assert np.allclose(vectors, embedder._inner.embed(everything["documents"]), atol=1e-6)
    # Not in Chroma's files either (its SQLite, write-ahead log and full-text index).
    for file in settings.vector_store_path.rglob("*"):
        if file.is_file():
            content = file.read_bytes()
            assert not any(value.encode() in content for value in PERSONAL), file


def test_two_files_whose_names_redact_alike_stay_two_files(
    library: Library, store: VectorStore, embedder: RecordingEmbedder, tmp_path: Path
) -> None:
    one, two = tmp_path / "13812345678.txt", tmp_path / "13900001111.txt"
    one.write_text(LEAVE)
    two.write_text(VPN)

    store.sync(library.ingest, "acme", "notes", [one, two])
    store.sync(library.ingest, "acme", "notes", [one])  # replaces one's chunks only
    everything = stored(store, embedder, "acme", "notes")

    assert {Path(str(m["source"])).name for m in everything["metadatas"]} == {"[CN_MOBILE].txt"}
    assert len({m["source_id"] for m in everything["metadatas"]}) == 2


def test_reingesting_a_file_replaces_all_its_old_chunks(
    library: Library, store: VectorStore, embedder: RecordingEmbedder, tmp_path: Path
) -> None:
    path = tmp_path / "policy.txt"
    path.write_text("".join(f"旧版第{n}条：加班需提前申请。" for n in range(40)))
    other = tmp_path / "other.txt"
    other.write_text(VPN)
    first = store.sync(library.ingest, "acme", "hr", [path, other])
    ids_before = set(stored(store, embedder, "acme", "hr")["ids"])

    path.write_text("新版：加班无需申请。")
    second = store.sync(library.ingest, "acme", "hr", [path])
    everything = stored(store, embedder, "acme", "hr")

    assert first.chunks > 3
    assert second.chunks == 1
    assert sorted(everything["documents"]) == sorted(["新版：加班无需申请。", VPN])
    # Ids are stable per (file, chunk index): the new first chunk took the old one's id.
    assert set(everything["ids"]) < ids_before


def test_a_file_with_blocked_data_is_refused_whole_and_the_others_stored(
    library: Library, store: VectorStore, embedder: RecordingEmbedder, tmp_path: Path
) -> None:
    good = tmp_path / "good.txt"
    good.write_text(LEAVE)
    bad = tmp_path / "bad.txt"
    bad.write_text(LEAVE * 10 + "身份证号 11010519491231002X")

    report = store.sync(library.ingest, "strict", "hr", [bad, good])

    assert (report.files, report.ok) == (1, False)
    assert [problem.path for problem in report.refused] == [str(bad)]
    assert "CN_RESIDENT_ID" in report.refused[0].reason
    everything = stored(store, embedder, "strict", "hr")
    assert {m["source"] for m in everything["metadatas"]} == {good.name}


def test_a_refused_new_version_leaves_the_stored_one(
    library: Library, store: VectorStore, embedder: RecordingEmbedder, tmp_path: Path
) -> None:
    path = tmp_path / "hr.txt"
    path.write_text(LEAVE)
    store.sync(library.ingest, "strict", "hr", [path])

    path.write_text("身份证号 11010519491231002X")
    report = store.sync(library.ingest, "strict", "hr", [path])

    assert len(report.refused) == 1
    assert stored(store, embedder, "strict", "hr")["documents"] == [LEAVE]


def test_unreadable_files_are_reported_and_the_others_stored(
    library: Library, store: VectorStore, tmp_path: Path
) -> None:
    good = tmp_path / "good.txt"
    good.write_text(LEAVE)
    gbk = tmp_path / "gbk.txt"
    gbk.write_bytes(LEAVE.encode("gb18030"))
    word = tmp_path / "letter.docx"
    word.write_bytes(b"PK")

    report = store.sync(library.ingest, "acme", "hr", [gbk, good, word])

    assert report.files == 1
    assert [(Path(p.path).name, p.reason.split(": ")[1]) for p in report.failed] == [
        ("gbk.txt", "not UTF-8 text (invalid byte at offset 0); convert it to UTF-8 first, e.g. "
         "iconv -f GB18030 -t UTF-8"),
        ("letter.docx", "unsupported file type '.docx'; supported types are .txt, .md, "
         ".markdown, .html, .htm, .pdf"),
    ]  # fmt: skip


def test_a_run_that_stores_nothing_creates_no_collection(
    library: Library, store: VectorStore, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.docx"
    bad.write_bytes(b"PK")

    store.sync(library.ingest, "acme", "hr", [bad])

    assert store.sync(library.collections) == []


def test_progress_is_reported_after_each_file(
    library: Library, store: VectorStore, docs: Path
) -> None:
    calls: list[tuple[int, int, int]] = []

    store.sync(library.ingest, "acme", "handbook", [docs], lambda *a: calls.append(a))

    assert calls == [(1, 3, 1), (2, 3, 2), (3, 3, 3)]


def test_a_tenant_never_sees_another_tenants_passages(
    library: Library, store: VectorStore, tmp_path: Path
) -> None:
    for owner, collection, text in (
        ("acme", "handbook", LEAVE),
        ("acme", "private", LEAVE),
        (SHARED, "handbook", VPN),
    ):
        path = tmp_path / f"{owner.strip('*') or 'shared'}-{collection}.txt"
        path.write_text(text)
        store.sync(library.ingest, owner, collection, [path])

    def seen(tenant: str, collection: str) -> list[str]:
        return sources(store.sync(library.query, tenant, collection, LEAVE, 50, 0.0))

    # Same question, same collection name: globex is answered from the shared collection.
    assert seen("acme", "handbook") == ["acme-handbook.txt"]
    assert seen("globex", "handbook") == ["shared-handbook.txt"]
    assert seen(SHARED, "handbook") == ["shared-handbook.txt"]
    with pytest.raises(NotFound, match="No retrieval collection 'private' of tenant 'globex'"):
        seen("globex", "private")


def test_a_tenants_own_collection_takes_the_place_of_a_shared_one(
    library: Library, store: VectorStore, tmp_path: Path
) -> None:
    shared = tmp_path / "shared.txt"
    shared.write_text(LEAVE)
    store.sync(library.ingest, SHARED, "handbook", [shared])
    own = tmp_path / "own.txt"
    own.write_text(EXPENSES)

    before = store.sync(library.query, "acme", "handbook", LEAVE, 50, 0.0)
    store.sync(library.ingest, "acme", "handbook", [own])
    after = store.sync(library.query, "acme", "handbook", LEAVE, 50, 0.0)

    assert sources(before) == ["shared.txt"]
    assert sources(after) == ["own.txt"]


def test_the_shared_collection_is_redacted_by_the_global_policy(
    library: Library, store: VectorStore, embedder: RecordingEmbedder, tmp_path: Path
) -> None:
    path = tmp_path / "shared.txt"
    path.write_text("值班电话 13812345678，身份证 11010519491231002X")

    # Tenant "strict" blocks resident ids; the shared collection follows the global policy.
    report = store.sync(library.ingest, SHARED, "oncall", [path])

    assert report.ok
    assert stored(store, embedder, SHARED, "oncall")["documents"] == [
        "值班电话 [CN_MOBILE]，身份证 [CN_RESIDENT_ID]"
    ]


def test_a_tenant_whose_policy_is_off_stores_text_as_written(
    library: Library, store: VectorStore, embedder: RecordingEmbedder, tmp_path: Path
) -> None:
    path = tmp_path / "raw.txt"
    path.write_text("值班电话 13812345678")

    store.sync(library.ingest, "open", "oncall", [path])

    assert stored(store, embedder, "open", "oncall")["documents"] == ["值班电话 13812345678"]


def test_a_query_is_redacted_by_the_tenants_policy(
    library: Library, store: VectorStore, docs: Path
) -> None:
    store.sync(library.ingest, "strict", "handbook", [docs])

    with pytest.raises(PolicyBlocked, match="CN_RESIDENT_ID"):
        store.sync(library.query, "strict", "handbook", "11010519491231002X 的年假")


def test_passages_below_the_similarity_floor_are_dropped(
    library: Library, store: VectorStore, docs: Path
) -> None:
    store.sync(library.ingest, "acme", "handbook", [docs])

    loose = store.sync(library.query, "acme", "handbook", "年假", 10, 0.0)
    strict = store.sync(library.query, "acme", "handbook", "年假", 10, 0.99)

    assert len(loose) == 3
    assert [p.score for p in loose] == sorted((p.score for p in loose), reverse=True)
    assert strict == []


def test_querying_a_missing_collection_is_not_found(library: Library, store: VectorStore) -> None:
    with pytest.raises(
        NotFound, match="No retrieval collection 'nothing' of tenant 'acme', nor a shared one"
    ):
        store.sync(library.query, "acme", "nothing", "年假")
    with pytest.raises(NotFound, match="No shared retrieval collection 'nothing'"):
        store.sync(library.query, SHARED, "nothing", "年假")


def test_another_tenants_collection_is_not_found(
    library: Library, store: VectorStore, docs: Path
) -> None:
    store.sync(library.ingest, "acme", "handbook", [docs])

    with pytest.raises(NotFound, match="No retrieval collection 'handbook' of tenant 'globex'"):
        store.sync(library.query, "globex", "handbook", "年假")


def test_a_collection_of_another_embedder_says_to_reingest(
    settings: Settings, store: VectorStore, library: Library, docs: Path
) -> None:
    old = Library(settings, store, HashingEmbedder(256))
    store.sync(old.ingest, "acme", "handbook", [docs])

    with pytest.raises(NotFound, match=r"ingested with localgate-terms-256.*re-ingest"):
        store.sync(library.query, "acme", "handbook", "年假")


def test_bad_names_and_empty_queries_are_invalid(
    library: Library, store: VectorStore, docs: Path
) -> None:
    store.sync(library.ingest, "acme", "handbook", [docs])

    with pytest.raises(InvalidArgument, match="Collection name 'a b' is not valid"):
        store.sync(library.ingest, "acme", "a b", [docs])
    with pytest.raises(InvalidArgument, match="The query is empty"):
        store.sync(library.query, "acme", "handbook", "  ")


def test_collections_of_a_tenant_include_the_shared_ones(
    library: Library, store: VectorStore, docs: Path
) -> None:
    store.sync(library.ingest, "acme", "mine", [docs])
    store.sync(library.ingest, "globex", "theirs", [docs])
    store.sync(library.ingest, SHARED, "everyone", [docs])

    every = store.sync(library.collections)
    acme = store.sync(library.collections, "acme")

    assert {(info.tenant, info.collection) for info in every} == {
        ("acme", "mine"),
        ("globex", "theirs"),
        (SHARED, "everyone"),
    }
    assert {(info.tenant, info.collection, info.count) for info in acme} == {
        ("acme", "mine", 3),
        (SHARED, "everyone", 3),
    }


def test_delete_drops_the_collection_in_every_space_and_nothing_else(
    settings: Settings, store: VectorStore, library: Library, docs: Path
) -> None:
    store.sync(library.ingest, "acme", "handbook", [docs])
    store.sync(Library(settings, store, HashingEmbedder(256)).ingest, "acme", "handbook", [docs])
    store.sync(library.ingest, "globex", "handbook", [docs])

    dropped = store.sync(library.delete, "acme", "handbook")

    assert dropped == 2
    assert [(i.tenant, i.collection) for i in store.sync(library.collections)] == [
        ("globex", "handbook")
    ]
    assert store.sync(library.delete, "acme", "handbook") == 0
