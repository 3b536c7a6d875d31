"""Nothing a user wrote is replaced unless they ask: the one check every command runs before writing its output."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from electra.errors import UserError


def refuse_to_replace(paths: Iterable[str | Path], overwrite: bool, resume_hint: bool = False) -> None:
    """Stop with one line when any of `paths` (what this command is about to write) already exists.

    `overwrite` is the user's `--overwrite`; `resume_hint` adds that `--resume` continues instead.
    """
    if overwrite:
        return
    existing = [Path(p) for p in paths if Path(p).exists()]
    if existing:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        resume = ", --resume to continue it" if resume_hint else ""
        raise UserError(
            f"{existing[0]} already exists{more}; pass --overwrite to replace it{resume}, or choose another output."
        )


def refuse_foreign_directory(directory: str | Path, overwrite: bool) -> None:
    """A run directory must be new or empty: a directory holding other files is refused unless `overwrite`."""
    directory = Path(directory)
    if overwrite or not directory.is_dir():
        return
    entries = sorted(p.name for p in directory.iterdir())
    if entries:
        raise UserError(
            f"{directory} is not empty ({', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''}) and is not "
            "a run of this command; choose another --output, or pass --overwrite to write into it."
        )
