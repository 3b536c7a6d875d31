"""One run at a time per output folder: a second command resuming or starting in a folder that a live run is
writing would continue from checkpoints the first is still writing and interleave its logs (duplicated metrics
rows, a checkpoint from either run), so it is refused in one line instead."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from electra.core.errors import UserError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; runs are not guarded there
    fcntl = None

LOCK_FILE = ".electra.lock"


@contextlib.contextmanager
def output_lock(directory: str | Path | None) -> Iterator[None]:
    """Hold OUTPUT/.electra.lock (an advisory `flock`, released by the kernel if the process dies) while the body
    runs; refused at once when another live process holds it. None: nothing to guard (no output folder, or not the
    process that writes it)."""
    if directory is None or fcntl is None:
        yield
        return
    path = Path(directory) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise UserError(_busy(directory, handle.read())) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
    finally:
        handle.close()


def refuse_live_run(directory: str | Path) -> None:
    """One line when a live process holds OUTPUT's lock. Checked before a command deletes or resumes anything
    there: the lock is taken only when training starts, so a second command's `--overwrite` would otherwise
    delete a live run's logs before reaching it (the live run then dying on its next log write), and a
    `--resume` beside a live run would call its checkpoints incomplete."""
    if fcntl is None:
        return
    try:
        handle = open(Path(directory) / LOCK_FILE)
    except OSError:
        return  # no lock file: no run has been writing here
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(_busy(directory, handle.read())) from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _busy(directory: str | Path, holder: str) -> str:
    return (
        f"{directory}: a run is writing here now (pid {holder.strip() or 'another process'}); wait for it to "
        "finish, or choose another output."
    )
