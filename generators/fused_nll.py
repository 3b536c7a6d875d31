"""The vocabulary head's negative log-likelihood with its gradients computed a few hundred rows at a time.

Why: a cloze model predicts every position, so at `tiny` with an 8,192-piece vocabulary one step of 32 × 128
tokens materialises 4,096 × 8,192 logits (128 MB), their log-softmax, and the gradients of both. On a CPU each
of those fresh tensors is page-faulted in (one fault per 4 KB, each page zeroed by the kernel) and streamed
through memory several times. The loss is the only consumer of the logits, so the gradient of each row is known
as soon as its row is: w_i (softmax_i − onehot(t_i)). Computing it chunk by chunk, into one reused buffer, leaves
only the gradients of the head's inputs ([N, E], [V, E], [V]) to keep for the backward pass. The arithmetic is the
same matmuls and the same softmax; the sums run in a different order (tests hold loss and gradients to the unfused
formula within fp32 rounding).

ELECTRA's generator predicts only the masked positions, but over a larger vocabulary (at `small`, 608 rows × 30,522
pieces = 74 MB of logits per step), and its corruption also draws a token from every row and measures the
distributions' entropy: `fused_nll_and_sample` does both from the same chunks, so the log-probabilities, the
probabilities and their cumulative sums never exist whole either.

Each chunk's logits are laid out vocabulary-major, [V, rows] = W · xᵀ: with the hidden size as the short inner
dimension and the vocabulary long, that GEMM ran at ~160 GFLOP/s on a 2-core EPYC where x · Wᵀ ran at ~100 (at
64-256 rows per chunk; at 608 it was the slower one), and the reductions over the vocabulary become reductions
down columns. Only the cumulative sum for the draw is slow that way round; `_inverse_cdf` searches blocks of the
vocabulary instead. ELECTRA-Small's head went from 180 to 144 ms per step (forward and backward, one process,
taking turns).

Used on the CPU in eager fp32 and under CPU autocast to bf16 (`applies`); compiled code and other devices keep the
plain formula, which their compilers and kernels already fuse. Under bf16 autocast the plain head took 12-16% of
an ELECTRA-Small step on a CPU with AMX (its argmax, log-softmax, entropy and their backward over [608, 30,522] in
fp32, the bf16 logits converted whole): the fused pass runs the three products in bf16, as autocast would, and
everything between them in fp32 on one chunk at a time (`_Products`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch

# 256 × 8,192 fp32 logits = 8 MB, inside a server CPU's last-level cache; W · xᵀ gains up to ~256 rows
ROWS_PER_CHUNK = 256
_plain_only = False


@contextlib.contextmanager
def plain_head() -> Iterator[None]:
    """Every head takes the plain formula inside: for counting a model's own FLOPs. Electric's fused path projects
    the rows it samples from a second time (forward only, 15% of the positions), which model FLOPs do not charge,
    as MFU does not charge recomputation."""
    global _plain_only
    before, _plain_only = _plain_only, True
    try:
        yield
    finally:
        _plain_only = before


def applies(contexts: torch.Tensor) -> bool:
    """True where the fused head is the faster one: on a CPU, eager fp32 or eager bf16 autocast."""
    return product_dtype(contexts) is not None


def product_dtype(contexts: torch.Tensor) -> torch.dtype | None:
    """The precision the head's products run in where the fused head applies (None where it does not): fp32 in
    eager fp32 on a CPU, bf16 under CPU autocast to bf16, which would run the plain head's linear layer in bf16."""
    if _plain_only or contexts.device.type != "cpu" or torch.compiler.is_compiling():
        return None
    if torch.is_autocast_enabled("cpu"):
        autocast_bf16 = torch.get_autocast_dtype("cpu") == torch.bfloat16
        return torch.bfloat16 if autocast_bf16 and contexts.dtype in _AUTOCAST_INPUTS else None
    return torch.float32 if contexts.dtype == torch.float32 else None


_AUTOCAST_INPUTS = (torch.float32, torch.bfloat16)  # what a head's input can be under bf16 autocast


