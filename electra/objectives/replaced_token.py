"""Replaced-token detection: ELECTRA, and ELECTRA-TT (the same objective with a two-tower generator).

Per step: pick round(mask_prob · n) positions, let the generator fill them in (ELECTRA's corruption, `corrupt`),
and train the discriminator to tell every real token original or replaced:

    loss = generator_loss_weight · MLM(generator) + discriminator_loss_weight · BCE(discriminator)

A sample equal to the original token counts as original. ELECTRA-TT's two-tower generator reads the original
sequence, so its prediction at t never sees x_t; its export scores text in one pass (`pll`'s `electra-tt`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from electra.core.config import PretrainConfig
from electra.core.outputs import StepOutput
from electra.discriminators.replaced_token import ReplacedTokenDiscriminator, replaced_token_loss
from electra.flops.analytic import FlopPlan
from electra.generators import fused_nll
from electra.generators.fused_nll import SampledHead
from electra.generators.two_tower import TwoTowerGenerator
from electra.nn.hf_configs import discriminator_hf_config
from electra.nn.masking import Picked, pick_positions, sample_from_probs, sample_tokens
from electra.nn.metrics import discriminator_metrics, generator_metrics, output_entropy, weighted_mean
from electra.objectives.base import (
    Objective,
    Parts,
    build_generator_for,
    generator_flop_plan,
    generator_kinds,
    generator_scoring,
    masked_input,
)
from electra.objectives.registry import register_objective


class Corruption(NamedTuple):
    corrupted: torch.Tensor  # the input with the picked positions replaced by samples
    logits: torch.Tensor | None  # the generator's, at the picked slots [B·K, V] (fillers included)
    log_probs: torch.Tensor | None  # their fp32 log-softmax (with gradient, for the generator loss)
    # mean entropy of the generator's distributions at the picked slots (the `generator_entropy` metric)
    entropy: torch.Tensor | None
    # on a CPU, the fused head's loss and hits instead of logits and log-probabilities (generators/fused_nll.py)
    fused: SampledHead | None = None

    def accuracy(self, targets: torch.Tensor, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """`generator_accuracy`: how often the generator's most likely token is the original."""
        if self.fused is not None:
            return {"generator_accuracy": weighted_mean(self.fused.hits, weights)}
        return generator_metrics(self.logits, targets, weights)


def corrupt(
    model: Parts,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    positions: Picked,
) -> Corruption:
    """ELECTRA's corruption: the generator reads the (masked) input and its samples replace the picked positions.

    Sampling reuses the log-probabilities the generator loss needs, in fp32 and without gradient; the entropy
    metric is taken from the same probabilities here, so they are exponentiated once and freed before the
    discriminator runs. On a CPU in eager fp32 a generator with a linear head never builds its [B·K, V] logits:
    loss, gradients, samples, entropy and hits come from chunks of rows (`fused_nll_and_sample`). Filler slots are
    sampled too (a fixed shape costs less than a host sync) and written back as their original token.
    """
    cfg = model.config
    generator_input = input_ids
    if model.generator.needs_masked_input:
        generator_input = masked_input(model, input_ids, positions.mask)
    temperature = model.generator.sampling_temperature(cfg.sampling_temperature)
    untempered = isinstance(temperature, float) and temperature == 1.0
    head = (
        model.generator.head_at(generator_input, attention_mask, token_type_ids, positions)
        if untempered
        else None
    )
    if head is not None and fused_nll.applies(head.contexts):
        weights = positions.weights()
        out = fused_nll.fused_nll_and_sample(
            *head, positions.rows(input_ids), weights / weights.sum().clamp(min=1)
        )
        entropy = weighted_mean(out.entropy, weights)
        return Corruption(positions.replace(input_ids, out.samples), None, None, entropy, out)
    if head is not None:
        logits = F.linear(*head)
    else:
        logits = model.generator.logits_at(generator_input, attention_mask, token_type_ids, positions)
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    with torch.no_grad():
        probs = log_probs.detach().exp()
    if untempered:
        samples = sample_from_probs(probs)
    else:
        samples = sample_tokens(logits, temperature)
    entropy = output_entropy(log_probs, probs, positions.weights())
    return Corruption(positions.replace(input_ids, samples), logits, log_probs, entropy)


def corruption_flop_plan(config: PretrainConfig) -> dict[str, Any]:
    """FlopPlan fields for a generator that runs `corrupt`: whatever its kind, its vocabulary head runs at the K
    picked slots per row only (`head_at`), so a two-tower generator is charged `predicted`, not every position
    (Electric's noise needs every position; `corrupt` never does). A frozen generator adds its shape and passes."""
    return {"generator": config.generator, "two_tower_head_at": "predicted", **generator_flop_plan(config)}


