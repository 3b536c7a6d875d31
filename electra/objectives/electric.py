"""Electric: an energy-based cloze model trained by noise-contrastive estimation (dissertation ch. 5, Algorithm 2).

The two-tower generator q reads the original sequence, is trained by maximum likelihood at every candidate
position, and doubles as the noise distribution: k = ceil(mask_prob · n) positions are replaced at once by samples
from q, and the discriminator's head, read as a negative energy -E(x)_t, is trained to tell data from noise
(`electra.discriminators.energy.electric_nce_loss`). The export scores a sentence in one pass: Σ -E(x)_t.
"""

from __future__ import annotations

import torch

from electra.core.config import PretrainConfig
from electra.core.outputs import StepOutput
from electra.discriminators.energy import electric_nce_logits, electric_nce_loss, init_energy_offset
from electra.discriminators.replaced_token import ReplacedTokenDiscriminator
from electra.flops.analytic import FlopPlan
from electra.generators.build import build_generator
from electra.generators.noise import sample_noise
from electra.nn.hf_configs import discriminator_hf_config
from electra.nn.masking import candidate_mask
from electra.nn.metrics import generator_metrics, masked_mean
from electra.objectives.base import Objective, Parts, generator_kinds
from electra.objectives.registry import register_objective


@register_objective
class Electric(Objective):
    name = "electric"
    summary = "energy-based cloze model trained by NCE against a two-tower generator; one-pass text scoring"
    config_defaults = {"generator": "two-tower"}
    discriminator_scoring = "electric"
    requires = generator_kinds("two-tower")

    def build(self, model: Parts, token_counts=None) -> None:
        cfg = model.config
        model.discriminator = ReplacedTokenDiscriminator(discriminator_hf_config(cfg, model.special.pad))
        model.generator = build_generator(cfg, model.special, model.discriminator.encoder, token_counts)
        # Start -E at its NCE offset (a zero start pushes every energy up by ~9 at once; see init_energy_offset).
        init_energy_offset(model.discriminator.model.discriminator_predictions, cfg.vocab_size, cfg.mask_prob)

    def step(self, model, input_ids, attention_mask, token_type_ids) -> StepOutput:
        """The generator's log-probabilities are computed once and reused (detached, fp32) to draw the noise and
        to give log q of both kept and replaced tokens. The discriminator's head output is -E (the export
        contract), so the energies are its negative. Every shape follows from the batch's: no host sync."""
        cfg = model.config
        candidates = candidate_mask(input_ids, attention_mask, model.special_ids)
        if cfg.sampling_temperature == 1.0:  # q itself: on a CPU its [B·L, V] log-probabilities never exist
            gen_loss, log_q = model.generator.mle_loss_and_log_q(
                input_ids, attention_mask, token_type_ids, candidates
            )
        else:
            gen_loss, log_q = model.generator.mle_loss(input_ids, attention_mask, token_type_ids, candidates)
        noise = sample_noise(
            log_q, input_ids, candidates, cfg.mask_prob, cfg.sampling_temperature, normalized=True
        )
        energies = -model.discriminator(noise.input_ids, attention_mask, token_type_ids)
        nce = electric_nce_loss(energies, noise.log_q, noise.replaced_mask, candidates, noise.k)
        loss = cfg.generator_loss_weight * gen_loss + cfg.discriminator_loss_weight * nce
        with torch.no_grad():
            z = electric_nce_logits(energies, noise.log_q, noise.k, noise.n)
            replaced = noise.replaced_mask
            energies = energies.detach()
            # Accuracy at the k replaced positions per row, a uniform sample of the candidates: an argmax over
            # the vocabulary at every position would be ~5% of a CPU step for a metric.
            slots = noise.slots
            accuracy = generator_metrics(noise.slot_log_probs, slots.rows(input_ids), slots.weights())
            metrics = {
                "generator_loss": gen_loss.detach(),
                "discriminator_loss": nce.detach(),
                **accuracy,
                "nce_accuracy": masked_mean((z > 0) == replaced, candidates),
                "sample_is_original": masked_mean(noise.input_ids == input_ids, replaced),
                "mean_energy_kept": masked_mean(energies, candidates & ~replaced),
                "mean_energy_replaced": masked_mean(energies, replaced),
                "loss": loss.detach(),
            }
        return StepOutput(loss, metrics)

    def flop_plan(self, config: PretrainConfig) -> FlopPlan:
        return FlopPlan(head="energy", generator=config.generator)

    def scoring(self, model: Parts) -> dict[str, list[str]]:
        return {"electric": ["discriminator"], "cloze": ["generator"]}
