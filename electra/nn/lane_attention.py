"""Attention with lane dropout on a CPU: the weights computed explicitly a few sequences at a time and dropped with
the lane masks of `electra.nn.dropout`, and ELECTRA's three projections computed as one GEMM.

Why: SDPA's fused CPU kernel has no dropout, so with `attention_probs_dropout_prob` above zero every layer falls
back to SDPA's unfused math path and a Bernoulli draw. Here attention is four plain operations (scores, softmax,
mask, weighted sum), a few sequences at a time in cached buffers (`_SlicedAttention`), registered with
`transformers` as `electra_sdpa`: SDPA itself wherever the lanes do not apply (evaluation, p = 0, other devices,
compiled code, decoders). `LaneSelfAttention` packs ELECTRA's query, key and value projections into one GEMM.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.models.electra.modeling_electra import ElectraSelfAttention

from electra.nn.dropout import keep_mask, lane_threshold, lanes_apply, times_kept, use_lane_dropout_modules

ATTENTION = "electra_sdpa"  # the transformers attention name of SDPA with lane dropout on a CPU


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
    if not (plain_encoder and lanes_apply(query, dropout, True) and key.shape[1] == query.shape[1]):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    keep = keep_mask((*query.shape[:3], key.shape[2]), dropout, query.device)
    return _SlicedAttention.apply(
        query, key, value, attention_mask, keep, lane_threshold(dropout)[1], scaling
    ), None


class LaneSelfAttention(ElectraSelfAttention):
    """ELECTRA's self-attention with its query, key and value projections computed as one GEMM wherever the lane
    attention runs (training with attention dropout on a CPU); everywhere else, the parent's forward.

    Why: computed apart, the three [H, H] projections of the same input are three GEMMs, and in the backward
    three input GEMMs whose results autograd then adds, three weight GEMMs and three bias sums. Packed
    ([B, L, 3, H, D]), the sliced attention reads q, k and v from one tensor and writes their gradient as one
    tensor. The weights are concatenated per step (0.75 MB at Small); the parameters, their names and
    checkpoints are the parent's. The packed GEMM sums each output in another order than the separate ones
    may: fp32 rounding, not bitwise."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        # The cache argument is passed on untouched: transformers 5.24 renamed it from `past_key_values` to `cache`
        # (and passes it by keyword), so naming it here would break one version or the other.
        cache = args[0] if args else kwargs.get("cache", kwargs.get("past_key_values"))
        p = self.dropout.p
        projections = (self.query, self.key, self.value)
        packable = (
            cache is None
            and all(projection.bias is not None for projection in projections)
            and not self.is_causal
            and self.config._attn_implementation == ATTENTION
            and lanes_apply(hidden_states, p, self.training)
        )
        if not packable:
            return super().forward(hidden_states, attention_mask, *args, **kwargs)
        weight = torch.cat([projection.weight for projection in projections])
        bias = torch.cat([projection.bias for projection in projections])
        batch, length = hidden_states.shape[:2]
        packed = nn.functional.linear(hidden_states, weight, bias)
        packed = packed.view(batch, length, 3, self.num_attention_heads, self.attention_head_size)
        keep = keep_mask((batch, self.num_attention_heads, length, length), p, hidden_states.device)
        out = _PackedAttention.apply(packed, attention_mask, keep, lane_threshold(p)[1], self.scaling)
        return out.view(batch, length, -1), None


class _SlicedAttention(torch.autograd.Function):
    """softmax(q kᵀ · scaling + mask) · keep · keep_scale · v for q, k, v of [B, H, L, D]; returns [B, L, H, D].

    Why not `torch.matmul`: transformers passes q, k and v as [B, H, L, D] views of the [B, L, H·D] projections.
    A batched matmul cannot fold (B, H) into one batch dimension with those strides, so `torch.matmul` copies
    every operand whole, and autograd copies each gradient back into the projections' layout: eight copies of
    the whole batch per layer, each read again from memory. `_attend` copies a few sequences at a time, into
    buffers the next GEMM reads from cache, and writes the gradients straight into the projections' layout.

    The arithmetic is that of the plain operations (`mask` is None, bool with True where attention is allowed, or
    additive; `keep` is the bool dropout mask), except that the scores' scaling is applied inside the GEMMs'
    epilogue and, in the backward, folded into the dropout's scale. With a power-of-two scaling (head_dim 64, as
    at every size here) the output is bitwise the plain path's, and so are the gradients at the Small shape;
    at other shapes the rounding may differ (fp32, tests/test_dropout.py). Bool-masked scores get a zero
    gradient, as `masked_fill` gives them."""

    @staticmethod
    def forward(
        ctx: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None,
        keep: torch.Tensor,
        keep_scale: float,
        scaling: float,
    ) -> torch.Tensor:
        heads = (query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))
        out, weights, dropped = _attend(*heads, mask, keep, keep_scale, scaling)
        ctx.save_for_backward(query, key, value, weights, dropped, keep, _bool_or_none(mask))
        ctx.keep_scale, ctx.scaling = keep_scale, scaling
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        query, key, value, weights, dropped, keep, bool_mask = ctx.saved_tensors
        heads = (query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))
        grads = tuple(torch.empty_like(x, memory_format=torch.contiguous_format) for x in heads)
        _attend_backward(
            grad_out, heads, grads, weights, dropped, keep, bool_mask, ctx.keep_scale * ctx.scaling
        )
        return (*(grad.transpose(1, 2) for grad in grads), None, None, None, None)


