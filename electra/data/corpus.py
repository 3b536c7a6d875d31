"""Read raw text corpora as a stream of documents, whatever their packaging.

Accepted: a text file, a directory of text files (recursively, in sorted order), JSONL with a `text` field, a
`datasets` dataset saved with `save_to_disk`, and `.gz` / `.zip` / `.tar.gz` archives of any of the text forms.
A document is a file when reading a directory of several files, and a blank-line-separated block when reading one
text file (`doc_boundary` overrides). POS-tagged text such as the Brown corpus (`word/tag`) is detected and
stripped, so users can point the trainer at classic corpora without preprocessing them.
Files are read one at a time, so the whole corpus is never in memory; a document longer than MAX_DOCUMENT_CHARS (a
file that is one enormous line, say) is cut at whitespace into consecutive documents, so no single string the data
builder tokenizes is larger than that.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tarfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

from electra.core.errors import ElectraWarning, UserError
from electra.core.files import decode_utf16, not_text_error, utf16_without_mark

TEXT_SUFFIXES = {"", ".txt", ".text", ".md", ".raw", ".tokens"}
JSON_SUFFIXES = {".jsonl", ".json", ".ndjson"}
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
_BLANK_LINE = re.compile(r"\n\s*\n")
_TAGGED_TOKEN = re.compile(r"^\S+/[a-z0-9\-+$*.,:;()`'!?]+$")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])")


def read_documents(path: str | Path, doc_boundary: str = "auto", strict_utf8: bool = False) -> Iterator[str]:
    """Yield documents as text, one paragraph per line; raise UserError naming the file on unreadable input.

    Files that are not UTF-8 but look like 8-bit text (old corpora: Reuters, some Gutenberg books) are read as
    Latin-1 with a warning, unless `strict_utf8`; bytes that are not text at all (NUL bytes, binaries) are an error.
    """
    if doc_boundary not in DOC_BOUNDARIES:
        raise UserError(f"doc_boundary={doc_boundary!r} is not one of {', '.join(DOC_BOUNDARIES)}.")
    path = Path(path)
    if not path.exists():
        raise UserError(
            f"corpus {path} does not exist; pass a text file, a directory, a .jsonl file or a saved dataset."
        )
    if is_saved_dataset(path):
        for document in _read_saved_dataset(path):
            yield from bounded(document)
        return
    files = corpus_files(path)
    if not files:
        raise UserError(f"corpus {path} holds no readable text files (.txt, .jsonl, archives).")
    boundary = doc_boundary
    if boundary == "auto":
        boundary = "file" if path.is_dir() and len(files) > 1 else "blank"
    for file in files:
        for name, text in _file_texts(file, strict_utf8):
            for document in _documents_of(name, text, boundary):
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


def read_corpus_bytes(file: Path, limit: int = -1) -> bytes:
    """The bytes of one corpus file (its first `limit` when given), or one line naming the file when it cannot be
    read (no permission, a vanished network mount): an OSError's traceback otherwise."""
    try:
        with open(file, "rb") as handle:
            return handle.read(limit)
    except OSError as exc:
        raise UserError(
            f"{file}: cannot be read ({exc.strerror or exc}); give this user access to it (chmod) or remove it "
            "from the corpus."
        ) from None


def is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and (path / "dataset_info.json").is_file() and (path / "state.json").is_file()


def _read_saved_dataset(path: Path) -> Iterator[str]:
    from datasets import load_from_disk

    dataset = load_from_disk(str(path))
    if hasattr(dataset, "keys"):  # a DatasetDict: use its train split, or its only split
        split = "train" if "train" in dataset else next(iter(dataset))
        dataset = dataset[split]
    if "text" not in dataset.column_names:
        raise UserError(f"dataset {path} has no 'text' column (columns: {', '.join(dataset.column_names)}).")
    for batch in dataset.select_columns(["text"]).iter(batch_size=1000):
        for text in batch["text"]:
            if text and text.strip():
                yield text


