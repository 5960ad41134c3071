"""Retrieval collections: documents redacted, embedded and stored per tenant, then searched.

Every text is redacted by its owner's policy *before* it is embedded: the store never
holds personal data, neither as text nor as a vector (vectors can be inverted). A
document is redacted a page at a time, before it is cut into chunks, so a value that a
chunk boundary would split, or whose context words fall into the next chunk, is still
found. A file with something the policy blocks is refused whole.

Tenant ``"*"`` (``SHARED``) owns the collections shared by every tenant: a tenant's query
searches its own collection of the name asked for, or, if it has none, the shared one.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localgate.config import RagSettings, Settings
from localgate.errors import InvalidArgument, LocalgateError, NotFound
from localgate.rag.documents import chunk, extract, find_documents, is_markdown
from localgate.redaction.session import PolicyBlocked, RedactionSession
from localgate.redaction.stage import Detectors, new_session
from localgate.vectorstore.embedders import Embedder, Vectors
from localgate.vectorstore.store import CollectionInfo, VectorStore, check_collection_name

__all__ = ["SHARED", "FileProblem", "IngestReport", "Library", "Passage", "Progress"]

SHARED = "*"
_PURPOSE = "rag"
_SOURCE_KEY_FILE = "rag-ids.key"
_PATH_SEPARATORS = re.compile(r"[_/\\.+-]")
# Rows per Chroma write: well below the embedded store's maximum batch.
_BATCH = 1000

Progress = Callable[[int, int, int], None]
"""Called after each file with (files done, files in all, chunks stored so far)."""


@dataclass(frozen=True, slots=True)
class FileProblem:
    """A file that was not stored, and why."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What one ingest run stored and which files it left out."""

    files: int
    chunks: int
    refused: tuple[FileProblem, ...]  # the policy blocks something in them
    failed: tuple[FileProblem, ...]  # unreadable or of an unsupported type

    @property
    def ok(self) -> bool:
        """Whether every file was stored."""
        return not self.refused and not self.failed


@dataclass(frozen=True, slots=True)
class Passage:
    """A stored chunk found by a query; ``score`` is its cosine similarity to the query."""

    id: str
    text: str
    source: str
    page: int | None
    score: float


@dataclass(frozen=True, slots=True)
class _Piece:
    """A redacted chunk ready to store."""

    text: str
    page: int | None
    start: int
    end: int