class _PackedAttention(torch.autograd.Function):
    """The same attention on the three projections packed in one [B, L, 3, H, D] tensor, with one gradient for
    all three. Why: the projections are then one GEMM forward, and backward one GEMM for the input, one for the
    weights and one bias sum, where apart they take three of each and two additions (`LaneSelfAttention`)."""

    @staticmethod
    def forward(
        ctx: Any,
        packed: torch.Tensor,
        mask: torch.Tensor | None,
        keep: torch.Tensor,
        keep_scale: float,
        scaling: float,
    ) -> torch.Tensor:
        out, weights, dropped = _attend(*packed.unbind(2), mask, keep, keep_scale, scaling)
        ctx.save_for_backward(packed, weights, dropped, keep, _bool_or_none(mask))
        ctx.keep_scale, ctx.scaling = keep_scale, scaling
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        packed, weights, dropped, keep, bool_mask = ctx.saved_tensors
        grad = torch.empty_like(packed, memory_format=torch.contiguous_format)
        heads, grads = packed.unbind(2), grad.unbind(2)
        _attend_backward(
            grad_out, heads, grads, weights, dropped, keep, bool_mask, ctx.keep_scale * ctx.scaling
        )
        return grad, None, None, None, None


def _attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    keep: torch.Tensor,
    keep_scale: float,
    scaling: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward on q, k, v in the projections' [B, L, H, D] layout: the output ([B, L, H, D]), the
    probabilities and the dropped probabilities ([B, H, L, S], kept for the backward).

    Why in slices of the batch: the scores and their gradients are [B, H, L, S] (8 MB per layer at Small) and
    only the probabilities and the dropped probabilities are kept. Taking a few sequences at a time
    (`SLICE_BYTES` of scores) lets softmax, the mask and the second product read what the first product just
    wrote from cache, in reused buffers; and each slice's q, k and v are copied head-major first (`_HeadMajor`),
    so that every product is one batched GEMM over the slice's heads on contiguous operands in cache."""
    batch, length, heads, _ = query.shape
    weights = query.new_empty(batch, heads, length, key.shape[1])
    dropped = torch.empty_like(weights)
    out = query.new_empty(batch, length, heads, value.shape[3])
    slices = _batch_slices(weights)
    scores_buffer = _slice_buffer(weights, slices)
    q, k, v, o = (_HeadMajor(x, slices) for x in (query, key, value, out))
    for rows in slices:
        scores = scores_buffer[: rows.stop - rows.start]
        flat_scores = scores.flatten(0, 1)  # the scaling rides on the GEMM (BLAS's alpha)
        torch.baddbmm(flat_scores, q.load(rows), k.load(rows).mT, beta=0, alpha=scaling, out=flat_scores)
        if mask is not None:
            part = _rows_of(mask, rows, batch)
            if mask.dtype == torch.bool:
                scores.masked_fill_(~part, torch.finfo(scores.dtype).min)
            else:
                scores.add_(part)
        torch.ops.aten._softmax.out(scores, -1, False, out=weights[rows])
        times_kept(weights[rows], keep[rows], keep_scale, out=dropped[rows])
        torch.bmm(dropped[rows].flatten(0, 1), v.load(rows), out=o.product(rows))
        o.store(rows)
    return out, weights, dropped


