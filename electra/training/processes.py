"""The processes of a launch: their group and its collective timeout, the Accelerator every command runs through,
waits on the main process's one-off work, and each process's own random stream.

One module for what several processes share, apart from the training loop (`electra.training.engine`): the
commands that evaluate or score without training use it too.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator, PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import InitProcessGroupKwargs

from electra.core.errors import UserError

COLLECTIVE_TIMEOUT_SECONDS = 600
LONG_WAIT = timedelta(days=1)  # how long the others wait for the main process's one-off work
_long_wait_group: Any = None


def collective_timeout() -> timedelta:
    """How long a process waits at a collective (an all-reduce, a barrier) for the others before it stops with one
    line: ELECTRA_COLLECTIVE_TIMEOUT seconds, else 10 minutes, where the backends' own default is 30 (gloo) and a
    process that hangs (stuck on a file system, stopped) would hold the whole launch that long. The one-off work of
    the main process that the others wait for (a vocabulary, an example cache) has its own limit
    (`main_process_first`)."""
    return timedelta(seconds=float(os.environ.get("ELECTRA_COLLECTIVE_TIMEOUT", COLLECTIVE_TIMEOUT_SECONDS)))


def process_state() -> PartialState:
    """The launch's processes and their group (Accelerate's PartialState), the group made on first use with the
    library's `collective_timeout`. Every command asks for it here, so the first one to ask sets the timeout."""
    return PartialState(cpu=not torch.cuda.is_available(), timeout=collective_timeout())


def make_accelerator(mixed_precision: str = "no") -> Accelerator:
    """The Accelerator every command trains and evaluates through. Without a GPU it asks for the CPU outright:
    Accelerate then joins the processes `torchrun` or `accelerate launch` started into one gloo group (left to
    itself on a CPU-only machine, each of them would run alone, on all the data, writing the same files).

    Accelerate keeps one precision per process and refuses another: a Python caller's second run (a bf16
    `electra.pretrain`, then `electra.finetune_glue`) would fail. The earlier precision is dropped here; the
    processes and their group (Accelerate's PartialState) stay as they are."""
    process_state()
    # Accelerate's own (private) state: read defensively, so a release that renames it only loses the reset
    shared = getattr(AcceleratorState, "_shared_state", {})
    reset = getattr(AcceleratorState, "_reset_state", None)
    if reset is not None and shared.get("_mixed_precision", mixed_precision) != mixed_precision:
        reset()
    return Accelerator(
        mixed_precision=mixed_precision,
        cpu=not torch.cuda.is_available(),
        kwargs_handlers=[InitProcessGroupKwargs(timeout=collective_timeout())],
    )


@contextlib.contextmanager
def main_process_first(accelerator: Accelerator) -> Iterator[None]:
    """`accelerator.main_process_first()` for one-off work that can take hours (a vocabulary trained, a corpus
    packed into the cache): the others wait for it on a gloo group of their own whose timeout is LONG_WAIT, not
    the training collectives' `collective_timeout`."""
    global _long_wait_group
    if accelerator.num_processes == 1:
        yield
        return
    import torch.distributed as dist

    if _long_wait_group is None:  # every process reaches its first such wait at the same point
        _long_wait_group = dist.new_group(backend="gloo", timeout=LONG_WAIT)
    if not accelerator.is_main_process:
        dist.barrier(group=_long_wait_group)
    yield
    if accelerator.is_main_process:
        dist.barrier(group=_long_wait_group)


def process_count() -> int:
    """How many processes the launcher started, before an Accelerator exists (for sizes that depend on it).
    Accelerate's process state is made once per process, so it is made here as `make_accelerator` would."""
    return process_state().num_processes


def main_process_print(text: str) -> None:
    """`print` from the main process only, before an Accelerator exists: a note every process of a launch would
    otherwise print once each."""
    process_state().print(text)


def per_process_batch(batch_size: int, processes: int, flag: str = "--batch-size") -> int:
    """The sequences each process takes per optimizer step when `batch_size` is the whole step's, over all
    processes (as `pretrain`'s --batch-size is): a launch with more processes trains the same recipe. A batch
    the processes cannot share evenly is refused (every process decides alike) rather than quietly changed."""
    if batch_size % processes:
        raise UserError(
            f"{flag} {batch_size} is the batch of one optimizer step over all processes and does not split evenly "
            f"over {processes}; give a multiple of {processes}."
        )
    return batch_size // processes


def split_rng_per_process(rank: int, world: int) -> None:
    """Give every process its own random stream (masking, sampling, dropout), derived from the shared one.

    All processes are seeded alike so that they build identical models; left so, each would mask the same positions
    of its rows and draw the same samples. One draw from the shared stream plus the process index reseeds torch,
    numpy and `random`. A single process keeps its stream untouched, so one-process runs are unchanged.
    """
    if world <= 1:
        return
    seed_process(int(torch.randint(0, 2**31 - 1, (1,)).item()), rank)


def seed_process(base: int, rank: int) -> None:
    """Seed torch, numpy and `random` of process `rank` from `base`, apart from every other process's."""
    seed = base + 7919 * (rank + 1)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