class Library:
    """Ingests documents into, and searches, the tenants' retrieval collections.

    Every method talks to Chroma directly: call them on the store's thread, through
    ``store.sync`` (the CLI) or ``await store.run`` (the gateway).
    """

    def __init__(self, settings: Settings, store: VectorStore, embedder: Embedder) -> None:
        self._settings = settings
        self._key: bytes | None = None
        self._store = store
        self._embedder = embedder
        self._detectors = Detectors(settings.proxy.redaction_rules)

    def ingest(
        self,
        tenant: str,
        collection: str,
        paths: Iterable[Path],
        progress: Progress | None = None,
    ) -> IngestReport:
        """Store the files (directories are walked) in ``tenant``'s collection.

        A file stored before is replaced: its old chunks go, however many there were.
        A refused or unreadable file leaves what was stored of it before untouched.
        """
        check_collection_name(collection)
        rag = self._settings.rag
        files = find_documents(paths)
        target: Any = None
        stored = chunks = 0
        refused: list[FileProblem] = []
        failed: list[FileProblem] = []
        try:
            for done, path in enumerate(files, start=1):
                try:
                    pieces, shown = self._pieces(tenant, path, rag)
                    digest = _file_digest(path)
                except PolicyBlocked as exc:
                    refused.append(FileProblem(str(path), exc.message))
                except LocalgateError as exc:
                    failed.append(FileProblem(str(path), exc.message))
                else:
                    # Created on the first file stored: a run that stores nothing leaves
                    # no empty collection behind.
                    if target is None:
                        target = self._store.collection(
                            tenant, _PURPOSE, self._embedder.space, self._embedder.name, collection
                        )
                    self._replace(target, str(path.resolve()), shown, digest, pieces)
                    stored += 1
                    chunks += len(pieces)
                if progress is not None:
                    progress(done, len(files), chunks)
        finally:
            # Even after a failure part way: what was written must be seen by gateways.
            if target is not None:
                self._store.touch()
        return IngestReport(stored, chunks, tuple(refused), tuple(failed))

    def query(
        self,
        tenant: str,
        collection: str,
        text: str,
        top_k: int | None = None,
        min_similarity: float | None = None,
        *,
        redacted: bool = False,
    ) -> list[Passage]:
        """The passages closest to ``text``, best first, in ``tenant``'s collection.

        A tenant without its own collection of that name searches the shared one, so a
        tenant's own collection takes the place of a shared one of the same name.
        ``top_k`` and ``min_similarity`` default to the tenant's ``rag`` settings.
        ``redacted`` says ``text`` has been through the tenant's redaction already (a
        request's last turn); else it is redacted here first.
        """
        check_collection_name(collection)
        rag = self._settings.rag_for(tenant)
        limit = rag.top_k if top_k is None else top_k
        floor = rag.min_similarity if min_similarity is None else min_similarity
        if limit < 1:
            raise InvalidArgument(f"top_k must be at least 1, not {limit}.")
        target = self._searched(tenant, collection)
        session = None if redacted else self._session(tenant)
        if session is not None:
            text = session.redact(text, "the query")
        if not text.strip():
            raise InvalidArgument("The query is empty.")
        return _search(target, self._embedder.embed([text]), limit, floor)

    def collections(self, tenant: str | None = None) -> list[CollectionInfo]:
        """Retrieval collections: all, or those ``tenant`` searches (its own and shared)."""
        if tenant is None:
            return self._store.collections(purpose=_PURPOSE)
        found = self._store.collections(tenant, _PURPOSE)
        if tenant != SHARED:
            found += self._store.collections(SHARED, _PURPOSE)
        return found

    def delete(self, tenant: str, collection: str) -> int:
        """Drop ``tenant``'s collection in every embedding space; how many were dropped."""
        check_collection_name(collection)
        names = [
            info.name
            for info in self._store.collections(tenant, _PURPOSE)
            if info.collection == collection
        ]
        for name in names:
            self._store.drop(name)
        return len(names)

    # -- ingesting -------------------------------------------------------------

    def _pieces(self, tenant: str, path: Path, rag: RagSettings) -> tuple[list[_Piece], str]:
        """The redacted chunks, and the file's path as it may be stored (redacted too)."""
        session = self._session(tenant)
        # Only the file's name is kept, and a name can name a person (张伟-合同.pdf): it is
        # redacted, read as words (separators as spaces: John_Smith_review reads John Smith).
        shown = path.name
        if session is not None:
            words = _PATH_SEPARATORS.sub(" ", path.stem)
            redacted = session.redact(words, "the file's name")
            if redacted != words:
                shown = redacted + path.suffix
        markdown = is_markdown(path)
        pieces: list[_Piece] = []
        for section in extract(path):
            text = section.text
            if session is not None:
                where = path.name if section.page is None else f"page {section.page}"
                text = session.redact(text, where)
            pieces += [
                _Piece(piece.text, section.page, piece.start, piece.end)
                for piece in chunk(text, rag.chunk_chars, rag.chunk_overlap, markdown=markdown)
            ]
        return pieces, shown

    def _replace(
        self, target: Any, path: str, shown: str, digest: str, pieces: Sequence[_Piece]
    ) -> None:
        # Embedded before anything is deleted: a failing embedder leaves the old version.
        vectors = self._embedder.embed([piece.text for piece in pieces])
        # The file is known by a keyed digest of its real path: two names redacted alike
        # ([PERSON].pdf) stay two files, and a list of names cannot be tried against it.
        source_id = hmac.new(self._source_key(), path.encode(), hashlib.sha256).hexdigest()
        prefix = source_id[:16]
        now = int(time.time())
        target.delete(where={"source_id": source_id})
        for first in range(0, len(pieces), _BATCH):
            batch = pieces[first : first + _BATCH]
            target.upsert(
                ids=[f"{prefix}-{first + index}" for index in range(len(batch))],
                embeddings=vectors[first : first + len(batch)],
                documents=[piece.text for piece in batch],
                metadatas=[
                    _metadata(shown, source_id, digest, now, first + index, piece)
                    for index, piece in enumerate(batch)
                ],
            )

    def _source_key(self) -> bytes:
        """The key of source ids: ``<data_dir>/rag-ids.key``, made on first use."""
        if self._key is None:
            path = self._settings.data_dir / _SOURCE_KEY_FILE
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):  # another process was first
                    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(descriptor, "wb") as handle:
                        handle.write(secrets.token_bytes(32))
            self._key = path.read_bytes()
        return self._key

    # -- querying --------------------------------------------------------------

    def _searched(self, tenant: str, collection: str) -> Any:
        owners = [tenant] if tenant == SHARED else [tenant, SHARED]
        for owner in owners:
            found = self._store.collection(
                owner,
                _PURPOSE,
                self._embedder.space,
                self._embedder.name,
                collection,
                create=False,
            )
            if found is not None:
                return found
        # Only now look further (listing is slower than opening by name): is it there,
        # built by another embedder?
        elsewhere = sorted(
            {
                info.embedder
                for owner in owners
                for info in self._store.collections(owner, _PURPOSE)
                if info.collection == collection
            }
        )
        if elsewhere:
            raise NotFound(
                f"Retrieval collection {collection!r} was ingested with {', '.join(elsewhere)}, "
                f"not the configured embedder {self._embedder.name}; re-ingest it with the "
                "configured embedder."
            )
        which = (
            f"No shared retrieval collection {collection!r}"
            if tenant == SHARED
            else f"No retrieval collection {collection!r} of tenant {tenant!r}, nor a shared one"
        )
        raise NotFound(f"{which}; documents are added with 'localgate rag ingest'.")

    # -- redaction -------------------------------------------------------------

    def _session(self, tenant: str) -> RedactionSession | None:
        """A fresh session with the owner's policy; None where the policy is off."""
        policy = (
            self._settings.proxy.redaction
            if tenant == SHARED
            else self._settings.redaction_for(tenant)
        )
        if not policy.enabled:
            return None
        detector = self._detectors.for_policy(policy)
        return new_session(self._settings, policy, detector, reversible=False)