class _Products:
    """The head's three products in `dtype`, on fp32 logits and gradients: the plain formula's arithmetic under
    autocast (bf16 operands, the softmax in fp32) without its [N, V] tensors. In fp32 each product writes
    straight into its fp32 buffer; in bf16 the operands are cast once per call (the weight is 7.8 MB at Small,
    as autocast casts it once per forward) and each chunk passes through a reused bf16 buffer."""

    def __init__(self, contexts: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, dtype: torch.dtype):
        self.low = dtype != torch.float32
        self.contexts, self.weight, self.bias = (t.to(dtype) for t in (contexts, weight, bias))
        self.buffer: torch.Tensor | None = None

    def logits(self, begin: int, end: int, out: torch.Tensor) -> torch.Tensor:
        """[V, rows] logits W·xᵀ + b of rows begin:end, written into the fp32 `out`."""
        x = self.contexts[begin:end]
        if not self.low:
            return torch.addmm(self.bias[:, None], self.weight, x.t(), out=out)
        low = self._scratch(out.shape)
        torch.addmm(self.bias[:, None], self.weight, x.t(), out=low)
        return out.copy_(low)

    def add_gradients(
        self,
        gradient: torch.Tensor,
        begin: int,
        end: int,
        grad_contexts: torch.Tensor | None,
        grad_weight: torch.Tensor | None,
    ) -> None:
        """From the fp32 [V, rows] gradient of the logits of rows begin:end: gradientᵀ·W into those rows of
        `grad_contexts`, and gradient·x added to the fp32 `grad_weight` (either may be None)."""
        x = self.contexts[begin:end]
        if self.low:  # one conversion for both products; the logits have left the bf16 buffer by now
            gradient = self._scratch(gradient.shape).copy_(gradient)
        if grad_contexts is not None:
            if grad_contexts.dtype == gradient.dtype:
                torch.mm(gradient.t(), self.weight, out=grad_contexts[begin:end])
            else:
                grad_contexts[begin:end] = torch.mm(gradient.t(), self.weight)
        if grad_weight is not None:
            if self.low:
                grad_weight += torch.mm(gradient, x)
            else:
                grad_weight.addmm_(gradient, x)

    def _scratch(self, shape: torch.Size) -> torch.Tensor:
        size = shape[0] * shape[1]
        if self.buffer is None or self.buffer.numel() < size:
            self.buffer = self.contexts.new_empty(size)
        return self.buffer[:size].view(shape)


class _FusedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, contexts, weight, bias, targets, row_weights, draw, rows: int, dtype):  # type: ignore[override]
        count, vocab = contexts.shape[0], weight.shape[0]
        products = _Products(contexts, weight, bias, dtype)
        need_contexts, need_weight, need_bias = ctx.needs_input_grad[:3]
        need_any = need_contexts or need_weight or need_bias
        sampling = draw is not None
        loss = torch.zeros((), dtype=torch.float32, device=contexts.device)
        hits = torch.zeros(count, dtype=torch.bool, device=contexts.device)
        token_log_q = torch.empty(count, dtype=torch.float32, device=contexts.device)
        samples = torch.empty(count if sampling else 0, dtype=torch.long, device=contexts.device)
        entropy = torch.empty(count if sampling else 0, dtype=torch.float32, device=contexts.device)
        grad_contexts = torch.empty_like(contexts) if need_contexts else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if need_weight else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if need_bias else None
        height = max(1, min(rows, count))
        buffer = contexts.new_empty(vocab * height, dtype=torch.float32)
        spare = contexts.new_empty(vocab * height, dtype=torch.float32) if sampling else None
        for begin in range(0, count, height):
            end = min(count, begin + height)
            t, w = targets[begin:end], row_weights[begin:end]
            n = end - begin
            columns = torch.arange(n, device=contexts.device)
            # [V, n], one column per row: W·xᵀ runs ~1.6× faster than x·Wᵀ at these shapes (K = hidden size is
            # small and the vocabulary long), and every reduction below is over the vocabulary, dim 0.
            logits = products.logits(begin, end, buffer[: vocab * n].view(vocab, n))
            top = logits.amax(dim=0)
            target_logit = logits[t, columns]
            hits[begin:end] = target_logit >= top  # the target's logit is the largest (a tie counts)
            shifted = logits.sub_(top)  # logit - max
            if sampling:
                exps = torch.exp(shifted, out=spare[: vocab * n].view(vocab, n))
                total = exps.sum(dim=0)
                # H = log Z - Σ p · (logit - max), Z = Σ exp(logit - max): no log of a probability is taken
                # (the shifted logits are spent: their products with exps overwrite them)
                entropy[begin:end] = total.log() - shifted.mul_(exps).sum(dim=0) / total
                samples[begin:end] = _inverse_cdf(exps, draw[begin:end] * total)
            else:
                exps = shifted.exp_()
                total = exps.sum(dim=0)
            token_log_q[begin:end] = target_logit - top - total.log()
            loss -= (w * token_log_q[begin:end]).sum()
            if not need_any:
                continue
            gradient = exps.mul_(w / total)  # w · softmax, [V, n]
            gradient.index_put_((t, columns), -w, accumulate=True)  # minus w at the target
            products.add_gradients(gradient, begin, end, grad_contexts, grad_weight)
            if need_bias:
                grad_bias += gradient.sum(dim=1)
        if need_weight:
            grad_weight = grad_weight.to(weight.dtype)
        if need_bias:
            grad_bias = grad_bias.to(bias.dtype)
        ctx.save_for_backward(grad_contexts, grad_weight, grad_bias)
        ctx.mark_non_differentiable(hits, token_log_q, samples, entropy)
        return loss, hits, token_log_q, samples, entropy

    @staticmethod
    def backward(ctx, grad_loss, *_grad_of_the_rest):  # type: ignore[override]
        grads = [None if g is None else g * grad_loss.to(g.dtype) for g in ctx.saved_tensors]
        return (*grads, None, None, None, None, None)


