"""Dropout whose random mask is cheap on a CPU, for the hidden states and for attention probabilities.

Why: on a CPU, `torch.nn.functional.dropout` draws one Bernoulli sample per element through a floating-point
path, and at ELECTRA-Small's shape that alone took 10% of a training step (PyTorch profiler, README "Speed").
Attention dropout costs more again: SDPA's fused CPU kernel has no dropout, so with `attention_probs_dropout_prob`
above zero every layer falls back to the unfused math path and a second Bernoulli draw. Here one 64-bit random word
gives four 16-bit lanes, and an element is kept where its lane clears a threshold: the keep probability is
1 - round(p * 65536) / 65536 (p = 0.1 keeps 0.8999939), and kept values are scaled by the inverse of that exact
probability, so the expectation is unchanged. Attention with dropout is then computed by four plain operations
(scores, softmax, mask, weighted sum), the mask drawn the same way.

Everything else keeps torch's own path: evaluation, p = 0, other devices (CUDA's kernels fuse dropout), and code
being compiled (inductor generates its own fused random numbers). `cpu_dropout="torch"` in the config turns the
lanes off everywhere, for an exact comparison with the old step.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

LANE_VALUES = 1 << 16
ATTENTION = "electra_sdpa"  # the transformers attention name of SDPA with lane dropout on a CPU


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
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)
    threshold, _ = lane_threshold(p)
    return words.view(torch.int16)[:count].view(shape) >= threshold


class _ScaleKept(torch.autograd.Function):
    """x where the mask keeps it, times the scale; the backward applies the same mask and scale to the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return _times_kept(x, keep, scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return _times_kept(grad, keep, ctx.scale), None, None


def _times_kept(x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
    """x · keep · scale, as torch's dropout computes it (a dropped NaN stays NaN). The mask enters as its uint8
    bytes: a multiply by them is a plain vectorised loop, where `torch.where(keep, x * scale, 0)` ran 2-3× slower
    on the CPUs measured. Kept values are x · scale exactly (x · 1 is exact)."""
    return x.mul(keep.view(torch.uint8)).mul_(scale)


def apply_keep_mask(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout with a given mask: kept elements scaled by the inverse of the exact keep probability."""
    return _ScaleKept.apply(x, keep, lane_threshold(p)[1])


def _use_lanes(x: torch.Tensor, p: float, training: bool) -> bool:
    return training and p > 0.0 and x.device.type == "cpu" and not torch.compiler.is_compiling()


def lane_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """`torch.nn.functional.dropout` with the lane mask where that is cheaper (a CPU, outside compilation)."""
    if not _use_lanes(x, p, training):
        return nn.functional.dropout(x, p, training)
    return apply_keep_mask(x, keep_mask(x.shape, p, x.device), p)


class LaneDropout(nn.Dropout):
    """`nn.Dropout` drawing its mask from 16-bit lanes on a CPU (same p, same expectation; another random stream)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace:
            return super().forward(x)
        return lane_dropout(x, self.p, self.training)


def lane_dropout_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except that training with attention dropout on a CPU computes the weights
    explicitly and drops them with the lane mask (SDPA would take its unfused path there anyway).

    Takes SDPA's mask (bool, True where attention is allowed, or additive) and returns [B, L, heads, head_dim]."""
    plain_encoder = not getattr(module, "is_causal", False) and not kwargs.get("position_bias")
    if not (plain_encoder and _use_lanes(query, dropout, True) and key.shape[1] == query.shape[1]):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)).mul_(scaling)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1)
    weights = apply_keep_mask(weights, keep_mask(weights.shape, dropout, weights.device), dropout)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, lane_dropout_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)


def attention_name(attn_implementation: str, cpu_dropout: str = "lanes") -> str:
    """The transformers attention name for the config's choice: SDPA becomes SDPA with lane dropout."""
    if attn_implementation == "sdpa" and cpu_dropout == "lanes":
        return ATTENTION
    return attn_implementation


def use_lanes(model: nn.Module) -> int:
    """Lane dropout for a whole model, however it was built (a fine-tuner loads a plain `transformers` encoder):
    its plain `nn.Dropout` modules become `LaneDropout` and every config on SDPA names the lane attention instead.
    Only the forward changes: saved configs never carry the attention name (transformers does not write it).
    Returns how many dropout modules were swapped."""
    for module in model.modules():
        config = getattr(module, "config", None)
        if getattr(config, "_attn_implementation", None) == "sdpa":
            config._attn_implementation = ATTENTION
    return use_lane_dropout(model)


def use_lane_dropout(model: nn.Module) -> int:
    """Swaps every plain `nn.Dropout` in `model` for `LaneDropout` (same p); returns how many were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, LaneDropout(child.p, child.inplace))
                swapped += 1
    return swapped
