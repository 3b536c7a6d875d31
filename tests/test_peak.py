"""The matmul peak behind MFU: its size follows a clock, so an emulated precision is measured in seconds instead
of minutes, and the native-precision probe reads the CPU's features."""

from __future__ import annotations

import pytest
import torch

import electra.flops.peak as peak_module
from electra.flops.peak import matmul_peak, native_precision, peak_dtype


def _machine(monkeypatch, rate: float) -> list[int]:
    """A device that multiplies at `rate` FLOP/s whatever the size; returns the sizes it was asked to time."""
    sizes: list[int] = []

    def seconds(a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
        sizes.append(a.shape[0])
        return 2.0 * a.shape[0] ** 3 / rate

    monkeypatch.setattr(peak_module, "_seconds_per_product", seconds)
    return sizes


@pytest.mark.parametrize(
    ("rate", "tried"),
    [
        (180e9, [256, 512, 1024, 2048]),  # an fp32 CPU: 2048³ takes 0.1 s
        (1.3e9, [256, 512, 512]),  # bf16 emulated on AVX2: 1024³ would take 1.7 s per product
        (4e5, [256, 256]),  # slower still: the smallest size, whatever it costs
    ],
)
def test_the_size_doubles_while_the_next_product_fits_the_budget(monkeypatch, rate, tried):
    sizes = _machine(monkeypatch, rate)
    assert matmul_peak("cpu", torch.float32) == pytest.approx(rate)
    assert sizes == tried


def test_a_given_size_is_measured_as_given(monkeypatch):
    sizes = _machine(monkeypatch, 1.0e9)
    assert matmul_peak("cpu", torch.float32, size=64) == pytest.approx(1.0e9)
    assert sizes == [64]


@pytest.mark.parametrize(
    ("avx512_bf16", "amx", "amx_fp16", "bf16", "fp16"),
    [(False, False, False, False, False), (True, False, False, True, False), (False, True, True, True, True)],
)
def test_native_precision_follows_the_cpu_features(monkeypatch, avx512_bf16, amx, amx_fp16, bf16, fp16):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_amx_fp16_supported", lambda: amx_fp16)
    assert native_precision("cpu", torch.bfloat16) is bf16
    assert native_precision("cpu", torch.float16) is fp16
    assert native_precision("cpu", torch.float32) and native_precision("cuda", torch.bfloat16)


def test_an_emulated_precision_is_charged_against_the_fp32_peak(monkeypatch):
    monkeypatch.setattr(peak_module, "native_precision", lambda device, dtype: dtype != torch.bfloat16)
    assert peak_dtype("cpu", torch.bfloat16) == torch.float32
    assert peak_dtype("cpu", torch.float16) == torch.float16
    assert peak_dtype("cpu", torch.float32) == torch.float32
