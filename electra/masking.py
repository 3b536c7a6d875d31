"""Dynamic masking: fresh positions every step, drawn on the device inside the model's forward pass."""

from __future__ import annotations

import torch


def candidate_mask(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: torch.Tensor
) -> torch.Tensor:
    """Positions that can be masked, replaced or predicted: real tokens other than [CLS]/[SEP]/[MASK]/[PAD]."""
    return attention_mask.bool() & ~torch.isin(input_ids, special_ids.to(input_ids.device))


def choose_positions(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: torch.Tensor, mask_prob: float
) -> torch.Tensor:
    """Exactly round(mask_prob * n) positions per row (at least one) among the row's n non-special tokens.

    A fixed count per row (rather than an independent coin per token) is what the reference implementation does;
    it keeps the number of generator predictions, and so the step's cost, steady.
    """
    candidates = candidate_mask(input_ids, attention_mask, special_ids)
    n_candidates = candidates.sum(dim=1)
    k = torch.round(n_candidates.float() * mask_prob).long().clamp(min=1)
    k = torch.minimum(k, n_candidates)
    scores = torch.rand(input_ids.shape, device=input_ids.device)
    scores = scores.masked_fill(~candidates, -1.0)
    ranks = scores.argsort(dim=1, descending=True).argsort(dim=1)
    return ranks < k.unsqueeze(1)


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