def _file_texts(file: Path, strict_utf8: bool = False) -> Iterator[tuple[str, str]]:
    """(display name, decoded text) for a file or each text member of an archive."""
    read_corpus_bytes(file, 0)  # a file this user may not read is one line, whatever its format
    name = file.name.lower()
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(file) as archive:
                for member in sorted(archive.getmembers(), key=lambda m: m.name):
                    if member.isfile() and _is_text_name(member.name):
                        handle = archive.extractfile(member)
                        if handle is not None:
                            yield (
                                f"{file}:{member.name}",
                                _decode(handle.read(), f"{file}:{member.name}", strict_utf8),
                            )
        except tarfile.TarError as exc:
            raise UserError(f"{file}: not a readable tar archive ({exc}).") from None
    elif name.endswith(".zip"):
        try:
            with zipfile.ZipFile(file) as archive:
                for member in sorted(archive.namelist()):
                    if not member.endswith("/") and _is_text_name(member):
                        yield (
                            f"{file}:{member}",
                            _decode(archive.read(member), f"{file}:{member}", strict_utf8),
                        )
        except zipfile.BadZipFile as exc:
            raise UserError(f"{file}: not a readable zip archive ({exc}).") from None
    elif name.endswith(".gz"):
        try:
            data = gzip.decompress(read_corpus_bytes(file))
        except OSError as exc:
            raise UserError(f"{file}: not a readable gzip file ({exc}).") from None
        yield str(file), _decode(data, str(file), strict_utf8)
    else:
        yield str(file), _decode(read_corpus_bytes(file), str(file), strict_utf8)


def _is_text_name(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    if base.startswith(".") or base.startswith("__MACOSX"):
        return False
    suffix = "." + base.rsplit(".", 1)[-1].lower() if "." in base else ""
    return suffix in TEXT_SUFFIXES or suffix in JSON_SUFFIXES


def _decode(data: bytes, name: str, strict_utf8: bool) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark is not text
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16, with its byte-order mark
        if strict_utf8:
            raise UserError(
                f"{name}: UTF-16 text (byte-order mark), not UTF-8; convert it with `iconv -f utf-16 -t utf-8` or "
                "drop --strict-utf8 to read it as UTF-16."
            )
        return decode_utf16(data, name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        looks_binary = b"\x00" in data[:65536] or sum(
            b < 9 or 13 < b < 32 for b in data[:65536]
        ) > 0.01 * min(len(data), 65536)
        if utf16_without_mark(data):
            raise not_text_error(name, data) from None
        if strict_utf8 or looks_binary:
            raise UserError(
                f"{name}: undecodable bytes at offset {exc.start} (not UTF-8 text); convert it with "
                f"`iconv -f latin1 -t utf-8` or remove it from the corpus."
            ) from None
        warnings.warn(
            f"{name} is not UTF-8; reading it as Latin-1 (--strict-utf8 refuses it instead)",
            ElectraWarning,
            stacklevel=2,
        )
        return data.decode("latin-1")
    sample = data[:65536]
    if "\0" in text and (utf16_without_mark(data) or sample.count(0) > 0.01 * len(sample)):
        raise not_text_error(name, data)  # valid UTF-8, but UTF-16 without its mark ("T\0h\0e\0") or binary
    return text  # a stray NUL in text is a control character the tokenizer's normalizer drops


def _documents_of(name: str, text: str, boundary: str) -> Iterator[str]:
    base = (
        name.rsplit("/", 1)[-1].removesuffix(".gz").removesuffix(".GZ")
    )  # c.jsonl.gz is JSON lines, so named
    suffix = "." + base.rsplit(".", 1)[-1].lower() if "." in base else ""
    if suffix in JSON_SUFFIXES:
        yield from _jsonl_documents(name, text)
        return
    text = text.replace("\r\n", "\n")
    if looks_pos_tagged(text):
        text = strip_pos_tags(text)
    # Whitespace runs become one space (as " ".join(block.split()) would, without a string object per word); blocks
    # are made one at a time, so a large file is not held several times over.
    blocks = (_WHITESPACE.sub(" ", piece).strip() for block in _blocks(text) for piece in bounded(block))
    blocks = (block for block in blocks if block)
    if boundary == "file":
        joined = "\n".join(blocks)
        if joined:
            yield joined
    else:
        yield from blocks


def _blocks(text: str) -> Iterator[str]:
    """The blank-line-separated blocks of `text`, lazily."""
    start = 0
    for separator in _BLANK_LINE.finditer(text):
        yield text[start : separator.start()]
        start = separator.end()
    yield text[start:] if start else text


def json_lines(name: str, text: str, expected: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON-lines text; a line that is not one JSON object is
    one line naming `name`, the line and what was `expected` there. Lines end at "\n" alone (a CR before it is
    JSON whitespace): `str.splitlines` also cuts at U+2028, which a JSON string may hold as it is."""
    for number, line in enumerate(text.split("\n"), start=1):
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


def _jsonl_documents(name: str, text: str) -> Iterator[str]:
    expected = 'an object with a string "text" field'
    for number, record in json_lines(name, text, expected):
        if not isinstance(record.get("text"), str):
            raise UserError(f"{name}:{number}: expected {expected}.")
        if record["text"].strip():
            yield record["text"]


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
