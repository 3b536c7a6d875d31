"""A corpus cut into pieces that can be read on their own: how several streams share a corpus without each
reading all of it.

A piece is a whole file (compressed files, archives, Parquet, and text read a document per file cannot be entered
in the middle), a byte range of a plain text or JSON-lines file, or a range of rows of a saved dataset. Ranges are
cut at document boundaries (after a blank line in text, after a line end in JSON lines), so the documents of the
pieces, read one after another, are exactly the documents `read_documents` gives for the whole corpus: none lost,
none twice. The cut points depend on the corpus and the piece size alone, never on how many streams read the
pieces, so a piece and its documents are the same at any number of processes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from electra.data.corpus import (
    bounded,
    corpus_files,
    file_documents,
    is_saved_dataset,
    jsonl_documents,
    looks_pos_tagged,
    open_corpus_file,
    resolved_boundary,
    saved_dataset_documents,
    saved_dataset_split,
    text_documents,
)
from electra.data.corpus_files import JSON_SUFFIXES, TEXT_SUFFIXES, decoded_blocks

PIECE_BYTES_MAX = 64 << 20  # a piece of a large corpus: hundreds of them for tens of gigabytes
PIECES_WANTED = 64  # a corpus under 64 x PIECE_BYTES_MAX is cut into about this many (every stream gets some)
BOUNDARY_SEARCH = 16 << 20  # how far past a nominal cut a boundary is looked for before that cut is dropped
SEARCH_STEP = 1 << 16  # bytes read at a time while looking for a document boundary
_BLANK_LINE = re.compile(rb"\n[ \t\r\f\v]*\n")


@dataclass(frozen=True)
class Piece:
    """One readable part of a corpus: `kind` "file" (the whole of `path`), "bytes" (bytes [start, end) of a
    plain text or JSON-lines file) or "rows" (rows [start, end) of a saved dataset). `size` is its bytes on disk
    (a rows piece: its share of the dataset's files), what the streams' shares are balanced by."""

    path: str
    kind: str
    start: int = 0
    end: int = 0
    size: int = 0
    boundary: str = "blank"  # how a text file's documents end ("file" or "blank", as decided for the corpus)


def piece_bytes(total_bytes: int, window_chars: int) -> int:
    """The size corpus files are cut at: about 1/PIECES_WANTED of the corpus, at most PIECE_BYTES_MAX, and never
    under a shuffle window (a piece holds at least one whole window's worth of text)."""
    return max(window_chars, min(PIECE_BYTES_MAX, total_bytes // PIECES_WANTED))


def plan_pieces(corpus: str | Path, doc_boundary: str, window_chars: int) -> list[Piece]:
    """The pieces of `corpus`, in corpus order (the order `read_documents` reads it in)."""
    path = Path(corpus)
    if is_saved_dataset(path):
        return _dataset_pieces(path, window_chars)
    files = corpus_files(path)
    boundary = resolved_boundary(path, files, doc_boundary)
    sizes = [file.stat().st_size for file in files]
    size = piece_bytes(sum(sizes), window_chars)
    pieces: list[Piece] = []
    for file, length in zip(files, sizes):
        kind = _splittable(file, boundary)
        if kind is None or length < 2 * size:
            pieces.append(Piece(str(file), "file", 0, length, length, boundary))
            continue
        cuts = [0]
        for nominal in range(size, length - size // 2, size):
            cut = _boundary_after(file, max(nominal, cuts[-1] + 1), kind)
            if cut is not None and cuts[-1] < cut < length:
                cuts.append(cut)
        cuts.append(length)
        pieces += [Piece(str(file), "bytes", a, b, b - a) for a, b in zip(cuts, cuts[1:])]
    return pieces


def piece_documents(piece: Piece, strict_utf8: bool, text_field: str) -> Iterator[str]:
    """The documents of one piece, as `read_documents` gives them for that part of the corpus."""
    path = Path(piece.path)
    if piece.kind == "rows":
        yield from saved_dataset_documents(path, text_field, range(piece.start, piece.end))
        return
    if piece.kind == "file":
        yield from file_documents(path, piece.boundary, strict_utf8, text_field)
        return
    name = f"{path} (from byte {piece.start})" if piece.start else str(path)
    with open_corpus_file(path) as handle:
        tagged = None
        if path.suffix.lower() not in JSON_SUFFIXES:
            tagged = looks_pos_tagged(handle.read(1 << 14).decode("utf-8", errors="replace"))
        handle.seek(piece.start)
        stream = _ByteRange(handle, piece.end - piece.start)
        if path.suffix.lower() in JSON_SUFFIXES:
            documents = jsonl_documents(name, decoded_blocks(name, stream, strict_utf8, True), text_field)
        else:
            documents = text_documents(decoded_blocks(name, stream, strict_utf8, False), "blank", tagged)
        for document in documents:
            yield from bounded(document)


def _splittable(file: Path, boundary: str) -> str | None:
    """ "json" or "text" for a file that can be entered at a document boundary, None for one read whole."""
    suffix = file.suffix.lower()
    if suffix in JSON_SUFFIXES:
        kind = "json"
    elif suffix in TEXT_SUFFIXES and boundary == "blank":
        kind = "text"
    else:
        return None
    with open_corpus_file(file) as handle:
        head = handle.read(2)
    return None if head in (b"\xff\xfe", b"\xfe\xff") else kind  # UTF-16 is read whole


def _boundary_after(file: Path, offset: int, kind: str) -> int | None:
    """The first document start at or after `offset`: after a line end (JSON lines) or after a blank line
    (text); None when none comes within BOUNDARY_SEARCH bytes (that cut is dropped and its pieces merge)."""
    data = b""
    with open_corpus_file(file) as handle:
        handle.seek(offset - 1)
        while len(data) < BOUNDARY_SEARCH:  # a few kilobytes in text with paragraphs
            more = handle.read(SEARCH_STEP)
            if not more:
                return None
            # the step before is searched again from its last line end: a blank line may straddle the steps
            since = max(0, data.rfind(b"\n", 0, len(data)))
            data += more
            if kind == "json":
                found = data.find(b"\n", since)
                if found >= 0:
                    return offset + found
            else:
                match = _BLANK_LINE.search(data, since)
                if match is not None:
                    return offset - 1 + match.end()
    return None


def _dataset_pieces(path: Path, window_chars: int) -> list[Piece]:
    rows = saved_dataset_split(path).num_rows
    total = sum(file.stat().st_size for file in path.rglob("*.arrow"))
    count = max(1, min(rows, -(-total // piece_bytes(total, window_chars))))
    bounds = [rows * k // count for k in range(count + 1)]
    return [
        Piece(str(path), "rows", a, b, total * (b - a) // max(1, rows))
        for a, b in zip(bounds, bounds[1:])
        if b > a
    ]


class _ByteRange:
    """Reads at most `length` bytes of `handle` from where it stands."""

    def __init__(self, handle, length: int):
        self.handle, self.left = handle, length

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > self.left:
            size = self.left
        data = self.handle.read(size)
        self.left -= len(data)
        return data
