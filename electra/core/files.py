"""Files written whole or not at all: every command that records results, settings or checkpoints writes through
here, so a run killed mid-write leaves the previous file, never half of one."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from electra.core.errors import ElectraWarning, UserError, first_line


def require_file(path: str | Path, what: str, hint: str = "") -> Path:
    """`path` as a Path when it names a file; otherwise one line that says which of the two mistakes it is (a
    folder given where a file belongs reads as a missing file otherwise) and `hint`, what to pass instead."""
    path = Path(path)
    tail = f"; {hint}" if hint else ""
    if path.is_dir():
        raise UserError(f"{path} is a directory; give the path of the {what}, not a folder{tail}.")
    if not path.is_file():
        raise UserError(f"{path}: {what} does not exist{tail}.")
    return path


def write_text_atomically(path: str | Path, text: str, durable: bool = False) -> None:
    """`path` holds `text` after one rename; its folder is made if needed. `durable` also flushes it to the disk
    first (checkpoint pointers: a crash of the machine, not just the process, must not leave an empty file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.partial")
    try:
        staging.write_text(text, encoding="utf-8")
        if durable:
            fsync_file(staging)
        os.replace(staging, path)
    except BaseException:  # a full disk, Ctrl-C or SIGTERM half way: no hidden half file left beside `path`
        staging.unlink(missing_ok=True)
        raise


def read_safetensors(path: str | Path, device: str = "cpu") -> dict[str, Any]:
    """The tensors of a safetensors file a user gave (a checkpoint, an export's weights). A file cut short by a copy
    or a full disk is one line naming it and the fix: safetensors' own error names neither the file nor a cause
    ("invalid header length", "MetadataIncompleteBuffer")."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device=device)
    except SafetensorError as exc:
        raise _unreadable_safetensors(path, exc) from None


def check_safetensors(path: str | Path) -> Path:
    """`path`, once its safetensors header has been read and checked against the file's length (which a copy cut
    short fails), without loading a tensor: a command can refuse damaged weights before hours of corpus work,
    in the words `read_safetensors` uses."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt"):
            pass
    except SafetensorError as exc:
        raise _unreadable_safetensors(path, exc) from None
    return Path(path)


def _unreadable_safetensors(path: str | Path, exc: Exception) -> UserError:
    return UserError(
        f"{path}: not a readable safetensors file ({exc}); it was cut short or damaged: copy it again, or "
        "export the run again."
    )


# A checkpoint's weights: one file, or shards listed by an index (transformers' save_pretrained(max_shard_size=)).
MODEL_WEIGHTS = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"


def model_weights_file(directory: str | Path) -> Path | None:
    """What holds a checkpoint's weights: model.safetensors (preferred, as transformers does), else the shards'
    index, else None."""
    for name in (MODEL_WEIGHTS, SHARD_INDEX):
        if (Path(directory) / name).is_file():
            return Path(directory) / name
    return None


def safetensors_shards(index: str | Path) -> dict[Path, list[str]]:
    """Each shard a sharded checkpoint's index names and the tensors its `weight_map` puts there, checked without
    loading a tensor: the index is intact, every shard is there with an intact header and holds what the index says.
    Anything else is one line naming the file: a shard lost or cut short by a copy must not leave the tensors it
    held at random."""
    from safetensors import SafetensorError, safe_open

    index = Path(index)
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (OSError, ValueError, AttributeError):  # unreadable, not JSON, or not an object
        weight_map = None
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(v, str) and v and Path(v).name == v for v in weight_map.values())
    ):
        raise UserError(
            f"{index}: not a shard index (a JSON object whose weight_map names each tensor's shard file); it is "
            "damaged: copy the checkpoint again, or save it again with model.save_pretrained(dir)."
        )
    shards: dict[Path, list[str]] = {}
    for tensor, shard in weight_map.items():
        shards.setdefault(index.parent / shard, []).append(tensor)
    for shard, tensors in shards.items():
        if not shard.is_file():
            raise UserError(
                f"{shard}: missing, and {index.name} puts {len(tensors)} tensor(s) there ({tensors[0]}, ...); copy "
                "every shard of the checkpoint."
            )
        try:
            with safe_open(str(shard), framework="pt") as handle:
                held = set(handle.keys())
        except SafetensorError as exc:
            raise _unreadable_safetensors(shard, exc) from None
        absent = [tensor for tensor in tensors if tensor not in held]
        if absent:
            raise UserError(
                f"{shard}: holds no {absent[0]}, which {index.name} puts there; the index and its shards were not "
                "saved together: copy the checkpoint again, or save it again with model.save_pretrained(dir)."
            )
    return shards


def read_model_weights(weights: str | Path) -> dict[str, Any]:
    """The tensors of `model_weights_file`'s answer: a single file, or every shard's tensors its index names (a
    tensor a shard holds beyond them is no part of the checkpoint)."""
    weights = Path(weights)
    if weights.name != SHARD_INDEX:
        return read_safetensors(weights)
    state: dict[str, Any] = {}
    for shard, tensors in safetensors_shards(weights).items():
        held = read_safetensors(shard)
        state.update({tensor: held[tensor] for tensor in tensors})
    return state


