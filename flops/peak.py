"""The machine's dense matmul rate, the denominator of model-FLOPs utilisation (MFU), measured where the model runs
rather than read off a data sheet; and whether a precision has hardware behind it at all.

Why the size is chosen by a clock: on a CPU without native bf16 (AVX2 only, no AVX-512-BF16 or AMX), PyTorch runs a
bf16 matmul through a scalar fallback at about 1.4 GFLOP/s against 180 in fp32, so one 2048³ product takes minutes
and a fixed-size measurement looks like a hang. The size doubles from 256 while the next product still fits the time
budget, up to the size that fills the device (2048³ on a CPU, 8192³ on a GPU).
"""

from __future__ import annotations

import functools
import time

import torch

CPU_SIZE, GPU_SIZE = 2048, 8192
START_SIZE = 256


def native_precision(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether `dtype` matmuls run on hardware made for them here: always on a GPU and in fp32; on a CPU, bf16 needs
    AVX-512-BF16 or AMX and fp16 needs AMX-FP16 (elsewhere PyTorch converts element by element, 100× slower)."""
    if torch.device(device).type != "cpu" or dtype == torch.float32:
        return True
    cpu = torch.cpu
    checks = {
        torch.bfloat16: ("_is_avx512_bf16_supported", "_is_amx_tile_supported"),
        torch.float16: ("_is_amx_fp16_supported",),
    }.get(dtype, ())
    probes = [getattr(cpu, name, None) for name in checks]
    if probes and all(probe is None for probe in probes):  # a torch without the probes: do not cry wolf
        return True
    return any(probe is not None and probe() for probe in probes)


def peak_dtype(device: torch.device | str, dtype: torch.dtype) -> torch.dtype:
    """The precision whose peak an MFU in `dtype` is charged against: its own where it is native, else fp32. An
    emulated precision has no units of its own: oneDNN's bf16 linear on an AVX2 CPU converts to fp32 and ran a tiny
    step at 4.5 GFLOP/s, while ATen's bf16 `mm` (what the peak times) falls back to scalar code at 1.3, which gave
    an MFU of 326%."""
    return dtype if native_precision(device, dtype) else torch.float32


def _sync(device: torch.device) -> None:
    """Wait for the device: GPU products are asynchronous, and an unsynchronised clock times only the launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _seconds_per_product(a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    torch.mm(a, b)  # warm: allocations, BLAS thread start-up, GPU kernel selection
    _sync(a.device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        _sync(a.device)
        best = min(best, time.perf_counter() - start)
    return best


def _operands(size: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    return a, b


def matmul_peak(
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    size: int | None = None,
    repeats: int = 10,
    seconds_per_product: float = 0.25,
) -> float:
    """The best rate (FLOP/s) of `repeats` square `dtype` products on `device`. Without `size`, the largest power
    of two from 256 up to 2048 (CPU) or 8192 (GPU) whose product, extrapolated from the size before it, takes at
    most `seconds_per_product`."""
    device = torch.device(device)
    if size is not None:
        return 2.0 * size**3 / _seconds_per_product(*_operands(size, device, dtype), repeats)
    largest = GPU_SIZE if device.type == "cuda" else CPU_SIZE
    size = START_SIZE
    operands = _operands(size, device, dtype)
    # twice the size is eight times the work
    while size < largest and 8 * _seconds_per_product(*operands, repeats=1) <= seconds_per_product:
        size *= 2
        operands = _operands(size, device, dtype)
    return 2.0 * size**3 / _seconds_per_product(*operands, repeats)


@functools.cache
def cached_matmul_peak(device: str, dtype: torch.dtype) -> float:
    """`matmul_peak` measured once per process and (device, dtype): for a training run's MFU line, where a second
    of measurement per run would add up over many short runs (a test suite, a sweep)."""
    return matmul_peak(device, dtype)
