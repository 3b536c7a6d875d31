"""Electric's noise (Algorithm 2, steps 1-2): k = ceil(mask_prob * n) of a sequence's n candidate positions
replaced at once by samples from the cloze generator's q, with log q of every token kept for the loss.

`LogQ` is q as far as the noise needs it: the two-tower generator (`electra.generators.two_tower`) hands one over
without the [B·L, V] log-probabilities having to exist, and `sample_noise` draws from it or from full logits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from electra.nn.masking import Picked, sample_from_log_probs


@dataclass
class NoiseSample:
    """One draw of Electric's noise: which positions were replaced, the noised ids, and log q of every token."""

    input_ids: torch.Tensor  # [B, L] x^noised
    replaced_mask: torch.Tensor  # [B, L] bool, the k positions R per sequence
    # [B, L] fp32 log q(x^noised_t | x_\t): of the sample at R, of x_t elsewhere, 0 off the candidates
    log_q: torch.Tensor
    k: torch.Tensor  # [B] number of replaced positions per sequence
    n: torch.Tensor  # [B] number of candidate positions per sequence
    slots: Picked | None = None  # the replaced positions as fixed-shape slots (R = slots.mask)
    slot_log_probs: torch.Tensor | None = None  # [B·K, V] fp32 log q at the slots, which the sample came from


@dataclass
class LogQ:
    """q's log-probabilities as far as Electric's noise needs them, without [B·L, V] of them having to exist:
    log q(x_t | x_\t) of every position's own token, and whole rows at the positions that get replaced."""

    of_tokens: torch.Tensor  # [B, L] fp32
    rows_at: Callable[[Picked], torch.Tensor]  # slots -> [B·K, V] fp32 log-probabilities there

    @classmethod
    def of(cls, log_probs: torch.Tensor, input_ids: torch.Tensor) -> LogQ:
        """The view of full log-probabilities [B, L, V] or [B·L, V]."""
        full = log_probs.detach().float().reshape(*input_ids.shape, -1)
        return cls(full.gather(-1, input_ids[..., None]).squeeze(-1), lambda slots: slots.rows(full))


@torch.no_grad()
def sample_noise(
    log_probs: torch.Tensor | LogQ,
    input_ids: torch.Tensor,
    candidate_mask: torch.Tensor,
    mask_prob: float = 0.15,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    normalized: bool = False,
) -> NoiseSample:
    """Algorithm 2's steps 1-2: pick k = ceil(mask_prob * n) of the n candidate positions and replace them with
    samples from q, all at once. No gradient flows through the sample or log q (fp32 throughout).

    log_probs: q at every position, [B, L, V] or [B·L, V] row-major: unnormalised logits by default, or, with
    `normalized=True`, log-probabilities (what `TwoTowerGenerator.mle_loss` returns), which are not renormalised
    at temperature 1 (a full pass saved); or a `LogQ` (normalised, temperature 1), which computes only the rows it
    is asked for. Shapes depend on L alone (`Picked`): no host synchronisation.
    """
    candidates = candidate_mask.bool()
    batch, length = candidates.shape
    n = candidates.sum(-1)
    k = torch.where(n > 0, torch.ceil(n.double() * mask_prob).long().clamp(min=1), torch.zeros_like(n))
    k = torch.minimum(k, n)
    # k distinct positions per row: the k smallest uniform scores among the candidates.
    scores = torch.rand(candidates.shape, device=input_ids.device, generator=generator)
    scores = scores.masked_fill(~candidates, 2.0)
    slots = min(length, max(1, math.ceil(length * mask_prob)))  # the largest k a row of this length can have
    lowest = scores.topk(slots, dim=-1, largest=False).indices
    replaced = Picked.from_ranking(lowest, k, length)
    if not isinstance(log_probs, LogQ):
        log_probs = log_probs.detach().float().reshape(batch * length, -1)
        if temperature != 1.0 or not normalized:
            log_probs = torch.log_softmax(log_probs / temperature, dim=-1)
        log_probs = LogQ.of(log_probs, input_ids)
    elif temperature != 1.0:
        raise ValueError("a LogQ holds q at temperature 1; pass full logits to sample at another temperature")
    rows = log_probs.rows_at(replaced)
    sampled = sample_from_log_probs(rows, generator=generator)
    noised = replaced.replace(input_ids, sampled)
    # log q of the noised token: of the sample at the replaced slots, of x_t everywhere else
    at_slots = rows.gather(-1, sampled[:, None]).view(replaced.index.shape)
    at_slots = torch.where(replaced.valid, at_slots, log_probs.of_tokens.gather(1, replaced.index))
    log_q = log_probs.of_tokens.scatter(1, replaced.index, at_slots)
    log_q = log_q.masked_fill(~candidates, 0.0)
    return NoiseSample(
        input_ids=noised,
        replaced_mask=replaced.mask,
        log_q=log_q,
        k=k,
        n=n,
        slots=replaced,
        slot_log_probs=rows,
    )
