"""Documents for retrieval: files in, plain-text sections out, sections cut into chunks.

Text, Markdown, HTML and PDF are read; a PDF gives one section per page (numbered
from 1), every other type one section without a page. Chunks are cut by
``semantic-text-splitter`` at the largest boundary that fits (paragraph, sentence,
word, character), so Chinese text without spaces is cut at sentence ends as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from localgate.errors import InvalidArgument

__all__ = [
    "SUPPORTED_SUFFIXES",
    "Chunk",
    "Section",
    "chunk",
    "extract",
    "find_documents",
    "is_markdown",
]

_TEXT = (".txt",)
_MARKDOWN = (".md", ".markdown")
_HTML = (".html", ".htm")
_PDF = (".pdf",)
SUPPORTED_SUFFIXES = _TEXT + _MARKDOWN + _HTML + _PDF
# Elements whose text is not content: code, styling and site navigation.
_NOT_CONTENT = ("script", "style", "nav", "noscript", "template")
_BLOCKS = (
    "address", "article", "aside", "blockquote", "caption", "dd", "div", "dl", "dt",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hr", "li", "main", "ol", "p", "pre", "section", "table", "tr", "ul",
)  # fmt: skip
_SPACES = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class Section:
    """Text read from a document: a whole file, or one page of a PDF."""

    text: str
    page: int | None


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a section; ``text == section_text[start:end]``."""

    text: str
    start: int
    end: int


def find_documents(paths: Iterable[Path]) -> list[Path]:
    """The files to read: each file as given, each directory walked for supported types.

    Hidden files and folders (a leading ``.``) are skipped in a walk; a path named twice
    is read once.
    """
    found: dict[Path, None] = {}
    for path in paths:
        if not path.is_dir():
            found.setdefault(path, None)
            continue
        for inner in sorted(path.rglob("*")):
            hidden = any(part.startswith(".") for part in inner.relative_to(path).parts)
            if not hidden and inner.is_file() and inner.suffix.lower() in SUPPORTED_SUFFIXES:
                found.setdefault(inner, None)
    return list(found)


def is_markdown(path: Path) -> bool:
    """Whether ``path`` is chunked along Markdown structure (headings, lists, code)."""
    return path.suffix.lower() in _MARKDOWN


def extract(path: Path) -> list[Section]:
    """The text of ``path``; ``InvalidArgument`` naming the file if it cannot be read.

    Sections without any text are left out, so a file may give none.
    """
    suffix = path.suffix.lower()
    if suffix in _PDF:
        sections = _pdf(path)
    elif suffix in _HTML:
        sections = [Section(_html(_decoded(path)), None)]
    elif suffix in _TEXT + _MARKDOWN:
        sections = [Section(_decoded(path), None)]
    else:
        raise InvalidArgument(
            f"{path}: unsupported file type {suffix or '(no extension)'!r}; supported types "
            f"are {', '.join(SUPPORTED_SUFFIXES)}"
        )
    return [section for section in sections if section.text.strip()]


def chunk(text: str, chunk_chars: int, overlap: int, *, markdown: bool = False) -> list[Chunk]:
    """``text`` in chunks of at most ``chunk_chars`` characters, neighbours sharing up to
    ``overlap`` characters; whitespace at chunk edges is trimmed."""
    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    splitter = (
        MarkdownSplitter(chunk_chars, overlap=overlap)
        if markdown
        else TextSplitter(chunk_chars, overlap=overlap)
    )
    # The splitter's offsets count characters (not bytes), as Python slicing does.
    return [
        Chunk(piece, start, start + len(piece)) for start, piece in splitter.chunk_indices(text)
    ]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"{path}: cannot read the file: {exc.strerror}") from exc


def _decoded(path: Path) -> str:
    data = _read(path)
    try:
        # utf-8-sig: files saved by Windows editors often start with a byte-order mark.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"{path}: not UTF-8 text (invalid byte at offset {exc.start}); convert it to "
            "UTF-8 first, e.g. iconv -f GB18030 -t UTF-8"
        ) from exc


def _html(markup: str) -> str:
    from bs4 import BeautifulSoup
    from bs4.element import NavigableString, PreformattedString

    soup = BeautifulSoup(markup, "html.parser")
    for element in soup(_NOT_CONTENT):
        element.decompose()
    title = ""
    if soup.title is not None:
        title = soup.title.get_text(" ", strip=True)
        soup.title.decompose()
    # Laid out as a browser would: whitespace runs are one space (except in <pre>), inline
    # markup joins its neighbours ("享有<b>十五天</b>带薪" stays one phrase, so a name and
    # its context words stay together for redaction), blocks start new lines, and table
    # cells stay apart.
    for string in soup.find_all(string=True):
        if isinstance(string, PreformattedString) or string.find_parent("pre") is not None:
            continue
        string.replace_with(NavigableString(_SPACES.sub(" ", string)))
    for element in soup("br"):
        element.replace_with("\n")
    for element in soup(("td", "th")):
        element.insert_after(" ")
    for element in soup(_BLOCKS):
        element.insert_before("\n")
        element.insert_after("\n")
    lines = [line.strip() for line in soup.get_text().splitlines()]
    body = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
    return f"{title}\n\n{body}" if title else body


def _pdf(path: Path) -> list[Section]:
    from pypdf import PdfReader

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise InvalidArgument(f"{path}: the PDF is encrypted; save a decrypted copy first")
        pages = [page.extract_text() for page in reader.pages]
    except InvalidArgument:
        raise
    except OSError as exc:
        raise InvalidArgument(f"{path}: cannot read the file: {exc.strerror}") from exc
    except Exception as exc:
        raise InvalidArgument(f"{path}: not a readable PDF: {exc}") from exc
    if not any(text.strip() for text in pages):
        raise InvalidArgument(
            f"{path}: no text could be extracted (scanned PDF? no text layer); run OCR on it first"
        )
    return [Section(text, number) for number, text in enumerate(pages, start=1)]