def add_generator_loss(
    model: Parts,
    loss: torch.Tensor,
    metrics: dict[str, torch.Tensor],
    corruption: Corruption,
    input_ids: torch.Tensor,
    positions: Picked,
) -> torch.Tensor:
    """The generator's maximum-likelihood term (when it trains) and its metrics, added to an objective's loss.
    Rows are `positions`' slots; only the picked ones count. A corruption without `entropy` has it measured here."""
    targets = positions.rows(input_ids)
    if model.generator.trainable:
        if corruption.fused is not None:
            gen_loss = corruption.fused.loss
        else:
            gen_loss = positions.mean(F.nll_loss(corruption.log_probs, targets, reduction="none"))
        loss = loss + model.config.generator_loss_weight * gen_loss
        metrics["generator_loss"] = gen_loss.detach()
    metrics.update(corruption.accuracy(targets, positions.weights()))
    metrics["generator_entropy"] = (
        output_entropy(corruption.log_probs, weights=positions.weights())
        if corruption.entropy is None
        else corruption.entropy
    )
    return loss


@register_objective
class Electra(Objective):
    name = "electra"
    summary = "replaced-token detection on every real token, against a small masked-LM generator (the paper)"

    def build(self, model: Parts, token_counts=None) -> None:
        cfg = model.config
        model.discriminator = ReplacedTokenDiscriminator(discriminator_hf_config(cfg, model.special.pad))
        model.generator = build_generator_for(cfg, model.special, model.discriminator.encoder, token_counts)
        self.init_head(model)

    def init_head(self, model: Parts) -> None:
        """Start the discriminator's output at the base rate of its labels, log(p / (1 - p)), instead of 0.

        From a zero bias the first steps must move every output by about that much; Adam moves each weight by
        ~lr per step, so the cheapest route is to collapse all token states onto one vector, and the encoder then
        needs hundreds of steps to recover (seen on `tiny`, where accuracy sat at the always-"original" baseline).
        """
        p = self.replaced_prior(model.config)
        with torch.no_grad():
            model.discriminator.model.discriminator_predictions.dense_prediction.bias.fill_(
                math.log(p / (1.0 - p))
            )

    def replaced_prior(self, config: PretrainConfig) -> float:
        return config.mask_prob

    def loss_positions(self, attention_mask: torch.Tensor, positions: Picked) -> torch.Tensor:
        """Where the discriminator's binary loss is averaged: every real token."""
        return attention_mask

    def step(self, model, input_ids, attention_mask, token_type_ids) -> StepOutput:
        cfg = model.config
        positions = pick_positions(input_ids, attention_mask, model.special_ids, cfg.mask_prob)
        corruption = corrupt(model, input_ids, attention_mask, token_type_ids, positions)
        corrupted = corruption.corrupted
        is_replaced = corrupted != input_ids  # a sample equal to the original counts as original

        disc_logits = model.discriminator(corrupted, attention_mask, token_type_ids)
        disc_loss = replaced_token_loss(
            disc_logits, is_replaced, self.loss_positions(attention_mask, positions)
        )
        loss = cfg.discriminator_loss_weight * disc_loss
        metrics = {"discriminator_loss": disc_loss.detach()}
        loss = add_generator_loss(model, loss, metrics, corruption, input_ids, positions)
        metrics.update(discriminator_metrics(disc_logits, is_replaced, attention_mask))
        metrics["loss"] = loss.detach()
        return StepOutput(loss, metrics)

    def flop_plan(self, config: PretrainConfig) -> FlopPlan:
        # corrupt() runs a two-tower head at the masked positions only (the reference scores every position
        # and then gathers; we count what runs, which is what the start-up check measures).
        return FlopPlan(head="binary", **corruption_flop_plan(config))

    def scoring(self, model: Parts) -> dict[str, list[str]]:
        """With a two-tower generator this is ELECTRA-TT whatever the objective's name (ElectraTT only sets the
        default): a discriminator trained on every real token at the base rate k/n of replacements, beside a
        generator that gives q(x_t | x_\\t) in one pass, so `pll`'s `electra-tt` estimate applies; the generator
        alone also scores (`cloze`). With a masked-LM generator, what it can score (`mlm`)."""
        if isinstance(model.generator, TwoTowerGenerator):
            return {"electra-tt": ["discriminator", "generator"], "cloze": ["generator"]}
        return generator_scoring(model.generator)


@register_objective
class ElectraTT(Electra):
    name = "electra-tt"
    summary = "ELECTRA with Electric's two-tower generator; its export scores text in one pass"
    config_defaults = {"generator": "two-tower"}
    requires = generator_kinds("two-tower")
