"""`electra.core.cpu_memory`: with glibc told to keep freed blocks, later rounds of large allocations reuse them instead of
faulting fresh pages in (the best of three rounds is taken: the kernel may still move a block now and then)."""

from __future__ import annotations

import subprocess
import sys

import pytest

ROUNDS = r"""
import resource, sys, torch
import ctypes
from electra.core.cpu_memory import M_MMAP_THRESHOLD, keep_freed_memory
if sys.argv[1] == "keep":
    applied = keep_freed_memory()
else:  # glibc's initial threshold, held fixed (its own would move with what is freed): every block a fresh mapping
    applied = bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 * 1024))

def one_round():  # like a step's activations: many 16 MB blocks and a few above glibc's 32 MB ceiling, all freed
    blocks = [torch.ones(4 << 20) for _ in range(8)] + [torch.ones(16 << 20) for _ in range(4)]
    del blocks

one_round()
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    one_round()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(applied, min(faults))
"""
PAGES_PER_ROUND = (8 * (16 << 20) + 4 * (64 << 20)) // 4096


def _faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] == "True", int(out[1])


def test_kept_blocks_are_reused_without_page_faults():
    applied, faults = _faults("keep")
    if not applied:
        pytest.skip("not glibc: the allocator is left as it is")
    assert faults < PAGES_PER_ROUND // 10, faults
    _, fresh_faults = _faults("fresh")  # the same rounds with every block mapped afresh: the count sees them
    assert fresh_faults > PAGES_PER_ROUND // 2, fresh_faults
