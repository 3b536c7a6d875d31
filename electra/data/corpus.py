"""Read raw text corpora as a stream of documents, whatever their packaging, at bounded memory.

Accepted: a text file, a directory of files (recursively, in sorted order, through linked folders), JSON lines,
Parquet, a `datasets` dataset saved with `save_to_disk`, each of the file forms compressed (`.gz`, `.bz2`, `.xz`,
`.zst`) or inside `.tar` (any compression) and `.zip` archives, nested as OpenWebText nests them
(`electra.data.corpus_files`). JSON lines, Parquet and saved datasets give one document per record, from the `text`
field unless told another. A text file gives one document per blank-line-separated block, or (a directory of
several files) one per file; `doc_boundary` overrides. POS-tagged text such as the Brown corpus (`word/tag`) is
detected and stripped, so users can point the trainer at classic corpora without preprocessing them.
Files are read a block at a time, so neither the corpus nor any one file is ever whole in memory; a document
longer than MAX_DOCUMENT_CHARS (a file that is one enormous line, say) is cut at whitespace into consecutive
documents, so no single string the data builder tokenizes is larger than that.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from electra.core.errors import UserError
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled
from electra.data.corpus_files import decoded_blocks, file_members

SKIPPED_SUFFIXES = {
    ".pdf",
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".wav",
    ".mp3",
    ".pyc",
    ".so",
    ".bin",
    ".pt",
    ".arrow",
}
DOC_BOUNDARIES = ("auto", "file", "blank")
MAX_DOCUMENT_CHARS = 100_000  # ~25k tokens: hundreds of examples, and a bounded share of a map batch

_WHITESPACE = re.compile(r"\s+")
_TAGGED_TOKEN = re.compile(r"^\S+/[a-z0-9\-+$*.,:;()`'!?]+$")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])")


def read_documents(
    path: str | Path, doc_boundary: str = "auto", strict_utf8: bool = False, text_field: str = "text"
) -> Iterator[str]:
    """Yield documents as text, one paragraph per line; raise UserError naming the file on unreadable input.

    Files are streamed a block at a time (`electra.data.corpus_files`), so memory does not grow with file or corpus
    size. Files that are not UTF-8 but look like 8-bit text (old corpora: Reuters, some Gutenberg books) are read
    as Latin-1 with a warning, unless `strict_utf8`; bytes that are not text at all (NUL bytes, binaries) are an
    error. `text_field` names the text column of JSON lines, Parquet and saved datasets.
    """
    if doc_boundary not in DOC_BOUNDARIES:
        raise UserError(f"doc_boundary={doc_boundary!r} is not one of {', '.join(DOC_BOUNDARIES)}.")
    path = Path(path)
    if not path.exists():
        raise UserError(
            f"corpus {path} does not exist; pass a text file, a directory, a .jsonl or .parquet file or a "
            "saved dataset."
        )
    if is_saved_dataset(path):
        yield from saved_dataset_documents(path, text_field)
        return
    files = corpus_files(path)
    if not files:
        raise UserError(f"corpus {path} holds no readable text files (.txt, .jsonl, .parquet, archives).")
    boundary = resolved_boundary(path, files, doc_boundary)
    for file in files:
        yield from file_documents(file, boundary, strict_utf8, text_field)


def resolved_boundary(path: Path, files: list[Path], doc_boundary: str) -> str:
    """`doc_boundary` with "auto" decided: a folder of several files is a document per file, else blank lines."""
    if doc_boundary == "auto":
        return "file" if path.is_dir() and len(files) > 1 else "blank"
    return doc_boundary


def file_documents(file: Path, boundary: str, strict_utf8: bool, text_field: str) -> Iterator[str]:
    """The documents of one corpus file, whatever its packaging (`read_documents`, one file)."""
    for member in file_members(file, open_corpus_file):
        if member.kind == "parquet":
            documents = _parquet_documents(member.name, member.stream, text_field)
        elif member.kind == "json":
            blocks = decoded_blocks(member.name, member.stream, strict_utf8, whole_lines=True)
            documents = jsonl_documents(member.name, blocks, text_field)
        else:
            blocks = decoded_blocks(member.name, member.stream, strict_utf8, whole_lines=False)
            documents = text_documents(blocks, boundary)
        for document in documents:
            yield from bounded(document)


def bounded(document: str, limit: int = MAX_DOCUMENT_CHARS) -> Iterator[str]:
    """`document` in pieces of at most `limit` characters, cut at the last whitespace before the limit (or at the
    limit when a piece has none); offsets only, so no copy of the remainder is ever made."""
    start, end = 0, len(document)
    while end - start > limit:
        cut = document.rfind(" ", start + limit // 2, start + limit + 1)
        cut = start + limit if cut <= start else cut
        yield document[start:cut]
        start = cut
        while start < end and document[start].isspace():
            start += 1
    if start < end:
        yield document[start:] if start else document


def corpus_files(path: Path) -> list[Path]:
    """The files a corpus path stands for, in sorted order, through linked folders too. A folder that cannot be
    listed (no permission) is an error naming it: `Path.rglob` skips such folders silently, and the run would
    train on part of the corpus."""
    if path.is_file():
        return [path]

    def unreadable(exc: OSError) -> None:
        raise UserError(
            f"corpus folder {exc.filename} cannot be read ({exc.strerror}); give this user access to it "
            "(chmod) or move it out of the corpus."
        )

    found, seen = [], {os.path.realpath(path)}
    # Linked folders are followed (a corpus put together from links to datasets kept elsewhere must not be
    # read without them, silently), each real folder once, so a link back up the tree is no endless loop.
    for root, folders, names in os.walk(path, onerror=unreadable, followlinks=True):
        kept = []
        for folder in sorted(folders):
            real = os.path.realpath(os.path.join(root, folder))
            if real not in seen:
                seen.add(real)
                kept.append(folder)
        folders[:] = kept
        found += [Path(root, name) for name in names]
    files = [p for p in sorted(found) if p.is_file() and not p.name.startswith(".")]
    return [p for p in files if p.suffix.lower() not in SKIPPED_SUFFIXES]


def open_corpus_file(file: Path) -> BinaryIO:
    """`file` opened for reading, or one line naming it when it cannot be (no permission, a vanished mount)."""
    try:
        return open(file, "rb")
    except OSError as exc:
        raise UserError(
            f"{file}: cannot be read ({exc.strerror or exc}); give this user access to it (chmod) or remove it "
            "from the corpus."
        ) from None


def read_corpus_bytes(file: Path, limit: int = -1) -> bytes:
    """The bytes of one corpus file (its first `limit` when given), or one line naming the file when it cannot be
    read."""
    with open_corpus_file(file) as handle:
        return handle.read(limit)


def is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and (path / "dataset_info.json").is_file() and (path / "state.json").is_file()


def saved_dataset_split(path: Path) -> Any:
    """The split of a saved dataset that a corpus reads: the dataset itself, or a DatasetDict's train split (or its
    only one). Memory-mapped: opening it reads no text."""
    from datasets import load_from_disk

    dataset = load_from_disk(str(path))
    if hasattr(dataset, "keys"):  # a DatasetDict: use its train split, or its only split
        split = "train" if "train" in dataset else next(iter(dataset))
        dataset = dataset[split]
    return dataset


def saved_dataset_documents(path: Path, text_field: str, rows: range | None = None) -> Iterator[str]:
    """The documents of a saved dataset (its `rows` only, when given), each cut to MAX_DOCUMENT_CHARS pieces."""
    for document in _read_saved_dataset(path, text_field, rows):
        yield from bounded(document)


def _read_saved_dataset(path: Path, text_field: str, rows: range | None = None) -> Iterator[str]:
    dataset = saved_dataset_split(path)
    if text_field not in dataset.column_names:
        raise UserError(
            f"dataset {path} has no {text_field!r} column (columns: {', '.join(dataset.column_names)}); "
            f"name its text column with {spelled(RunInputs, 'text_field')}."
        )
    if rows is not None:
        dataset = dataset.select(rows)
    for batch in dataset.select_columns([text_field]).iter(batch_size=1000):
        for text in batch[text_field]:
            if isinstance(text, str) and text.strip():
                yield text


def _parquet_documents(name: str, path: Path, text_field: str) -> Iterator[str]:
    """The text column of a Parquet file, a row group's batch at a time (the hub's native format)."""
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own errors for a file that is not Parquet
        raise UserError(f"{name}: not a readable Parquet file ({exc}).") from None
    columns = table.schema_arrow.names
    if text_field not in columns:
        raise UserError(
            f"{name} has no {text_field!r} column (columns: {', '.join(columns)}); name its text column with "
            "--text-field."
        )
    for batch in table.iter_batches(batch_size=1024, columns=[text_field]):
        for text in batch.column(0).to_pylist():
            if isinstance(text, str) and text.strip():
                yield text


def text_documents(blocks: Iterator[str], boundary: str, tagged: bool | None = None) -> Iterator[str]:
    """Documents of a text file given as decoded blocks: blank-line-separated paragraphs, each with its
    whitespace runs made one space; with `boundary` "file", paragraphs joined by newlines into documents of up to
    MAX_DOCUMENT_CHARS. Brown-style `word/tag` text loses its tags: `tagged` says whether the file is such text,
    and None judges it on the first block (the file's start)."""
    lines: list[str] = []  # the paragraph being read
    size = 0
    document: list[str] = []  # boundary "file": the paragraphs waiting to be joined
    held = 0
    continued = False  # whether the last block ended inside a line

    def paragraphs(final: bool) -> Iterator[str]:
        nonlocal lines, size
        text = _WHITESPACE.sub(" ", " ".join(lines)).strip()
        lines, size = [], 0
        pieces = list(bounded(text)) if text else []
        if not final and len(pieces) > 1:  # a line longer than a document goes on in the next block
            rest = pieces.pop()
            lines, size = [rest], len(rest)
        yield from pieces

    def documents(paragraph: str) -> Iterator[str]:
        nonlocal document, held
        if boundary != "file":
            yield paragraph
            return
        if document and held + len(paragraph) > MAX_DOCUMENT_CHARS:
            yield "\n".join(document)
            document, held = [], 0
        document.append(paragraph)
        held += len(paragraph) + 1

    for block in blocks:
        if tagged is None:
            tagged = looks_pos_tagged(block)
        if tagged:
            block = strip_pos_tags(block)
        *whole, last = block.replace("\r\n", "\n").split("\n")
        for line in whole:
            if line.strip():
                lines.append(line)
                size += len(line)
            elif lines and not continued:
                for paragraph in paragraphs(final=True):
                    yield from documents(paragraph)
            continued = False  # the end of a line the last block cut is no blank line
        continued = bool(last)
        if last:  # a block cut inside a long line: the line goes on in the next block
            lines.append(last)
            size += len(last)
        if size > MAX_DOCUMENT_CHARS:
            for paragraph in paragraphs(final=False):
                yield from documents(paragraph)
    if lines:
        for paragraph in paragraphs(final=True):
            yield from documents(paragraph)
    if document:
        yield "\n".join(document)


def json_lines(name: str, text: str, expected: str, first_line: int = 1) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON-lines text; a line that is not one JSON object is
    one line naming `name`, the line and what was `expected` there. Lines end at "\n" alone (a CR before it is
    JSON whitespace): `str.splitlines` also cuts at U+2028, which a JSON string may hold as it is."""
    for number, line in enumerate(text.split("\n"), start=first_line):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{name}:{number}: not valid JSON ({exc.msg}); each line must be one JSON object."
            ) from None
        if not isinstance(record, dict):
            raise UserError(f"{name}:{number}: expected {expected}.")
        yield number, record


def jsonl_documents(name: str, blocks: Iterator[str], text_field: str) -> Iterator[str]:
    expected = f"an object with a string {text_field!r} field"
    first_line = 1
    for block in blocks:
        for number, record in json_lines(name, block, expected, first_line):
            text = record.get(text_field)
            if not isinstance(text, str):
                keys = ", ".join(list(record)[:8])
                raise UserError(
                    f"{name}:{number}: expected {expected} (this one has: {keys}); name the text field with "
                    "--text-field."
                )
            if text.strip():
                yield text
        first_line += block.count("\n")


def looks_pos_tagged(text: str, sample_tokens: int = 400) -> bool:
    """True when nearly every whitespace token is `word/tag` (Brown-style); plain prose never passes 90%."""
    tokens = text[:20000].split()[:sample_tokens]
    if len(tokens) < 20:
        return False
    tagged = sum(1 for token in tokens if _TAGGED_TOKEN.match(token))
    return tagged >= 0.9 * len(tokens)


def strip_pos_tags(text: str) -> str:
    lines = []
    for line in text.split("\n"):
        words = [token.rsplit("/", 1)[0] if "/" in token else token for token in line.split()]
        words = ['"' if word in ("``", "''") else word for word in words]
        lines.append(" ".join(words))
    return "\n".join(lines)


def split_sentences(paragraph: str) -> list[str]:
    """Cheap rule-based splitting: the data builder only needs plausible boundaries to choose segment cuts."""
    return [sentence for sentence in _SENTENCE_END.split(paragraph) if sentence.strip()]


def corpus_fingerprint(corpus: str | Path) -> list[list[str | int]]:
    """Names, sizes and modification times of every input file: cheap, and changes whenever the corpus does. (Here,
    beside the readers and without torch, so `tlm retrieve` keys its index on it without loading torch.)"""
    path = Path(corpus)
    files = (
        sorted(p for p in path.rglob("*") if p.is_file()) if is_saved_dataset(path) else corpus_files(path)
    )
    return [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
