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

Used on the CPU in eager fp32 (`applies`); compiled code, autocast and other devices keep the plain formula, which
their compilers and kernels already fuse.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch

ROWS_PER_CHUNK = 256  # 256 × 8,192 fp32 logits = 8 MB: stays in a server CPU's last-level cache
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
    """True where the fused head is the faster one: eager fp32 on a CPU."""
    return (
        not _plain_only
        and contexts.device.type == "cpu"
        and contexts.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


class _FusedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, contexts, weight, bias, targets, row_weights, draw, rows: int):  # type: ignore[override]
        count, vocab = contexts.shape[0], weight.shape[0]
        need_contexts, need_weight, need_bias = ctx.needs_input_grad[:3]
        need_any = need_contexts or need_weight or need_bias
        sampling = draw is not None
        loss = torch.zeros((), dtype=torch.float32, device=contexts.device)
        hits = torch.zeros(count, dtype=torch.bool, device=contexts.device)
        token_log_q = torch.empty(count, dtype=torch.float32, device=contexts.device)
        samples = torch.empty(count if sampling else 0, dtype=torch.long, device=contexts.device)
        entropy = torch.empty(count if sampling else 0, dtype=torch.float32, device=contexts.device)
        grad_contexts = torch.empty_like(contexts) if need_contexts else None
        grad_weight = torch.zeros_like(weight) if need_weight else None
        grad_bias = torch.zeros_like(bias) if need_bias else None
        height = max(1, min(rows, count))
        buffer = contexts.new_empty((height, vocab))
        spare = contexts.new_empty((height, vocab)) if sampling else None
        for begin in range(0, count, height):
            end = min(count, begin + height)
            x, t, w = contexts[begin:end], targets[begin:end], row_weights[begin:end]
            logits = buffer[: end - begin]
            torch.addmm(bias, x, weight.t(), out=logits)
            top, best = logits.max(dim=-1)
            hits[begin:end] = best == t
            target_logit = logits.gather(1, t[:, None]).squeeze(1)
            shifted = logits.sub_(top[:, None])  # logit - max
            if sampling:
                exps = torch.exp(shifted, out=spare[: end - begin])
                total = exps.sum(dim=-1)
                # H = log Z - Σ p · (logit - max), Z = Σ exp(logit - max): no log of a probability is taken
                entropy[begin:end] = total.log() - torch.einsum("nv,nv->n", exps, shifted) / total
                cumulative = torch.cumsum(exps, dim=-1, out=shifted)  # the shifted logits are spent
                picked = torch.searchsorted(
                    cumulative, draw[begin:end, None] * cumulative[:, -1:], right=True
                )
                samples[begin:end] = picked.squeeze(1).clamp_(max=vocab - 1)
            else:
                exps = shifted.exp_()
                total = exps.sum(dim=-1)
            token_log_q[begin:end] = target_logit - top - total.log()
            loss -= (w * token_log_q[begin:end]).sum()
            if not need_any:
                continue
            gradient = exps.mul_((w / total)[:, None])  # w · softmax
            gradient.scatter_add_(1, t[:, None], -w[:, None])  # minus w at the target
            if need_contexts:
                torch.mm(gradient, weight, out=grad_contexts[begin:end])
            if need_weight:
                grad_weight.addmm_(gradient.t(), x)
            if need_bias:
                grad_bias += gradient.sum(dim=0)
        ctx.save_for_backward(grad_contexts, grad_weight, grad_bias)
        ctx.mark_non_differentiable(hits, token_log_q, samples, entropy)
        return loss, hits, token_log_q, samples, entropy

    @staticmethod
    def backward(ctx, grad_loss, *_grad_of_the_rest):  # type: ignore[override]
        grads = [None if g is None else g * grad_loss for g in ctx.saved_tensors]
        return (*grads, None, None, None, None)


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
        contexts, weight, bias, targets, row_weights.to(torch.float32), None, rows
    )
    return loss, hits, token_log_q


class SampledHead(NamedTuple):
    loss: torch.Tensor  # as fused_nll's, differentiable
    hits: torch.Tensor  # [N] whether each row's most likely token is its target
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
    from its generator's head. The draw is `electra.masking.sample_from_probs`': one uniform number per row,
    inverted through the row's cumulative distribution, taken from the RNG at the same point, so the same seed
    gives the same samples except where a draw falls within rounding of a boundary between two tokens."""
    draw = torch.rand(contexts.shape[0], device=contexts.device, generator=generator)
    loss, hits, _, samples, entropy = _FusedNLL.apply(
        contexts, weight, bias, targets, row_weights.to(torch.float32), draw, rows
    )
    return SampledHead(loss, hits, samples, entropy)
