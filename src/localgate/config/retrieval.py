"""The local embedder, the vector cache and retrieval."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from localgate.config.base import Section

__all__ = [
    "CacheSettings",
    "EmbeddingSettings",
    "RagSettings",
    "SemanticCacheSettings",
    "TenantCacheSettings",
    "TenantRagSettings",
]


class EmbeddingSettings(Section):
    """The local embedder behind the cache, retrieval and local ``embedContent`` answers."""

    provider: Literal["builtin", "sentence-transformers"] = "builtin"
    model_path: Path | None = None
    dimensions: int = Field(512, ge=64, le=8192)
    batch_size: int = Field(32, ge=1, le=1024)

    @model_validator(mode="after")
    def _model_on_disk(self) -> EmbeddingSettings:
        if self.provider != "sentence-transformers":
            return self
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ValueError(
                "embeddings.provider: sentence-transformers is not installed; install the "
                "semantic extra: .venv/bin/pip install -e '.[semantic]'"
            )
        if self.model_path is None:
            raise ValueError(
                "embeddings.model_path: required for provider sentence-transformers "
                "(a model directory on disk; nothing is downloaded)"
            )
        if not (self.model_path / "config.json").is_file():
            raise ValueError(
                f"embeddings.model_path: {self.model_path} is not a model directory "
                "(no config.json in it); nothing is downloaded, so the model must be on disk"
            )
        return self


class SemanticCacheSettings(Section):
    """The similarity layer of the cache: which requests it may answer, and how close."""

    enabled: bool = False
    threshold: float = Field(0.98, gt=0, le=1)
    max_temperature: float = Field(0.0, ge=0)
    allow_tools: bool = False
    candidates: int = Field(8, ge=1, le=100)
    # Per tenant, entries kept in the in-memory index (0: none, every lookup asks the store).
    max_index_entries: int = Field(200_000, ge=0)


class CacheSettings(Section):
    """Local vector cache, keyed on the redacted request; its store also holds RAG passages."""

    enabled: bool = False
    vector_store: Literal["chroma"] = "chroma"
    persist_path: Path | None = None
    chroma_url: str | None = None
    ttl_s: float = Field(86400.0, gt=0)
    timeout_s: float = Field(2.0, gt=0)
    exact: bool = True
    semantic: SemanticCacheSettings = SemanticCacheSettings()

    @field_validator("chroma_url")
    @classmethod
    def _chroma_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http:// or https:// URL with a host, e.g. http://chroma:8000"
            )
        return value.rstrip("/")


class RagSettings(Section):
    """Retrieval over the tenant's own documents, done locally."""

    enabled: bool = False
    collection: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
    top_k: int = Field(4, ge=1, le=50)
    min_similarity: float = Field(0.25, ge=0, le=1)
    chunk_chars: int = Field(1000, ge=100, le=100_000)
    chunk_overlap: int = Field(100, ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> RagSettings:
        if self.chunk_overlap >= self.chunk_chars:
            raise ValueError("rag.chunk_overlap: must be smaller than rag.chunk_chars")
        return self


class TenantCacheSettings(Section):
    """A tenant's changes to the cache settings; unset fields inherit."""

    enabled: bool | None = None
    ttl_s: float | None = Field(None, gt=0)
    exact: bool | None = None
    semantic: bool | None = None


class TenantRagSettings(Section):
    """A tenant's changes to the retrieval settings; unset fields inherit."""

    enabled: bool | None = None
    collection: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
    top_k: int | None = Field(None, ge=1, le=50)
    min_similarity: float | None = Field(None, ge=0, le=1)
