"""Metrics of a pretraining step, computed on the device without gradient (generator and discriminator)."""

from __future__ import annotations

import math

import torch


def generator_metrics(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """How often the generator's most likely token is the original one, at the positions it predicts."""
    with torch.no_grad():
        return {"generator_accuracy": (logits.argmax(-1) == targets).float().mean()}


def output_entropy(log_probs: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy (nats) of the generator's distributions: an adversarial generator collapses it (dissertation
    5.3.4), a maximum-likelihood one keeps it near the data's. It runs every step over [positions, vocabulary], so
    it takes the probabilities sampling already computed and reduces without a full-size temporary."""
    with torch.no_grad():
        log_probs = log_probs.detach().float()
        probs = log_probs.exp() if probs is None else probs
        return -torch.einsum("nv,nv->n", probs, log_probs).mean()


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
            "discriminator_auc": auc(logits[real].float(), actual[real]),
            "discriminator_accuracy": ((predicted == actual) & real).sum().float() / n_real,
            "replaced_precision": true_positive / predicted.sum().clamp_min(1),
            "replaced_recall": true_positive / actual.sum().clamp_min(1),
            "replaced_fraction": actual.sum().float() / n_real,
        }


def auc(scores: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """Area under the ROC curve (Mann-Whitney): how well the scores rank replaced above original tokens.

    Accuracy stays at the always-"original" baseline until some token is judged more likely replaced than not;
    the AUC shows the discriminator learning long before that (the reference implementation logs it too).
    """
    n_pos = positive.sum()
    n_neg = positive.numel() - n_pos
    ranks = scores.argsort().argsort().float()
    pairs_below = (ranks * positive).sum() - n_pos * (n_pos - 1) / 2
    defined = (n_pos > 0) & (n_neg > 0)  # decided on the device: no host sync in a training step
    return torch.where(
        defined, pairs_below / (n_pos * n_neg).clamp_min(1), torch.full_like(pairs_below, math.nan)
    )