def save_figure_atomically(figure: Any, path: str | Path, **savefig: Any) -> None:
    """A matplotlib figure written whole to `path`, in the format its suffix names (png without one). A format
    that needs software this machine lacks (.pgf needs a TeX installation) is one line naming the file, not a
    backend's traceback, and leaves the file that was there before."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.partial")
    kind = path.suffix.removeprefix(".").lower() or "png"
    try:
        figure.savefig(staging, format=kind, **savefig)
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        staging.unlink(missing_ok=True)
        reason = first_line(exc)
        raise UserError(
            f"{path}: matplotlib could not write .{kind} here ({reason}); write .png, .pdf or .svg."
        ) from None
    except BaseException:  # Ctrl-C or SIGTERM while drawing
        staging.unlink(missing_ok=True)
        raise
    os.replace(staging, path)


def write_json_atomically(path: str | Path, value: Any, **dumps: Any) -> None:
    """`value` as indented JSON (two spaces unless `dumps` says otherwise), written as `write_text_atomically`."""
    write_text_atomically(path, json.dumps(value, **{"indent": 2, **dumps}) + "\n")


def read_json_record(path: str | Path) -> dict | None:
    """A JSON object a run wrote, or None when it is missing or unreadable: a file cut short by a full disk or a
    crash of the machine (`write_json_atomically` renames, but does not sync), or edited by hand. Callers that
    repair or redo what it described must not stop on it with a traceback."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return value if isinstance(value, dict) else None


def fsync_file(path: str | Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def feed_file(digest: Any, path: str | Path) -> None:
    """Stream a file's bytes into a hashlib `digest` in 1 MiB blocks: weights and checkpoints are too big to read
    whole."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    feed_file(digest, path)
    return digest.hexdigest()


# The strict reading of a user's text (`decode_user_text`) and UTF-16 (`decode_utf16`) live here, on the foundation
# floor, so that config files (`electra.core.config`) are read by the same rules as every other user file, and the
# corpus reader (`electra.data.corpus`) shares the UTF-16 and NUL checks.


def decode_utf16(data: bytes, name: str) -> str:
    """A file that starts with a UTF-16 byte-order mark (what Windows PowerShell's `>` and Notepad's "Unicode"
    write), read as UTF-16 with a warning; one that is not valid UTF-16 after its mark is one line naming it. Every
    reader of a user's text (corpora, score and rescore inputs) takes UTF-16 this one way."""
    try:
        text = data.decode("utf-16")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{name}: starts with a UTF-16 byte-order mark but is not valid UTF-16 (offset {exc.start}; cut "
            "short?); convert it with `iconv -f utf-16 -t utf-8`."
        ) from None
    warnings.warn(f"{name} is UTF-16 (byte-order mark); reading it as such", ElectraWarning, stacklevel=3)
    return text


def utf16_without_mark(data: bytes) -> str | None:
    """The encoding ("utf-16le" or "utf-16be") when `data` looks like UTF-16 without a byte-order mark (NUL in a
    good share of its even or odd bytes: the high byte of Latin letters), else None."""
    sample = data[:65536]
    even, odd = sample[0::2].count(0), sample[1::2].count(0)
    half = len(sample) // 2
    if max(even, odd) <= 0.3 * half or min(even, odd) > 0.05 * half:  # NULs on both sides: binary (zeros)
        return None
    encoding = "utf-16le" if odd > even else "utf-16be"
    text = sample[: 2 * half].decode(encoding, errors="replace")
    readable = sum(c.isprintable() or c.isspace() for c in text)
    return encoding if readable >= 0.9 * len(text) else None  # binary with NULs in one lane is no text


def not_text_error(name: str, data: bytes, expected: str = "") -> UserError:
    """One line for a file with NUL bytes: UTF-16 without its mark (what to convert it with), or a binary file
    (`expected`: what the command reads instead; a corpus file is to be removed). Read as UTF-8, plain-ASCII
    UTF-16 is valid, and would be trained on (or scored) as "T\0h\0e\0"."""
    encoding = utf16_without_mark(data)
    if encoding is not None:
        return UserError(
            f"{name}: UTF-16 text without a byte-order mark, not UTF-8; convert it with "
            f"`iconv -f {encoding} -t utf-8`."
        )
    instead = f"expected {expected}" if expected else "remove it from the corpus"
    return UserError(f"{name}: holds NUL bytes (offset {data.index(0)}), so it is not text; {instead}.")


def decode_user_text(data: bytes, name: str, expected: str) -> str:
    """The text of a file whose every character counts (GLUE rows, sentences to score, n-best lists, SQuAD
    JSON): UTF-8, through a byte-order mark if it has one, or UTF-16 with its mark (`decode_utf16`). Anything
    else is one line naming the file, the line and offset of the first bad byte, what the command `expected` and
    the conversion: unlike a corpus, such a file is never read as Latin-1 or with its NULs, since a wrong guess
    would train on or score other text than the user's. The one strict reader, so every command words it alike."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return decode_utf16(data, name)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if utf16_without_mark(data):
            raise not_text_error(name, data, expected) from None
        start = exc.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line = data.count(b"\n", 0, start) + 1
        cut = (
            " (the file ends inside a character: cut short?)"
            if start + (exc.end - exc.start) >= len(data)
            else ""
        )
        raise UserError(
            f"{name}:{line}: not UTF-8 text: undecodable bytes at offset {start}{cut}; expected {expected}; "
            "convert it, e.g. `iconv -f latin1 -t utf-8`."
        ) from None
    if "\0" in text:
        raise not_text_error(name, data, expected)
    return text


def refusing_duplicate_keys(
    message: Callable[[str], str],
) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A `json.loads` object_pairs_hook that builds each object as usual but raises UserError(message(key)) for a
    key given twice in one object: Python's parser keeps the last silently, dropping the first unseen."""

    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key, value in pairs:
            if key in data:
                raise UserError(message(key))
            data[key] = value
        return data

    return build
