"""Dynamic masking: fresh positions every step, drawn on the device inside the model's forward pass."""

from __future__ import annotations

from typing import NamedTuple

import torch

from electra.nn.metrics import weighted_mean


def candidate_mask(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: torch.Tensor
) -> torch.Tensor:
    """Positions that can be masked, replaced or predicted: real tokens other than [CLS]/[SEP]/[MASK]/[PAD]."""
    return attention_mask.bool() & ~torch.isin(input_ids, special_ids.to(input_ids.device))


class Picked(NamedTuple):
    """The positions a step predicts, held in a fixed shape so a GPU step never waits for the host.

    Boolean indexing (`hidden[mask]`) returns as many rows as the mask holds, so the device must report that count
    before the next kernel can be sized: a host synchronisation per use, and a new shape for `torch.compile` at
    every step. `index` instead names K slots per row (K from the sequence length alone): the picked positions
    first, in position order, then filler positions marked invalid. Computations run on all B·K rows and the
    invalid ones are weighted out.
    """

    mask: torch.Tensor  # [B, L] bool: the picked positions
    index: torch.Tensor  # [B, K] long: picked positions (ascending), then fillers
    valid: torch.Tensor  # [B, K] bool: which slots hold a picked position

    @classmethod
    def from_mask(cls, mask: torch.Tensor) -> Picked:
        """Slots for a hand-made boolean mask [B, L] (K = its largest row count; reads the count on the host)."""
        mask = mask.bool()
        counts = mask.sum(dim=1)
        slots = max(1, int(counts.max()))
        length = mask.shape[1]
        positions = torch.arange(length, device=mask.device).expand_as(mask)
        index = (positions + length * (~mask).long()).argsort(dim=1)[:, :slots]
        valid = torch.arange(slots, device=mask.device) < counts.unsqueeze(1)
        return cls(mask, index, valid)

    @classmethod
    def from_ranking(cls, ranked: torch.Tensor, counts: torch.Tensor, length: int) -> Picked:
        """Slots from distinct positions of rows of `length`, in order of preference [B, K]: each row picks its
        first `counts` [B] of them. Reordered so the picked slots come first, ascending (the row-major order of
        boolean indexing, so results line up with a mask-based computation)."""
        valid = torch.arange(ranked.shape[1], device=ranked.device) < counts.unsqueeze(1)
        order = (ranked + length * (~valid).long()).argsort(dim=1)
        index, valid = ranked.gather(1, order), valid.gather(1, order)
        mask = torch.zeros(ranked.shape[0], length, dtype=torch.bool, device=ranked.device)
        return cls(mask.scatter(1, index, valid), index, valid)

    def rows(self, values: torch.Tensor) -> torch.Tensor:
        """[B, L] -> [B·K] or [B, L, H] -> [B·K, H]: the slots' entries, row-major (invalid slots included)."""
        index = self.index if values.dim() == 2 else self.index[..., None].expand(-1, -1, values.shape[-1])
        picked = values.gather(1, index)
        return picked.reshape(-1) if values.dim() == 2 else picked.reshape(-1, values.shape[-1])

    def weights(self) -> torch.Tensor:
        """[B·K] float: 1 for a picked slot, 0 for a filler. A method, not a property: torch.compile in torch
        2.6-2.8 cannot trace a property of a NamedTuple (a graph break in every step that used it; 2.13 can)."""
        return self.valid.reshape(-1).float()

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """Mean of per-slot `values` [B·K] over the picked slots (0 when nothing is picked)."""
        return weighted_mean(values, self.weights())

    def replace(self, input_ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """`input_ids` with the picked positions set to `values` [B·K] (fillers write back their own token)."""
        values = values.view(self.index.shape).to(input_ids.dtype)
        values = torch.where(self.valid, values, input_ids.gather(1, self.index))
        return input_ids.scatter(1, self.index, values)


@torch.compiler.assume_constant_result  # a host computation on Python numbers: a constant to torch.compile
def slots_per_row(length: int, mask_prob: float) -> int:
    """K: the most positions `pick_positions` can pick in a row of `length` tokens (its rounding, on the host)."""
    rounded = int(torch.round(torch.tensor(float(length)) * mask_prob))
    return min(length, max(1, rounded))


def pick_positions(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: torch.Tensor, mask_prob: float
) -> Picked:
    """Exactly round(mask_prob * n) positions per row (at least one) among the row's n non-special tokens.

    A fixed count per row (rather than an independent coin per token) is what the reference implementation does;
    it keeps the number of generator predictions, and so the step's cost, steady. The row's highest uniform
    scores win, so the picked set is the same one a rank threshold gives.
    """
    candidates = candidate_mask(input_ids, attention_mask, special_ids)
    n_candidates = candidates.sum(dim=1)
    k = torch.round(n_candidates.float() * mask_prob).long().clamp(min=1)
    k = torch.minimum(k, n_candidates)
    scores = torch.rand(input_ids.shape, device=input_ids.device)
    scores = scores.masked_fill(~candidates, -1.0)
    length = input_ids.shape[1]
    return Picked.from_ranking(scores.topk(slots_per_row(length, mask_prob), dim=1).indices, k, length)


def choose_positions(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: torch.Tensor, mask_prob: float
) -> torch.Tensor:
    """`pick_positions` as a boolean mask [B, L], for callers that index by it."""
    return pick_positions(input_ids, attention_mask, special_ids, mask_prob).mask


def apply_mask_tokens(
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    mask_token_prob: float,
    random_token_prob: float,
) -> torch.Tensor:
    """The generator's input: picked positions become [MASK] (or, for BERT's recipe, a random token) or stay."""
    draw = torch.rand(input_ids.shape, device=input_ids.device)
    masked = input_ids.masked_fill(positions & (draw < mask_token_prob), mask_token_id)
    if random_token_prob > 0:
        use_random = positions & (draw >= mask_token_prob) & (draw < mask_token_prob + random_token_prob)
        random_tokens = torch.randint_like(input_ids, vocab_size)
        masked = torch.where(use_random, random_tokens, masked)
    return masked


def sample_tokens(logits: torch.Tensor, temperature: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Draw one token per row from softmax(logits / temperature), in fp32 and without gradient."""
    with torch.no_grad():
        return sample_from_log_probs(torch.log_softmax(logits.detach().float() / temperature, dim=-1))


def sample_from_log_probs(log_probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Inverse-CDF sampling: one uniform number per row instead of Gumbel noise for every vocabulary entry.

    ELECTRA samples without gradient (the generator is trained by maximum likelihood, not through its samples), so
    the log-probabilities the generator loss already computed can be reused; on a CPU this is about 3x cheaper than
    Gumbel-max over a 30k vocabulary.
    """
    with torch.no_grad():
        return sample_from_probs(log_probs.detach().float().exp(), generator)


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """`sample_from_log_probs` for a caller that already holds the probabilities (and needs them for more)."""
    with torch.no_grad():
        cumulative = probs.cumsum(dim=-1)
        draw = torch.rand(cumulative.shape[0], 1, device=cumulative.device, generator=generator)
        draw = draw * cumulative[:, -1:]
        picked = torch.searchsorted(cumulative, draw, right=True).squeeze(1)
        return picked.clamp_(max=cumulative.shape[1] - 1)