def _attend_backward(
    grad_out: torch.Tensor,
    heads: tuple[torch.Tensor, ...],
    grads: tuple[torch.Tensor, ...],
    weights: torch.Tensor,
    dropped: torch.Tensor,
    keep: torch.Tensor,
    bool_mask: torch.Tensor | None,
    scale: float,
) -> None:
    """Writes the gradients of q, k and v ([B, L, H, D] views in `grads`) for the incoming [B, L, H, D] gradient.
    `scale` is the dropout's scale times the scores' scaling: softmax's backward is linear in its incoming
    gradient, so the scaling joins the dropout's."""
    batch = grad_out.shape[0]
    slices = _batch_slices(weights)
    dropped_buffer, scores_buffer = _slice_buffer(weights, slices), _slice_buffer(weights, slices)
    q, k, v, g = (_HeadMajor(x, slices) for x in (*heads, grad_out))
    grad_q, grad_k, grad_v = (_HeadMajor(x, slices) for x in grads)
    for rows in slices:
        grad_dropped = dropped_buffer[: rows.stop - rows.start]
        flat_grad_dropped, head_grad = grad_dropped.flatten(0, 1), g.load(rows)
        torch.bmm(head_grad, v.load(rows).mT, out=flat_grad_dropped)
        torch.bmm(dropped[rows].flatten(0, 1).mT, head_grad, out=grad_v.product(rows))
        grad_v.store(rows)
        grad_weights = times_kept(grad_dropped, keep[rows], scale, out=grad_dropped)
        grad_scores = torch.ops.aten._softmax_backward_data.out(
            grad_weights,
            weights[rows],
            -1,
            weights.dtype,
            grad_input=scores_buffer[: rows.stop - rows.start],
        )
        if bool_mask is not None:
            grad_scores.masked_fill_(~_rows_of(bool_mask, rows, batch), 0.0)
        flat_grad_scores = grad_scores.flatten(0, 1)
        torch.bmm(flat_grad_scores, k.load(rows), out=grad_q.product(rows))
        grad_q.store(rows)
        torch.bmm(flat_grad_scores.mT, q.load(rows), out=grad_k.product(rows))
        grad_k.store(rows)


class _HeadMajor:
    """One [B, L, H, D] tensor (a view into the projections, or a result) seen a slice of the batch at a time as
    [b·H, L, D], through a reused contiguous buffer: `load` copies a slice in, `product` is the buffer to write a
    result into, `store` copies that back into the tensor.

    Why: transformers' q, k and v are [B, H, L, D] views of the [B, L, H·D] projections, which a batched GEMM
    cannot take whole, and one head's strided slice at a time ran the products at about half the matmul peak
    (the operands arrive cold and strided). Copied head-major a few sequences at a time, the operands stay in
    cache for the GEMM that follows. Measured on one Small layer's attention, forward and backward with the
    caches flushed between them: 22.0 ms against 23.4 by head and 24.7 by head writing strided results."""

    def __init__(self, tensor: torch.Tensor, slices: list[slice]) -> None:
        self.tensor = tensor
        batch, length, heads, dim = tensor.shape
        self.buffer = tensor.new_empty(slices[0].stop - slices[0].start, heads, length, dim)

    def _slice(self, rows: slice) -> torch.Tensor:
        return self.buffer[: rows.stop - rows.start]

    def load(self, rows: slice) -> torch.Tensor:
        part = self._slice(rows)
        part.copy_(self.tensor[rows].transpose(1, 2))
        return part.flatten(0, 1)

    def product(self, rows: slice) -> torch.Tensor:
        return self._slice(rows).flatten(0, 1)

    def store(self, rows: slice) -> None:
        self.tensor[rows].copy_(self._slice(rows).transpose(1, 2))


def _bool_or_none(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The mask the backward needs: a bool one zeroes masked scores' gradients; an additive one changes nothing."""
    return mask if mask is not None and mask.dtype == torch.bool else None


SLICE_BYTES = 2 << 20  # scores per slice of the batch: well inside a server CPU's last-level cache


def _batch_slices(weights: torch.Tensor) -> list[slice]:
    """Slices of the batch whose [b, H, L, S] scores take about `SLICE_BYTES` (at least one sequence)."""
    batch = weights.shape[0]
    step = max(1, min(batch, SLICE_BYTES // (weights[0].numel() * weights.element_size())))
    return [slice(start, min(batch, start + step)) for start in range(0, batch, step)]


def _slice_buffer(weights: torch.Tensor, slices: list[slice]) -> torch.Tensor:
    """A reused [b, H, L, S] buffer for the largest (first) slice."""
    return weights.new_empty((slices[0].stop - slices[0].start, *weights.shape[1:]))


def _rows_of(mask: torch.Tensor, rows: slice, batch: int) -> torch.Tensor:
    """The mask's part for these sequences (a mask broadcast over the batch is the same for all)."""
    return mask[rows] if mask.dim() == 4 and mask.shape[0] == batch else mask


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
    return use_lane_modules(model)


def use_lane_modules(model: nn.Module) -> int:
    """Makes `model` use lane dropout however it was built: every plain `nn.Dropout` becomes `LaneDropout` (same
    p) and every ELECTRA self-attention a `LaneSelfAttention` (same parameters). Returns how many dropout modules
    were swapped."""
    for module in model.modules():
        if type(module) is ElectraSelfAttention:
            module.__class__ = LaneSelfAttention
    return use_lane_dropout_modules(model)
