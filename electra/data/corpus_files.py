"""Corpus files as streams of decoded text, read a block at a time, whatever their packaging.

A corpus file is opened by its name: compressed (`.gz`, `.bz2`, `.xz`, `.zst`), an archive (`.tar` in any of those
compressions, `.tgz`/`.txz`, `.zip`), Parquet, JSON lines or text. Archives are read as streams, member after
member in the order they are stored, and a member may itself be compressed or an archive (OpenWebText ships a
`.tar.xz` of `.xz` files that are each a tar of text files); a decompressed member without a telling suffix is
recognised as a tar by its header. Nothing here holds more than one block (READ_BLOCK bytes) of a file, so the
memory of reading is the same for a 1 MB and a 40 GB corpus.

Decoding is UTF-8, cut at line ends (whitespace inside a line longer than a block), so no character is split; a
file that turns out not to be UTF-8 is read as Latin-1 from the block that failed on, with a warning (or refused
with `strict_utf8`), and a file with a UTF-16 byte-order mark is read as UTF-16.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import tarfile
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from electra.core.errors import ElectraWarning, UserError
from electra.core.files import decode_utf16, not_text_error, utf16_without_mark
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled

READ_BLOCK = 4 << 20  # bytes decoded at a time: large enough that per-block work is noise
TEXT_SUFFIXES = {"", ".txt", ".text", ".md", ".raw", ".tokens"}
JSON_SUFFIXES = {".jsonl", ".json", ".ndjson"}
COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lzma": "xz", ".zst": "zstd", ".zstd": "zstd"}
SHORT_TAR = {".tgz": ".gz", ".txz": ".xz", ".tbz2": ".bz2", ".tzst": ".zst"}
_STREAM_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError, tarfile.TarError)


@dataclass
class Member:
    """One readable unit of a corpus file: `kind` is "text", "json" or "parquet"; `name` says where it is
    (`file` or `file:member`) in every message; `stream` holds its bytes (a path for Parquet, which seeks)."""

    name: str
    kind: str
    stream: Any


def suffix_of(name: str) -> str:
    base = name.rsplit("/", 1)[-1].lower()
    return "." + base.rsplit(".", 1)[-1] if "." in base else ""


def is_member_name(name: str) -> bool:
    """Whether an archive member is read: text, JSON lines, or something compressed or archived holding them."""
    base = name.rsplit("/", 1)[-1]
    if base.startswith(".") or base.startswith("__MACOSX"):
        return False
    suffix = suffix_of(base)
    return (
        suffix in TEXT_SUFFIXES
        or suffix in JSON_SUFFIXES
        or suffix in COMPRESSIONS
        or suffix in SHORT_TAR
        or suffix == ".tar"
    )


def file_members(file: Path, open_file: Callable[[Path], BinaryIO]) -> Iterator[Member]:
    """The members of one corpus file; `open_file` opens it for reading (and names the file when it cannot)."""
    suffix = suffix_of(file.name)
    if suffix in (".parquet", ".zip"):  # opened by their own readers: an unreadable file is one line here
        open_file(file).close()
    if suffix == ".parquet":
        yield Member(str(file), "parquet", file)
    elif suffix == ".zip":
        yield from _zip_members(file)
    else:
        with open_file(file) as raw:
            yield from _members(str(file), file.name, raw)


def _members(name: str, inner: str, stream: BinaryIO) -> Iterator[Member]:
    """`stream` (called `name` in messages, `inner` its file name as far as suffixes still tell) as members."""
    suffix = suffix_of(inner)
    if suffix in SHORT_TAR:
        yield from _tar_members(name, _decompressed(name, SHORT_TAR[suffix], stream))
    elif suffix in COMPRESSIONS:
        inner = inner[: -len(suffix)]
        stream = _decompressed(name, suffix, stream)
        if suffix_of(inner) in TEXT_SUFFIXES - {""} or suffix_of(inner) in JSON_SUFFIXES:
            yield from _members(name, inner, stream)
        else:  # no telling suffix left (OpenWebText's members are xz'd tars named ..._data.xz): ask the header
            head = _read(name, stream, 512)
            stream = _Prefixed(head, stream)
            if suffix_of(inner) == ".tar" or (len(head) == 512 and head[257:262] == b"ustar"):
                yield from _tar_members(name, stream)
            else:
                yield Member(name, "text", stream)
    elif suffix == ".tar":
        yield from _tar_members(name, stream)
    else:
        yield Member(name, "json" if suffix in JSON_SUFFIXES else "text", stream)


def _tar_members(name: str, stream: BinaryIO) -> Iterator[Member]:
    try:
        archive = tarfile.open(fileobj=stream, mode="r|")  # a stream: members in stored order, one at a time
        for member in archive:
            if member.isfile() and is_member_name(member.name):
                handle = archive.extractfile(member)
                if handle is not None:
                    yield from _members(f"{name}:{member.name}", member.name, handle)
    except tarfile.TarError as exc:
        raise UserError(f"{name}: not a readable tar archive ({exc}); check the download.") from None


def _zip_members(file: Path) -> Iterator[Member]:
    try:
        with zipfile.ZipFile(file) as archive:
            for member in sorted(archive.namelist()):
                if not member.endswith("/") and is_member_name(member) and suffix_of(member) != ".zip":
                    with archive.open(member) as handle:
                        yield from _members(f"{file}:{member}", member, handle)
    except zipfile.BadZipFile as exc:
        raise UserError(f"{file}: not a readable zip archive ({exc}).") from None


def _decompressed(name: str, suffix: str, stream: BinaryIO) -> BinaryIO:
    kind = COMPRESSIONS[suffix]
    if kind == "gzip":
        return gzip.GzipFile(fileobj=stream, mode="rb")
    if kind == "bzip2":
        return bz2.BZ2File(stream)
    if kind == "xz":
        return lzma.LZMAFile(stream)
    try:
        import zstandard
    except ImportError:
        raise UserError(
            f"{name}: zstd-compressed, and the zstandard package is missing; `pip install zstandard`."
        ) from None
    return zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)


class _Prefixed:
    """A read-only stream that gives `head` first, then the rest of `stream` (a peeked header put back)."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self.head, self.stream = head, stream

    def read(self, size: int = -1) -> bytes:
        if not self.head:
            return self.stream.read(size)
        if size is None or size < 0:
            data, self.head = self.head + self.stream.read(), b""
            return data
        data, self.head = self.head[:size], self.head[size:]
        return data if len(data) == size else data + self.stream.read(size - len(data))