SAMPLING_BLOCK = 256  # vocabulary entries per block of the two-level search in `_inverse_cdf`


def _inverse_cdf(weights: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """For each column of the unnormalised [V, n] `weights`: how many of its cumulative sums are <= its threshold
    (clamped to V − 1), which is `torch.searchsorted(cumsum, threshold, right=True)` down the column.

    Why two levels: a cumulative sum down dim 0 of [V, n] runs an order of magnitude slower than along rows. Sums
    of blocks of `SAMPLING_BLOCK` entries locate each column's block; only that block's entries are then summed
    in order. The sums run in another order than one long cumulative sum, so a threshold within rounding of a
    boundary between two entries may land on the other one."""
    vocab, n = weights.shape
    full = vocab // SAMPLING_BLOCK
    block_sums = torch.cat(
        [
            weights[: full * SAMPLING_BLOCK].view(full, SAMPLING_BLOCK, n).sum(dim=1),
            weights[full * SAMPLING_BLOCK :].sum(dim=0, keepdim=True),
        ]
    )
    ends = torch.cumsum(block_sums, dim=0)
    block = (ends <= thresholds).sum(dim=0).clamp_(max=full)
    before = torch.where(block > 0, ends.gather(0, (block - 1).clamp(min=0)[None]).squeeze(0), 0.0)
    rows = block[None] * SAMPLING_BLOCK + torch.arange(SAMPLING_BLOCK, device=weights.device)[:, None]
    inside = weights.gather(0, rows.clamp(max=vocab - 1)) * (rows < vocab)
    within = (torch.cumsum(inside, dim=0).add_(before) <= thresholds).sum(dim=0)
    return (block * SAMPLING_BLOCK + within).clamp_(max=vocab - 1)


def fused_nll(
    contexts: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    targets: torch.Tensor,
    row_weights: torch.Tensor,
    rows: int = ROWS_PER_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Σ_i row_weights[i] · −log q_i(targets[i]) with q_i = softmax(contexts[i] · weightᵀ + bias), whether each row's
    most likely token is its target, log q_i(targets[i]) of every row); the loss is differentiable in contexts,
    weight and bias; computed `rows` rows at a time."""
    loss, hits, token_log_q, _, _ = _FusedNLL.apply(
        contexts, weight, bias, targets, row_weights.to(torch.float32), None, rows, _dtype_for(contexts)
    )
    return loss, hits, token_log_q


class SampledHead(NamedTuple):
    loss: torch.Tensor  # as fused_nll's, differentiable
    hits: torch.Tensor  # [N] whether each row's most likely token is its target (a tie for the top counts)
    samples: torch.Tensor  # [N] one token drawn from each row's q
    entropy: torch.Tensor  # [N] the entropy of each row's q, in nats


def fused_nll_and_sample(
    contexts: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    targets: torch.Tensor,
    row_weights: torch.Tensor,
    rows: int = ROWS_PER_CHUNK,
    generator: torch.Generator | None = None,
) -> SampledHead:
    """`fused_nll`, and from the same chunks a sample of every row and its entropy: what ELECTRA's corruption takes
    from its generator's head. The draw is `electra.nn.masking.sample_from_probs`': one uniform number per row,
    inverted through the row's cumulative distribution, taken from the RNG at the same point, so the same seed
    gives the same samples except where a draw falls within rounding of a boundary between two tokens."""
    draw = torch.rand(contexts.shape[0], device=contexts.device, generator=generator)
    loss, hits, _, samples, entropy = _FusedNLL.apply(
        contexts, weight, bias, targets, row_weights.to(torch.float32), draw, rows, _dtype_for(contexts)
    )
    return SampledHead(loss, hits, samples, entropy)


def _dtype_for(contexts: torch.Tensor) -> torch.dtype:
    """The products' precision: the one `product_dtype` chose, or the contexts' own where the caller runs the fused
    head outside the settings it is chosen for (a test, a benchmark's A/B)."""
    return product_dtype(contexts) or contexts.dtype
