"""Nothing a user wrote is replaced unless they ask: the one check every command runs before writing its output."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from electra.core.errors import UserError
from electra.core.output_lock import refuse_live_run
from electra.core.run_inputs import RunInputs
from electra.core.run_records import RUN_RECORD
from electra.core.settings import spelling

arg = spelling(RunInputs)  # --overwrite on the command line, overwrite=True in Python
OUTPUT = (
    "<output>"  # an `option` default: the output folder, as the caller spells it (--output or output_dir)
)


def _option(option: str | None) -> str | None:
    return arg("output_dir") if option == OUTPUT else option


def refuse_to_replace(paths: Iterable[str | Path], overwrite: bool, resume_hint: bool = False) -> None:
    """Stop with one line when any of `paths` (what this command is about to write) already exists.

    `overwrite` is the user's `--overwrite`; `resume_hint` adds that `--resume` continues instead.
    """
    if overwrite:
        return
    existing = [Path(p) for p in paths if Path(p).exists()]
    if existing:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        resume = f", {arg('resume')} to continue it" if resume_hint else ""
        raise UserError(
            f"{existing[0]} already exists{more}; pass {arg('overwrite')} to replace it{resume}, or choose another "
            "output."
        )


def refuse_to_replace_an_input(
    output: str | Path, reads: Iterable[tuple[str, str | Path | None]], option: str = OUTPUT
) -> None:
    """Stop with one line when `output` is an existing file this command reads, `--overwrite` or not: `probe
    --output DATA/glue/SST-2/dev.tsv --overwrite` replaced the data with its results, `--output MODEL/config.json`
    the checkpoint's config. `reads` pairs how the message names an input (`--model m`) with a file, or with a
    folder whose files the command reads (a checkpoint, a run), at any depth; links and `..` are seen through."""
    output, option = Path(output), _option(option)
    if not output.is_file():
        return
    for what, read in reads:
        if read is None:
            continue
        read = Path(read)
        folder = read.is_dir()
        # a folder's files at any depth: else `probe --output RUN/export.json` would replace a run's manifest
        # where only its discriminator/ folder is named as read
        if any(_same_path(p, read) for p in output.parents) if folder else _same_path(output, read):
            named = "" if what.endswith(str(read)) else f" ({read})"
            where = f"is in {what}{named}, whose files" if folder else f"is {what}, which"
            raise UserError(
                f"{option} {output} {where} this command reads; it is never replaced, even with "
                f"{arg('overwrite')}: "
                f"choose another {option}."
            )


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()


def start_over(
    output: str | Path, produced: Iterable[str], overwrite: bool, reads: Iterable[str | Path | None] = ()
) -> None:
    """Before a resumable command (glue, squad, tlm train, tartan) starts afresh in `output`: an earlier run there
    is refused, or, with `overwrite`, its files are deleted.

    Replacing them one by one as the new run goes is not enough: the checkpoints, finished seeds and stage markers
    it has not reached yet would stay, and a later `--resume` would take them for its own (the engine refuses a
    fresh start beside checkpoints for that reason). Only the names in `produced` go, and only where OUTPUT/run.json
    or OUTPUT/results.json shows that a run wrote them; a user's other files stay; and none that holds a path the
    run `reads` (its --model, data files). Run before the processes meet: the first one deletes, and the others
    cannot pass their start-up until it has.
    """
    output = Path(output)
    refuse_file_as_directory(output)
    refuse_live_run(output)
    paths = [output / name for name in produced]
    refuse_unowned(output, produced)
    refuse_to_replace(paths, overwrite, resume_hint=True)
    present = [path for path in paths if path.exists()]
    if not present:
        return
    for path in present:
        for read in (Path(r).resolve() for r in reads if r is not None):
            if read == path.resolve() or path.resolve() in read.parents:
                raise UserError(
                    f"{arg('overwrite')} would delete {path}, which this run reads ({read}); choose another "
                    f"{arg('output_dir')}."
                )
    if os.environ.get("RANK", "0") != "0":
        return
    for path in present:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def refuse_unowned(output: str | Path, produced: Iterable[str]) -> None:
    """One line when `output` holds names a run writes (`produced`) but no OUTPUT/run.json or results.json shows
    that a run wrote them: they are a user's, and `--overwrite` leaves them (`start_over`), so this is said before
    any refusal that would suggest it."""
    output = Path(output)
    present = [name for name in produced if (output / name).exists()]
    if present and not any((output / name).is_file() for name in (RUN_RECORD, "results.json")):
        raise UserError(
            f"{output} holds {_listing(present)}, but no {RUN_RECORD} shows that a run wrote them, so they are "
            f"not replaced, even with {arg('overwrite')}; move them or choose another {arg('output_dir')}."
        )


def refuse_file_as_directory(directory: str | Path, option: str | None = OUTPUT) -> None:
    """Stop with one line when `directory` (or a folder above it) is an existing file: every command that writes a
    folder checks here first, so a mistyped path is named instead of surfacing as a NotADirectoryError half-way.

    `option` starts the message (None: the caller names the option, as argparse does)."""
    directory, option = Path(directory), _option(option)
    for path in (directory, *directory.parents):
        if path.exists() and not path.is_dir():
            where = "" if path == directory else f": {path}"
            start = f"{option} " if option else ""
            raise UserError(f"{start}{directory}{where} is a file; choose a directory.")


def refuse_unwritable_directory(directory: str | Path, option: str | None = OUTPUT) -> None:
    """Stop with one line when `directory` cannot be created or written (a read-only or virtual file system, a
    folder of another user), before any work: otherwise the run trains a vocabulary and builds its examples, then
    dies with a traceback at its first write. Probed by doing: permission bits do not tell (root may write
    anywhere but /proc). What the probe creates is removed again."""
    if os.environ.get("RANK", "0") != "0":
        # under torchrun or accelerate launch only the main process writes outputs, so it alone probes: two
        # processes making and removing the same folder at once fail each other's probe ("File exists")
        return
    directory, option = Path(directory), _option(option)
    start = f"{option} " if option else ""
    made: list[Path] = []
    try:
        for path in reversed((directory, *directory.parents)):
            if not path.exists():
                path.mkdir()
                made.append(path)
        probe, name = tempfile.mkstemp(prefix=".electra-write-test-", dir=directory)
        os.close(probe)
        os.unlink(name)
    except OSError as exc:
        raise UserError(
            f"{start}{directory}: cannot write here ({exc.strerror}); choose another directory."
        ) from None
    finally:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()


def refuse_unusable_output(directory: str | Path, option: str | None = OUTPUT) -> None:
    """The checks every output folder gets before any work, from the command line (while --output is read) and
    from Python alike: not a file (nor under one), and writable (`/proc/x`, a read-only mount)."""
    refuse_file_as_directory(directory, option)
    refuse_unwritable_directory(directory, option)


def check_output_file(
    raw: str | Path,
    overwrite: bool,
    example: str = "scores.jsonl",
    reads: dict[str, str | None] | None = None,
    option: str = OUTPUT,
) -> None:
    """Before any work, for a command that writes one file: an `option` that cannot take a file is refused in one
    line, --overwrite or not.

    A directory is not replaced by a file even when asked (that would delete what it holds), and writing into
    it would pick a name the user did not give; a path under a file cannot be created. Both are said here, not
    as a traceback after all the work. Nor is a file the command reads replaced (`reads`: option -> path):
    else `score --input x.json --output x.json --overwrite` would replace the user's list with its scored
    copy, and `squad-eval --out dev.json` the data set. `example` is the file name the message suggests."""
    path, option = Path(raw), _option(option)
    if path.is_dir():
        raise UserError(f"{option} {path} is a directory; name the file to write, e.g. {path / example}.")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"{option} {path}: {parent} is a file, so nothing can be written under it.")
    inputs = [(f"the {name} file", read) for name, read in (reads or {}).items() if read and read != "-"]
    refuse_to_replace_an_input(path, inputs, option)
    refuse_to_replace([path], overwrite)
    # A folder that cannot be made or written (/proc/x, a read-only mount) is refused before any work.
    refuse_unwritable_directory(path.parent, option)


def _listing(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def refuse_foreign_directory(directory: str | Path, overwrite: bool, produced: Iterable[str] = ()) -> None:
    """A directory that is not a run of this command is left as the user made it.

    While it holds anything it is refused; `overwrite` writes the run beside what is there. A name the run writes
    (`produced`) that is already there is refused even with `overwrite`: nothing shows that this command wrote it,
    and `--overwrite` replaces only a command's own earlier output.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return
    entries = sorted(p.name for p in directory.iterdir())
    produced = set(produced)
    clashing = [name for name in entries if name in produced]
    if clashing:
        raise UserError(
            f"{directory} is not a run of this command but holds {_listing(clashing)}, which a run writes; "
            f"{arg('overwrite')} replaces only a run's own files, so move them or choose another "
            f"{arg('output_dir')}."
        )
    if entries and not overwrite:
        raise UserError(
            f"{directory} is not empty ({_listing(entries)}) and is not a run of this command; choose another "
            f"{arg('output_dir')}, or pass {arg('overwrite')} to write the run beside those files (none of them "
            "is changed)."
        )