def _file_digest(path: Path) -> str:
    try:
        with path.open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError as exc:
        raise InvalidArgument(f"{path}: cannot read the file: {exc.strerror}") from exc


def _metadata(
    source: str, source_id: str, digest: str, now: int, index: int, piece: _Piece
) -> dict[str, str | int]:
    # start/end locate the chunk in its page's (or file's) text as redacted.
    metadata: dict[str, str | int] = {
        "source": source,
        "source_id": source_id,
        "chunk": index,
        "start": piece.start,
        "end": piece.end,
        "sha256": digest,
        "ingested_at": now,
    }
    if piece.page is not None:
        metadata["page"] = piece.page
    return metadata


def _search(target: Any, vector: Vectors, limit: int, floor: float) -> list[Passage]:
    # Chroma returns fewer than n_results when the collection holds fewer.
    found = target.query(
        query_embeddings=vector,
        n_results=limit,
        include=["documents", "metadatas", "distances"],
    )
    passages = []
    for passage_id, text, metadata, distance in zip(
        found["ids"][0],
        found["documents"][0],
        found["metadatas"][0],
        found["distances"][0],
        strict=True,
    ):
        # The collections use cosine distance: similarity is 1 - distance.
        score = 1.0 - float(distance)
        if score >= floor:
            page = metadata.get("page")
            passages.append(
                Passage(
                    id=passage_id,
                    text=text,
                    source=str(metadata["source"]),
                    page=int(page) if page is not None else None,
                    score=score,
                )
            )
    return passages
