"""Sources → clean documents: folders, files, saved or hub datasets, and the built-in
``pydoc-topics`` (the Python reference topics every CPython carries in ``pydoc_data``;
``pydoc-topics:assert,for`` picks some).

A document is ``(source, text)``: ``source`` names where it came from precisely enough to find
it again (``notes/a.md``, ``rows.jsonl#12``, ``pydoc-topics/assert``).
"""

from __future__ import annotations

import os
import re
import socket
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from selfplay.core.errors import UserError

PYDOC_TOPICS = "pydoc-topics"
TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
HTML_SUFFIXES = {".html", ".htm"}
ROW_SUFFIXES = {".jsonl", ".json", ".parquet"}
READABLE = TEXT_SUFFIXES | HTML_SUFFIXES | ROW_SUFFIXES


@dataclass(frozen=True)
class Document:
    source: str
    text: str


# ---------------------------------------------------------------------- cleaning
_BLOCK_TAGS = [
    "p", "div", "br", "li", "tr", "pre", "section", "article", "table", "blockquote",
    "dd", "dt", "h1", "h2", "h3", "h4", "h5", "h6",
]  # fmt: skip


def html_to_text(html: str) -> str:
    """Visible text of an HTML page (scripts, styles and navigation dropped); block elements
    end their line, inline ones (<b>, <a>) flow with the text around them."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "noscript", "nav", "header", "footer"]):
        tag.decompose()
    for tag in soup(_BLOCK_TAGS):
        tag.append("\n")
    return soup.get_text()


_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n(\s*\n)+")


def clean_text(text: str) -> str:
    """Unicode NFC, one space for runs of spaces, at most one blank line, no trailing spaces.

    Line breaks are kept: they carry structure (code blocks, lists) the challenger reads."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _SPACES.sub(" ", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()


# ---------------------------------------------------------------------- reading
def read_sources(sources: list[str], text_field: str = "text") -> list[Document]:
    """Every non-empty cleaned document of every source, in order; UserError on a bad source."""
    if not sources:
        raise UserError("no source given: name a folder, a file, a dataset or pydoc-topics")
    documents: list[Document] = []
    for source in sources:
        found = [
            Document(doc.source, cleaned)
            for doc in _read_source(source, text_field)
            if (cleaned := clean_text(doc.text))
        ]
        if not found:
            raise UserError(f"source {source} holds no text")
        documents.extend(found)
    return documents


def _read_source(source: str, text_field: str) -> Iterator[Document]:
    if source == PYDOC_TOPICS or source.startswith(PYDOC_TOPICS + ":"):
        yield from _pydoc_topics(source.partition(":")[2])
        return
    path = Path(source).expanduser()
    if path.is_dir():
        if _is_saved_dataset(path):
            yield from _dataset_rows(_load_saved_dataset(path), str(path), text_field)
        else:
            yield from _read_folder(path, text_field)
    elif path.is_file():
        yield from _read_file(path, text_field, label=str(path))
    elif source.startswith(("/", ".", "~")) or path.suffix.lower() in READABLE:
        raise UserError(f"source {source} does not exist")
    else:
        yield from _dataset_rows(_load_hub_dataset(source), source, text_field)


def _pydoc_topics(names: str = "") -> Iterator[Document]:
    """All topics, or those named (``pydoc-topics:assert,for``)."""
    import pydoc_data.topics

    topics = pydoc_data.topics.topics
    wanted = [n for n in names.split(",") if n] or sorted(topics)
    unknown = [n for n in wanted if n not in topics]
    if unknown:
        raise UserError(
            f"unknown pydoc topic {unknown[0]!r} (e.g. {', '.join(sorted(topics)[:5])})"
        )
    for name in wanted:
        yield Document(f"{PYDOC_TOPICS}/{name}", topics[name])


def _read_folder(folder: Path, text_field: str) -> Iterator[Document]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in READABLE)
    if not files:
        kinds = ", ".join(sorted(READABLE))
        raise UserError(f"source folder {folder} holds no readable files ({kinds})")
    for path in files:
        yield from _read_file(path, text_field, label=str(path.relative_to(folder.parent)))


def _read_file(path: Path, text_field: str, label: str) -> Iterator[Document]:
    suffix = path.suffix.lower()
    if suffix in ROW_SUFFIXES:
        kind = "parquet" if suffix == ".parquet" else "json"
        yield from _dataset_rows(_load_file_dataset(kind, path), label, text_field)
        return
    if suffix not in TEXT_SUFFIXES | HTML_SUFFIXES:
        raise UserError(f"source file {path} has an unknown type {suffix or '(none)'}")
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"source file {path} is unreadable: {exc.strerror}") from exc
    yield Document(label, html_to_text(raw) if suffix in HTML_SUFFIXES else raw)


# ---------------------------------------------------------------------- datasets
def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()


def _quiet_datasets() -> None:
    import datasets

    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # errors become UserErrors
    datasets.disable_progress_bars()


def _load_saved_dataset(path: Path):
    import datasets

    _quiet_datasets()
    try:
        return datasets.load_from_disk(str(path))
    except Exception as exc:
        raise UserError(f"dataset folder {path} is unreadable: {_first_line(exc)}") from exc


def _load_file_dataset(kind: str, path: Path):
    import datasets

    _quiet_datasets()
    try:
        return datasets.load_dataset(kind, data_files=str(path), split="train")
    except Exception as exc:
        raise UserError(f"source file {path} is unreadable as {kind}: {_first_line(exc)}") from exc


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """One quick connection attempt, so that no network fails at once instead of after the
    hub client's retries (about a minute)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def _load_hub_dataset(spec: str):
    """``owner/name`` or ``owner/name:split`` from the hub; needs network (or the HF cache)."""
    import datasets
    import huggingface_hub

    _quiet_datasets()
    huggingface_hub.utils.logging.set_verbosity_error()
    if not _hub_reachable():
        os.environ["HF_HUB_OFFLINE"] = "1"  # only the local HF cache can answer now
    name, _, split = spec.partition(":")
    try:
        return datasets.load_dataset(name, split=split or "train")
    except Exception as exc:
        offline = (
            " (no network: only the local HF cache was searched)"
            if os.environ.get("HF_HUB_OFFLINE") == "1"
            else ""
        )
        raise UserError(
            f"source {spec} is not a file, a folder or a dataset the datasets library could "
            f"open{offline}: {_first_line(exc)}"
        ) from exc


def _dataset_rows(dataset, label: str, text_field: str) -> Iterator[Document]:
    import datasets

    if isinstance(dataset, datasets.DatasetDict):
        for split, part in dataset.items():
            yield from _dataset_rows(part, f"{label}:{split}", text_field)
        return
    if text_field not in dataset.column_names:
        columns = ", ".join(dataset.column_names) or "none"
        raise UserError(
            f"source {label} has no column {text_field!r} (columns: {columns}); "
            f"choose one with --text-field"
        )
    for i, text in enumerate(dataset[text_field]):
        if isinstance(text, str):
            yield Document(f"{label}#{i}", text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
