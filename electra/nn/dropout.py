"""Dropout whose random mask is cheap on a CPU, for the hidden states and for attention probabilities.

Why: on a CPU, `torch.nn.functional.dropout` draws one Bernoulli sample per element through a floating-point
path, and at ELECTRA-Small's shape that alone took 10% of a training step (PyTorch profiler, README "Speed").
Attention dropout costs more again: SDPA's fused CPU kernel has no dropout, so with `attention_probs_dropout_prob`
above zero every layer falls back to the unfused math path and a second Bernoulli draw. Here one 64-bit random word
(numpy's SFC64 on a CPU, seeded from torch's generator) gives four 16-bit lanes, and an element is kept where its
lane clears a threshold: the keep probability is 1 - round(p * 65536) / 65536 (p = 0.1 keeps 0.8999939), and kept
values are scaled by the inverse of that exact probability, so the expectation is unchanged. Attention dropout uses
the same masks (`electra.nn.lane_attention`).

Everything else keeps torch's own path: evaluation, p = 0, other devices (CUDA's kernels fuse dropout), and code
being compiled (inductor generates its own fused random numbers). `cpu_dropout="torch"` in the config turns the
lanes off everywhere, for an exact comparison with the old step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

LANE_VALUES = 1 << 16


def lane_threshold(p: float) -> tuple[int, float]:
    """The signed 16-bit threshold a lane must reach to be kept, and the scale of kept values."""
    dropped = round(p * LANE_VALUES)
    if not 0 <= dropped < LANE_VALUES:
        raise ValueError(f"dropout probability {p} is not in [0, 1)")
    return dropped - LANE_VALUES // 2, LANE_VALUES / (LANE_VALUES - dropped)


def keep_mask(
    shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """A bool mask, True where an element is kept, from 16-bit lanes of full-range 64-bit random words."""
    count = math.prod(shape)
    lanes = random_words((count + 3) // 4, device).view(torch.int16)[:count]
    threshold, _ = lane_threshold(p)
    if type(lanes) is torch.Tensor and lanes.device.type == "cpu":
        # numpy's comparison: 6x faster than torch's int16 `ge` on a 2-core EPYC (49 against 298 us per 1M lanes
        # of a Small step's hidden states), the same bools
        return torch.from_numpy(np.greater_equal(lanes.numpy(), threshold)).view(shape)
    return lanes.view(shape) >= threshold


def random_words(count: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """`count` full-range random int64 words. On a CPU they come from numpy's SFC64, seeded by one draw from
    torch's generator. Why: SFC64 fills words twice as fast as torch's mt19937 (1.0 against 2.1 ms per 512k
    words on a 2-core EPYC; the masks' words were 2.7% of a Small step), and seeded from torch's stream, the masks
    still follow `torch.manual_seed` and the RNG state a checkpoint saves, so runs repeat and resume exactly."""
    if torch.device(device).type == "cpu":
        seed = torch.empty((), dtype=torch.int64).random_()
        if type(seed) is torch.Tensor:  # not a fake tensor tracing the step: it has no value to read
            return torch.from_numpy(np.random.SFC64(int(seed)).random_raw(count).view(np.int64))
    return torch.empty(count, dtype=torch.int64, device=device).random_(-(1 << 63), None)


class _ScaleKept(torch.autograd.Function):
    """x where the mask keeps it, times the scale; the backward applies the same mask and scale to the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return times_kept(x, keep, scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return times_kept(grad, keep, ctx.scale), None, None


def times_kept(
    x: torch.Tensor, keep: torch.Tensor, scale: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """x · keep · scale, as torch's dropout computes it (a dropped NaN stays NaN), into `out` if given (which may be
    x itself). The mask enters as its uint8 bytes: a multiply by them is a plain vectorised loop, where
    `torch.where(keep, x * scale, 0)` ran 2-3× slower on the CPUs measured. Kept values are x · scale exactly
    (x · 1 is exact)."""
    return torch.mul(x, keep.view(torch.uint8), out=out).mul_(scale)


def apply_keep_mask(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout with a given mask: kept elements scaled by the inverse of the exact keep probability."""
    return _ScaleKept.apply(x, keep, lane_threshold(p)[1])


def lanes_apply(x: torch.Tensor, p: float, training: bool) -> bool:
    """Whether the lane masks replace torch's dropout here: training with p > 0 on a CPU, outside compilation."""
    return training and p > 0.0 and x.device.type == "cpu" and not torch.compiler.is_compiling()


def lane_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """`torch.nn.functional.dropout` with the lane mask where that is cheaper (a CPU, outside compilation)."""
    if not lanes_apply(x, p, training):
        return nn.functional.dropout(x, p, training)
    return apply_keep_mask(x, keep_mask(x.shape, p, x.device), p)


class LaneDropout(nn.Dropout):
    """`nn.Dropout` drawing its mask from 16-bit lanes on a CPU (same p, same expectation; another random stream)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace:
            return super().forward(x)
        return lane_dropout(x, self.p, self.training)


def use_lane_dropout_modules(model: nn.Module) -> int:
    """Swaps every plain `nn.Dropout` in `model` for `LaneDropout` (same p); returns how many were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, LaneDropout(child.p, child.inplace))
                swapped += 1
    return swapped
