"""Reading documents into sections and cutting sections into chunks."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from pypdf import PdfWriter

from localgate.errors import InvalidArgument
from localgate.rag.documents import Section, chunk, extract, find_documents, is_markdown
from tests.rag.fixtures.pdf import text_pdf

FIXTURES = Path(__file__).parent / "fixtures"


def test_text_file_is_one_section_without_a_page(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes("\ufeff第一行\nsecond line\n".encode())

    assert extract(path) == [Section("第一行\nsecond line\n", None)]


def test_markdown_is_kept_as_written_and_chunked_by_its_structure() -> None:
    path = FIXTURES / "guide.md"

    [section] = extract(path)
    by_structure = chunk(section.text, 150, 0, markdown=is_markdown(path))
    as_plain_text = chunk(section.text, 150, 0)

    assert section.text == path.read_text(encoding="utf-8")
    # Each chunk starts at a heading, instead of a heading ending the chunk before it.
    assert [piece.text.splitlines()[0] for piece in by_structure] == [
        "# Onboarding guide",
        "## VPN",
        "## 报销",
    ]
    assert as_plain_text[0].text.endswith("## VPN")


def test_html_keeps_the_title_and_text_and_drops_scripts_styles_and_navigation() -> None:
    [section] = extract(FIXTURES / "page.html")

    assert section.page is None
    assert section.text.startswith("年假制度\n\n年假\n")
    assert "员工每年享有十五天带薪年假。" in section.text  # inline markup does not split it
    assert "Unused leave expires at the end of March." in section.text
    for dropped in ("tracking", "font-family", "首页", "人事", "JavaScript"):
        assert dropped not in section.text


def test_html_table_cells_and_line_breaks_stay_apart(tmp_path: Path) -> None:
    path = tmp_path / "t.htm"
    path.write_text(
        "<table><tr><th>项目</th><th>天数</th></tr><tr><td>年假</td><td>15</td></tr></table>"
        "<p>one<br>two <!-- a comment --></p>"
    )

    [section] = extract(path)

    assert section.text == "项目 天数\n\n年假 15\n\none\ntwo"


def test_pdf_gives_one_section_per_page_numbered_from_one(tmp_path: Path) -> None:
    path = tmp_path / "handbook.pdf"
    path.write_bytes(text_pdf(["Welcome to the handbook", "Expenses are refunded monthly"]))

    assert extract(path) == [
        Section("Welcome to the handbook", 1),
        Section("Expenses are refunded monthly", 2),
    ]


def test_pdf_without_a_text_layer_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    writer = PdfWriter()
    writer.add_blank_page(595, 842)
    writer.write(path)

    with pytest.raises(InvalidArgument, match=r"scan\.pdf: .*no text layer"):
        extract(path)


def test_damaged_pdf_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\nthis is not really a PDF")

    with pytest.raises(InvalidArgument, match=r"broken\.pdf: not a readable PDF"):
        extract(path)


def test_unknown_type_names_the_file_and_the_supported_types(tmp_path: Path) -> None:
    path = tmp_path / "report.docx"
    path.write_bytes(b"PK")

    with pytest.raises(InvalidArgument) as caught:
        extract(path)

    assert str(path) in caught.value.message
    assert "'.docx'" in caught.value.message
    assert ".txt, .md, .markdown, .html, .htm, .pdf" in caught.value.message


def test_text_that_is_not_utf8_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gbk.txt"
    path.write_bytes("员工手册".encode("gb18030"))

    with pytest.raises(InvalidArgument, match=r"gbk\.txt: not UTF-8 text"):
        extract(path)


def test_empty_file_gives_no_section(tmp_path: Path) -> None:
    path = tmp_path / "empty.md"
    path.write_text("  \n\n")

    assert extract(path) == []


def test_chinese_without_spaces_is_cut_at_sentence_ends_within_the_size() -> None:
    sentences = [
        f"第{n}条规定员工在办理手续时必须携带身份证明并由部门负责人签字确认。" for n in range(40)
    ]
    text = "".join(sentences)

    chunks = chunk(text, 100, 0)

    assert len(chunks) > 10
    assert all(len(piece.text) <= 100 for piece in chunks)
    assert all(piece.text.endswith("。") for piece in chunks)
    assert all(text[piece.start : piece.end] == piece.text for piece in chunks)
    assert "".join(piece.text for piece in chunks) == text


def test_chunks_overlap_and_offsets_count_characters() -> None:
    text = " ".join(f"词{n}😀 word{n}" for n in range(200))

    chunks = chunk(text, 100, 30)

    assert all(text[piece.start : piece.end] == piece.text for piece in chunks)
    assert all(len(piece.text) <= 100 for piece in chunks)
    assert all(b.start < a.end for a, b in pairwise(chunks))
    assert chunks[0].start == 0
    assert chunks[-1].end == len(text)


def test_find_documents_walks_folders_for_supported_types_only(tmp_path: Path) -> None:
    (tmp_path / "docs" / "deep").mkdir(parents=True)
    (tmp_path / "docs" / ".git").mkdir()
    for name in ("docs/a.txt", "docs/deep/b.PDF", "docs/c.png", "docs/.git/d.md", "e.docx"):
        (tmp_path / name).write_text("x")

    found = find_documents([tmp_path / "docs", tmp_path / "e.docx", tmp_path / "docs/a.txt"])

    # A file named explicitly is kept (and refused clearly later); a walk skips
    # unsupported and hidden files; a file named twice is read once.
    assert found == [
        tmp_path / "docs/a.txt",
        tmp_path / "docs/deep/b.PDF",
        tmp_path / "e.docx",
    ]
