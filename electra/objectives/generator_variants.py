"""Other ways to train ELECTRA's generator (dissertation 5.3.3-5.3.4): adversarially, or before the discriminator.

* ``electra-adversarial``: the generator maximises the discriminator's loss instead of the masked-LM likelihood.
  Sampling is discrete, so the gradient is REINFORCE with one sample per picked position:
  ∇ E[R] ≈ ∇log q(x̂_t) · (R − b), where the reward R is the discriminator's loss at t (−log(1 − D) for a
  replaced token, −log D for a sample equal to the original, D being its probability of "original"; this assumes
  D at t depends only on x̂_t and the kept tokens) and b = −log sigmoid(wᵀh_q(x^masked)_t) is a learned baseline,
  trained by cross-entropy so that sigmoid(wᵀh) matches exp(−R) (then b matches R). The baseline reads the
  generator's states without pulling on them. The dissertation found this generator worse at masked-LM accuracy
  (58% vs 65% for a 256-wide generator) and low in entropy, and the discriminator it trains worse than ELECTRA's.
* ``electra-two-stage``: train only the generator (masked LM) for the first `two_stage_generator_steps` steps,
  copy its weights into the discriminator, then train only the discriminator with the generator frozen. It needs
  a generator of the discriminator's size; the dissertation found it worse than joint training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.outputs import StepOutput
from electra.discriminators.replaced_token import replaced_token_loss
from electra.flops.analytic import FlopPlan
from electra.nn.masking import pick_positions, sample_from_probs, sample_tokens
from electra.nn.metrics import discriminator_metrics, generator_metrics, output_entropy, weighted_mean
from electra.objectives.base import TRAINS_ITS_GENERATOR, Parts, generator_kinds, masked_input
from electra.objectives.registry import register_objective
from electra.objectives.replaced_token import Corruption, Electra, add_generator_loss, corrupt


def reinforce_loss(
    log_probs: torch.Tensor,
    samples: torch.Tensor,
    reward: torch.Tensor,
    baseline: torch.Tensor,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """−mean((R − b) · log q(x̂)): its gradient is the REINFORCE estimate of −∇E[R]; R and b are constants.
    `weights` [N] (0 or 1) leaves rows out of the mean."""
    advantage = (reward - baseline).detach()
    chosen = log_probs.gather(-1, samples.unsqueeze(-1)).squeeze(-1)
    return -weighted_mean(advantage * chosen, weights)


def baseline_loss(
    baseline_logits: torch.Tensor, reward: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Cross-entropy pulling sigmoid(z) towards exp(−R), so that b = −log sigmoid(z) tracks the reward R."""
    per_row = F.binary_cross_entropy_with_logits(
        baseline_logits.float(), torch.exp(-reward.detach()), reduction="none"
    )
    return weighted_mean(per_row, weights)


@register_objective
class AdversarialElectra(Electra):
    name = "electra-adversarial"
    summary = "ELECTRA whose generator maximises the discriminator's loss by REINFORCE (dissertation 5.3.4)"
    requires = {**generator_kinds("mlm"), **TRAINS_ITS_GENERATOR}

    def build(self, model: Parts, token_counts=None) -> None:
        super().build(model, token_counts)
        baseline = nn.Linear(model.config.generator_hidden_size, 1)
        nn.init.normal_(baseline.weight, std=model.config.initializer_range)
        nn.init.zeros_(baseline.bias)
        model.reward_baseline = baseline

    def step(self, model, input_ids, attention_mask, token_type_ids) -> StepOutput:
        cfg = model.config
        positions = pick_positions(input_ids, attention_mask, model.special_ids, cfg.mask_prob)
        targets = positions.rows(input_ids)
        states, logits = model.generator.states_and_logits_at(
            masked_input(model, input_ids, positions.mask), attention_mask, token_type_ids, positions
        )
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        with torch.no_grad():
            probs = log_probs.detach().exp()
        if cfg.sampling_temperature == 1.0:
            samples = sample_from_probs(probs)
        else:
            samples = sample_tokens(logits, cfg.sampling_temperature)
        corrupted = positions.replace(input_ids, samples)
        is_replaced = corrupted != input_ids

        disc_logits = model.discriminator(corrupted, attention_mask, token_type_ids)
        disc_loss = replaced_token_loss(disc_logits, is_replaced, attention_mask)
        reward = F.binary_cross_entropy_with_logits(
            positions.rows(disc_logits).float().detach(),
            positions.rows(is_replaced).float(),
            reduction="none",
        )
        baseline_logits = model.reward_baseline(states.detach()).squeeze(-1)
        baseline = -F.logsigmoid(baseline_logits.float()).detach()
        weights = positions.weights()
        gen_loss = reinforce_loss(log_probs, samples, reward, baseline, weights)
        fit_loss = baseline_loss(baseline_logits, reward, weights)
        loss = cfg.discriminator_loss_weight * disc_loss + cfg.generator_loss_weight * gen_loss + fit_loss

        metrics = {
            "discriminator_loss": disc_loss.detach(),
            "generator_loss": gen_loss.detach(),
            "generator_reward": weighted_mean(reward, weights),
            "baseline_loss": fit_loss.detach(),
            "generator_mlm_loss": positions.mean(F.nll_loss(log_probs.detach(), targets, reduction="none")),
            "generator_entropy": output_entropy(log_probs, probs, weights),
        }
        metrics.update(generator_metrics(logits, targets, weights))
        metrics.update(discriminator_metrics(disc_logits, is_replaced, attention_mask))
        metrics["loss"] = loss.detach()
        return StepOutput(loss, metrics)


