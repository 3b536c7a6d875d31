"""TLM's batch schedule: every step is one task (internal) batch and ρ1 retrieved (external) batches.

Kept pure (any iterators in, tuples out) so the ratio can be tested exactly, apart from tensors and models.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TypeVar

A = TypeVar("A")
B = TypeVar("B")


def interleave(internal: Iterable[A], external: Iterable[B], rho1: int) -> Iterator[tuple[A, list[B]]]:
    """(internal batch, [ρ1 external batches]) per step, in order; stops when either source runs out.

    `rho1` is a whole number, at least 0 (`electra.tlm.settings.TLMSettings` refuses any other where the settings
    are built). With ρ1 = 0 the steps carry no external data (task-only training, or LM on task data only).
    """
    internal_it, external_it = iter(internal), iter(external)
    for batch in internal_it:
        extra = list(islice(external_it, rho1))
        if len(extra) < rho1:
            return
        yield batch, extra
