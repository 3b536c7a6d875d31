"""Files written whole or not at all: every command that records results, settings or checkpoints writes through
here, so a run killed mid-write leaves the previous file, never half of one."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from electra.errors import UserError, first_line


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