def _read(name: str, stream: BinaryIO, size: int) -> bytes:
    """Up to `size` bytes (fewer only at the end); a damaged or cut-off compressed file is one line naming it."""
    try:
        data = stream.read(size)
        while 0 < len(data) < size:
            more = stream.read(size - len(data))
            if not more:
                break
            data += more
        return data
    except _STREAM_ERRORS + _zstd_errors() as exc:
        raise UserError(
            f"{name}: cannot be read to the end ({exc}); the file is damaged or cut short: download it again."
        ) from None


def _zstd_errors() -> tuple[type[BaseException], ...]:
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)


def decoded_blocks(name: str, stream: BinaryIO, strict_utf8: bool, whole_lines: bool) -> Iterator[str]:
    """The text of `stream`, a block at a time; each block ends at a line end, or (`whole_lines` False, for a
    line longer than a block) at whitespace or a character boundary, so every block decodes on its own."""
    data = _read(name, stream, READ_BLOCK)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark is not text
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 with its mark: rare enough to be read whole
        if strict_utf8:
            raise UserError(
                f"{name}: UTF-16 text (byte-order mark), not UTF-8; convert it with `iconv -f utf-16 -t utf-8` "
                f"or drop {spelled(RunInputs, 'strict_utf8')} to read it as UTF-16."
            )
        yield decode_utf16(data + _read(name, stream, -1), name)
        return
    head = data[:65536]
    encoding, offset = "utf-8", 0
    while data:
        more = _read(name, stream, READ_BLOCK)
        if more:
            block, data = _cut(data, whole_lines)
            data += more
            if not block:  # one JSON line longer than a block: keep reading until it ends
                continue
        else:
            block, data = data, b""
        try:
            text = block.decode(encoding)
        except UnicodeDecodeError as exc:
            encoding = _fallback(name, block, offset + exc.start, strict_utf8)
            text = block.decode(encoding)
        if offset == 0 and b"\0" in head and (utf16_without_mark(head) or head.count(0) > 0.01 * len(head)):
            raise not_text_error(
                name, head
            )  # valid UTF-8, but UTF-16 without its mark ("T\0h\0e\0"), or binary
        offset += len(block)
        yield text


def _cut(data: bytes, whole_lines: bool) -> tuple[bytes, bytes]:
    """`data` split after its last line end (or, without one and not `whole_lines`, its last space, else its last
    character boundary): the first part decodes by itself."""
    end = data.rfind(b"\n") + 1
    if end == 0 and not whole_lines:
        end = data.rfind(b" ") + 1
        if end == 0:
            end = len(data)
            while end > 0 and data[end - 1] & 0xC0 == 0x80:  # back out of a multi-byte character
                end -= 1
            end = end - 1 if end > 0 and data[end - 1] >= 0xC0 else end
    return (data[:end], data[end:]) if end else (b"", data)


def _fallback(name: str, block: bytes, offset: int, strict_utf8: bool) -> str:
    """Latin-1 for an 8-bit text file that is not UTF-8 (old corpora: Reuters, some Gutenberg books), with a
    warning; one line refusing it under `strict_utf8` or when the bytes are not text at all."""
    head = block[:65536]
    if utf16_without_mark(head):
        raise not_text_error(name, head)
    looks_binary = b"\0" in head or sum(b < 9 or 13 < b < 32 for b in head) > 0.01 * max(1, len(head))
    if strict_utf8 or looks_binary:
        raise UserError(
            f"{name}: undecodable bytes at offset {offset} (not UTF-8 text); convert it with "
            "`iconv -f latin1 -t utf-8` or remove it from the corpus."
        )
    warnings.warn(
        f"{name} is not UTF-8; reading it as Latin-1 ({spelled(RunInputs, 'strict_utf8')} refuses it instead)",
        ElectraWarning,
        stacklevel=4,
    )
    return "latin-1"
