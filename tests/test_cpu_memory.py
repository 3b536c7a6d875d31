"""`electra.cpu_memory`: with glibc told to keep freed blocks, later rounds of large allocations reuse them instead of
faulting fresh pages in (the best of three rounds is taken: the kernel may still move a block now and then)."""

from __future__ import annotations

import subprocess
import sys

import pytest

ROUNDS = r"""
import resource, sys, torch
from electra.cpu_memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False

def one_round():  # like a step's activations: many 16 MB blocks, all freed at the end
    blocks = [torch.ones(4 << 20) for _ in range(24)]
    del blocks

one_round()
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    one_round()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(applied, min(faults))
"""
PAGES_PER_ROUND = 24 * (16 << 20) // 4096


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
    _, default_faults = _faults("default")  # glibc's own thresholds: the heap top is trimmed, pages return
    assert default_faults > PAGES_PER_ROUND // 2, default_faults
