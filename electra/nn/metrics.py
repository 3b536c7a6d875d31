"""Metrics of a pretraining step, computed on the device without gradient (generator and discriminator)."""

from __future__ import annotations

import math

import torch


def weighted_mean(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean of `values` [N], over the rows whose weight is 1 when `weights` [N] is given (fixed-shape steps)."""
    values = values.float()
    if weights is None:
        return values.mean()
    return (values * weights).sum() / weights.sum().clamp_min(1.0)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where the boolean `mask` (same shape) holds, without selecting them (no host sync)."""
    return weighted_mean(values.reshape(-1), mask.reshape(-1).float())


def generator_metrics(
    logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """How often the generator's most likely token is the original one, at the positions it predicts."""
    with torch.no_grad():
        return {"generator_accuracy": weighted_mean(logits.argmax(-1) == targets, weights)}


def output_entropy(
    log_probs: torch.Tensor, probs: torch.Tensor | None = None, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean entropy (nats) of the generator's distributions: an adversarial generator collapses it (dissertation
    5.3.4), a maximum-likelihood one keeps it near the data's. It runs every step over [positions, vocabulary], so
    it takes the probabilities sampling already computed and reduces without a full-size temporary."""
    with torch.no_grad():
        # A token the generator never proposes (log q = -inf: the unigram generator's special tokens and unseen
        # pieces) adds nothing; unclamped it would add 0 · (-inf) = NaN.
        log_probs = log_probs.detach().float().clamp_min(torch.finfo(torch.float32).min)
        probs = log_probs.exp() if probs is None else probs
        return weighted_mean(-torch.einsum("nv,nv->n", probs, log_probs), weights)


def discriminator_metrics(
    logits: torch.Tensor, is_replaced: torch.Tensor, attention_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Accuracy, AUC, precision and recall on replaced tokens, and the replaced fraction, over real tokens."""
    with torch.no_grad():
        real = attention_mask.bool()
        predicted = (logits > 0) & real
        actual = is_replaced & real
        n_real = real.sum().clamp_min(1)
        true_positive = (predicted & actual).sum().float()
        return {
            "discriminator_auc": auc(logits.float(), actual, real),
            "discriminator_accuracy": ((predicted == actual) & real).sum().float() / n_real,
            "replaced_precision": true_positive / predicted.sum().clamp_min(1),
            "replaced_recall": true_positive / actual.sum().clamp_min(1),
            "replaced_fraction": actual.sum().float() / n_real,
        }


def auc(scores: torch.Tensor, positive: torch.Tensor, counted: torch.Tensor | None = None) -> torch.Tensor:
    """Area under the ROC curve (Mann-Whitney): how well the scores rank replaced above original tokens.

    Accuracy stays at the always-"original" baseline until some token is judged more likely replaced than not;
    the AUC shows the discriminator learning long before that (the reference implementation logs it too).
    `counted` (same shape, bool) restricts it to some entries without selecting them (no host sync): the others
    are ranked below every counted score and subtracted from the ranks.
    """
    scores, positive = scores.reshape(-1).float(), positive.reshape(-1).bool()
    if counted is None:
        counted = torch.ones_like(positive)
    counted = counted.reshape(-1).bool()
    positive = positive & counted
    n_pos = positive.sum()
    n_left_out = (~counted).sum()
    n_neg = counted.sum() - n_pos
    scores = scores.masked_fill(~counted, -math.inf)
    ranks = scores.argsort().argsort().float() - n_left_out
    pairs_below = (ranks * positive).sum() - n_pos * (n_pos - 1) / 2
    defined = (n_pos > 0) & (n_neg > 0)  # decided on the device: no host sync in a training step
    return torch.where(
        defined, pairs_below / (n_pos * n_neg).clamp_min(1), torch.full_like(pairs_below, math.nan)
    )
