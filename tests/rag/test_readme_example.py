"""The README's retrieval example, as a user runs it, with the default settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from localgate.cli.rag import rag
from localgate.config import RagSettings

HANDBOOK = Path(__file__).parents[2] / "examples" / "handbook"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("readme")
    path = folder / "localgate.yaml"
    path.write_text(f"data_dir: {folder / 'data'}\n")  # every other setting its default
    ingested = run(path, "ingest", str(HANDBOOK), "--collection", "handbook", "--tenant", "acme")
    assert ingested.exit_code == 0, ingested.output
    return path


def run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(rag, ["--config", str(config), *args])


def query(config: Path, text: str) -> Result:
    return run(config, "query", text, "--collection", "handbook", "--tenant", "acme")


def test_the_defaults_are_the_measured_ones() -> None:
    # docs/vector.md, "Choosing min_similarity": measured with bench/retrieval.py.
    assert RagSettings().min_similarity == 0.25


@pytest.mark.parametrize(
    ("question", "source"),
    [
        ("年假有几天", "休假制度.md"),
        ("How many days of annual leave do I get?", "leave-policy.md"),
        ("超过一万元的采购需要谁审批？", "报销制度.md"),
        ("How do I reset my email password?", "it-guide.md"),
    ],
)
def test_a_question_the_handbook_answers_finds_its_passage_first(
    config: Path, question: str, source: str
) -> None:
    found = query(config, question)

    assert found.exit_code == 0, found.output
    assert found.stdout.splitlines()[0].endswith(f"  {source}")


@pytest.mark.parametrize(
    "question", ["What is the capital of France?", "今天天气怎么样", "写一首关于春天的诗"]
)
def test_an_unrelated_question_finds_nothing(config: Path, question: str) -> None:
    found = query(config, question)

    assert found.exit_code == 0, found.output
    assert found.stdout == ""
    assert "No passage is similar enough." in found.stderr