@register_objective
class TwoStageElectra(Electra):
    name = "electra-two-stage"
    summary = (
        "generator alone first, then the discriminator from the generator's weights (dissertation 5.3.3)"
    )
    config_defaults = {"generator_hidden_multiplier": 1.0, "embedding_sharing": "none"}
    startup_flop_check = False  # its first steps run the generator alone; the plan charges the run's average

    requires = {
        **generator_kinds("mlm"),
        **TRAINS_ITS_GENERATOR,
        "embedding_sharing": (
            ("none",),
            "freezes the generator in its second stage, so it shares no weights with the discriminator: set "
            "embedding_sharing=none.",
        ),
    }

    def validate(self, config: PretrainConfig) -> None:
        if config.generator_hidden_multiplier != 1.0 or config.generator_layers != config.num_hidden_layers:
            raise UserError(
                f"config: objective={self.name} starts the discriminator from the generator's weights, so the "
                "generator must have its size: set generator_hidden_multiplier=1.0 and no generator_num_layers."
            )
        if not 0 < self.generator_steps(config) < config.max_steps:
            raise UserError(
                f"config: two_stage_generator_steps must be between 1 and max_steps - 1 ({config.max_steps - 1})."
            )

    @staticmethod
    def generator_steps(config: PretrainConfig) -> int:
        return config.two_stage_generator_steps or config.max_steps // 2

    def build(self, model: Parts, token_counts=None) -> None:
        super().build(model, token_counts)
        # Training forwards so far and whether the discriminator was initialised: saved with every checkpoint.
        model.register_buffer("two_stage_calls", torch.zeros((), dtype=torch.long))
        model.register_buffer("two_stage_copied", torch.zeros((), dtype=torch.bool))

    def step(self, model, input_ids, attention_mask, token_type_ids) -> StepOutput:
        cfg = model.config
        # One host read of a device counter per step: this research variant accepts the synchronisation.
        calls = int(model.two_stage_calls)
        if model.training:
            model.two_stage_calls += 1
        if calls < self.generator_steps(cfg) * cfg.gradient_accumulation_steps:
            return self._generator_step(model, input_ids, attention_mask, token_type_ids)
        if model.training and not bool(model.two_stage_copied):
            with torch.no_grad():
                model.discriminator.encoder.load_state_dict(model.generator.model.electra.state_dict())
            model.two_stage_copied.fill_(True)
        with torch.no_grad():  # the generator is frozen in the second stage
            positions = pick_positions(input_ids, attention_mask, model.special_ids, cfg.mask_prob)
            corruption = corrupt(model, input_ids, attention_mask, token_type_ids, positions)
        corrupted = corruption.corrupted
        is_replaced = corrupted != input_ids
        disc_logits = model.discriminator(corrupted, attention_mask, token_type_ids)
        disc_loss = replaced_token_loss(disc_logits, is_replaced, attention_mask)
        loss = cfg.discriminator_loss_weight * disc_loss
        metrics = {"discriminator_loss": disc_loss.detach(), "loss": loss.detach()}
        metrics.update(corruption.accuracy(positions.rows(input_ids), positions.weights()))
        metrics.update(discriminator_metrics(disc_logits, is_replaced, attention_mask))
        return StepOutput(loss, metrics)

    def _generator_step(self, model, input_ids, attention_mask, token_type_ids) -> StepOutput:
        cfg = model.config
        positions = pick_positions(input_ids, attention_mask, model.special_ids, cfg.mask_prob)
        generator_input = masked_input(model, input_ids, positions.mask)
        logits = model.generator.logits_at(generator_input, attention_mask, token_type_ids, positions)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        metrics: dict[str, torch.Tensor] = {}
        plain = Corruption(input_ids, logits, log_probs, entropy=None)  # stage 1 corrupts nothing
        loss = add_generator_loss(
            model, logits.new_zeros((), dtype=torch.float32), metrics, plain, input_ids, positions
        )
        metrics["loss"] = loss.detach()
        return StepOutput(loss, metrics)

    def flop_plan(self, config: PretrainConfig) -> FlopPlan:
        # Averaged over the run: stage 1 trains the generator (2 passes), stage 2 runs it forward (1) and trains
        # the discriminator (2). Exact for a run that completes; a budget cut mid-run is charged the average.
        first = self.generator_steps(config) / config.max_steps
        return FlopPlan(
            head="binary",
            generator="mlm",
            discriminator_passes=2.0 * (1.0 - first),
            generator_passes=2.0 * first + (1.0 - first),
        )
