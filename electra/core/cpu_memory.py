"""glibc's malloc, told to keep freed blocks for the next training step instead of handing them back to the kernel.

Why: a training step allocates and frees the same large activations every step (16 MB each at ELECTRA-Small's
batch of 32, 64 MB at its own batch of 128). glibc serves a block above its mmap threshold (at most 32 MB) from a
fresh mapping and trims the top of its heap once more than its trim threshold is free, so the next step faults the
same memory back in: one page fault per 4 KB, each page zeroed by the kernel. With mmap off (every block from the
heap) and a high trim threshold, the blocks stay mapped. Measured on Small, 2 cores, against a 32 MB mmap
threshold: `bench/pretrain_throughput.py --batch-size 128` went from 1,370 to 1,779 tokens/s (892,000 → 7,000 page
faults and 3.8 → 0.1 s of kernel time per step); an 8-step `electra pretrain --size small` (batch 128, real text,
whose heap the data loading had already grown) from 1,589 to 1,615 tokens/s over its last 4 steps, with half the
page faults (4.0M → 2.1M) and kernel time (20 → 11 s) over the whole run. Against glibc's defaults at batch 32,
11,000-71,000 faults per step fell to 300-1,800 and steps ran 1-5% faster. Preloading jemalloc with its decay
turned off did as well at batch 32; with its defaults it was 27% slower, since it returns blocks above 8 MB at once
(600,000 faults per step).

The cost is memory the process keeps after a peak (freed blocks stay in the heap, up to `TRIM_THRESHOLD` of it
free at the top), which a training process reuses at its next step anyway. Elsewhere (macOS, Windows, musl)
nothing changes.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Turns glibc's mmap off and raises its trim threshold for this process; True where glibc took both."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):  # not glibc
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
