"""A stop asked for by a scheduler while a run trains: SIGTERM, or SIGUSR1 as SLURM's `--signal` sends it.

A scheduler that preempts a job (SLURM, Kubernetes, a spot instance) sends a signal and waits a grace period before
it kills. While the engine trains, the command line's handler only notes the signal here (`defer`); every process
agrees on it at the next update boundary (`electra.training.stop_rules.StopRules`), the run saves a checkpoint of
that update, and the engine raises `Preempted`, which the command line answers with `PREEMPTED_STATUS`. `--resume`
then continues exactly, with no update lost. Outside training (reading the corpus, exporting) there is no update to
save: the command stops at once, as for Ctrl-C.

Why a flag and not an exception at the signal: an exception lands wherever the main thread is, in the middle of an
optimizer step or a checkpoint write; the flag is read where the state is whole.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

# The signals a scheduler sends before it kills; SIGUSR1 is what `sbatch --signal=USR1@90` sends.
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))
PREEMPTED_STATUS = 75  # EX_TEMPFAIL of sysexits.h: stopped to be run again, its checkpoint saved

_state: dict[str, int | bool | None] = {"armed": False, "signal": None}


class Preempted(KeyboardInterrupt):
    """A run stopped by a scheduler's signal at an update boundary; `signum`: the signal this process received
    (None: another process did, and this one stopped with it); `saved`: whether that update's checkpoint is on disk
    (a run without checkpoints has none to resume from). A KeyboardInterrupt, so that every cleanup that runs for
    Ctrl-C runs for it too."""

    def __init__(self, step: int, signum: int | None, saved: bool) -> None:
        super().__init__(step, signum, saved)
        self.step, self.signum, self.saved = step, signum, saved

    @property
    def cause(self) -> str:
        return (
            f"{signal.Signals(self.signum).name}" if self.signum is not None else "another process's signal"
        )


def defer(signum: int) -> bool:
    """The command line's signal handler asks this first: while a run trains, the signal is noted and True is
    returned (the run stops at the next update); otherwise False (stop now). A worker process forked while a run
    trains inherits the armed state, so it ignores the signal too: the trainer stops it."""
    if not _state["armed"]:
        return False
    _state["signal"] = signum
    return True


def requested() -> int | None:
    """The signal that asked this process to stop, if any."""
    signum = _state["signal"]
    return int(signum) if signum is not None else None


@contextlib.contextmanager
def deferring() -> Iterator[None]:
    """While the engine trains: a scheduler's signal becomes a stop request instead of an interruption."""
    _state.update(armed=True, signal=None)
    try:
        yield
    finally:
        _state["armed"] = False
