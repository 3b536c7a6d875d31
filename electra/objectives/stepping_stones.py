"""The stepping stones of the ELECTRA paper's efficiency analysis (paper section 3.2; dissertation ch. 5).

They sit between BERT's masked LM and ELECTRA's replaced-token detection, and separate the two reasons ELECTRA
learns more per FLOP: a loss over *all* tokens rather than the masked 15%, and no [MASK] token in the pretraining
input (which fine-tuning never sees). Each shares ELECTRA's generator and its corruption (`replaced_token.corrupt`):

* ``electra-15``: ELECTRA exactly, but the discriminator's binary loss is averaged over the positions picked for
  masking only (the ~15% the generator filled in), not over every real token.
* ``replace-mlm``: BERT's masked LM, except that the picked positions hold generator samples instead of [MASK]. The
  kept model is a full-size masked LM that predicts the original token there (cross-entropy, weight 1).
* ``all-tokens-mlm``: the Replace-MLM input, but the kept model predicts the identity of *every* real token
  ([CLS] and [SEP] included: never corrupted, so the copy gate learns to pass them through) with the paper's
  explicit copy mechanism, D(t) = sigmoid(w · h_t + b):

      p(x_t | .) = D(t) · 1[x_t == input_t] + (1 - D(t)) · softmax(MLM head(h_t))[x_t]

  and the loss is the mean of -log p(x_t | .) over those positions (`electra.discriminators.masked_lm.copy_mechanism_nll`).

For Replace MLM and All-Tokens MLM the kept model sits where ELECTRA's discriminator does, so `discriminator/` of
the export holds an `ElectraForMaskedLM`, fine-tuning loads its encoder, and masked-LM scoring reads it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from electra.core.config import PretrainConfig
from electra.core.outputs import StepOutput
from electra.discriminators.masked_lm import MaskedLMDiscriminator, copy_mechanism_nll
from electra.flops.analytic import FlopPlan
from electra.nn.hf_configs import discriminator_hf_config
from electra.nn.masking import Picked, pick_positions
from electra.objectives.base import Objective, Parts, build_generator_for, generator_scoring
from electra.objectives.registry import register_objective
from electra.objectives.replaced_token import Electra, add_generator_loss, corrupt, corruption_flop_plan


@register_objective
class Electra15(Electra):
    name = "electra-15"
    summary = "stepping stone: ELECTRA with the discriminator loss on the masked ~15% only"

    def replaced_prior(self, config: PretrainConfig) -> float:
        return 0.5  # it scores only the masked positions, most of which start out replaced

    def loss_positions(self, attention_mask: torch.Tensor, positions: Picked) -> torch.Tensor:
        return positions.mask

    def scoring(self, model: Parts) -> dict[str, list[str]]:
        # Its discriminator's loss covers the picked positions only, so its D is not the one `electra-tt` reads
        # (odds of "original" at the base rate k/n over every real token): only the generator scores.
        return generator_scoring(model.generator)


class _MaskedLMMain(Objective):
    """Replace MLM and All-Tokens MLM: a full-size masked LM reads the generator-corrupted input."""

    copy_mechanism = False

    def build(self, model: Parts, token_counts=None) -> None:
        cfg = model.config
        model.discriminator = MaskedLMDiscriminator(
            discriminator_hf_config(cfg, model.special.pad), copy_mechanism=self.copy_mechanism
        )
        model.generator = build_generator_for(cfg, model.special, model.discriminator.encoder, token_counts)

    def step(self, model, input_ids, attention_mask, token_type_ids) -> StepOutput:
        cfg = model.config
        positions = pick_positions(input_ids, attention_mask, model.special_ids, cfg.mask_prob)
        corruption = corrupt(model, input_ids, attention_mask, token_type_ids, positions)
        loss, metrics = self.main_loss(
            model, input_ids, corruption.corrupted, attention_mask, token_type_ids, positions
        )
        loss = add_generator_loss(model, loss, metrics, corruption, input_ids, positions)
        metrics["loss"] = loss.detach()
        return StepOutput(loss, metrics)

    def main_loss(self, model, input_ids, corrupted, attention_mask, token_type_ids, positions):
        raise NotImplementedError

    def scoring(self, model: Parts) -> dict[str, list[str]]:
        return {"mlm": ["discriminator"]}  # the kept full-size masked LM, not the small generator


@register_objective
class ReplaceMLM(_MaskedLMMain):
    name = "replace-mlm"
    summary = "stepping stone: masked LM whose masked positions hold generator samples instead of [MASK]"

    def main_loss(self, model, input_ids, corrupted, attention_mask, token_type_ids, positions):
        targets = positions.rows(input_ids)
        hidden = model.discriminator.hidden_states(corrupted, attention_mask, token_type_ids)
        logits = model.discriminator.token_logits(positions.rows(hidden))
        loss = positions.mean(F.cross_entropy(logits.float(), targets, reduction="none"))
        metrics = {
            "mlm_loss": loss.detach(),
            "mlm_accuracy": positions.mean(logits.detach().argmax(-1) == targets),
        }
        return loss, metrics

    def flop_plan(self, config: PretrainConfig) -> FlopPlan:
        return FlopPlan(head="masked_lm", **corruption_flop_plan(config))


@register_objective
class AllTokensMLM(_MaskedLMMain):
    name = "all-tokens-mlm"
    summary = "stepping stone: predict every token of the corrupted input, with a copy mechanism"
    copy_mechanism = True

    def main_loss(self, model, input_ids, corrupted, attention_mask, token_type_ids, positions):
        main = model.discriminator
        where = attention_mask.bool()  # every real token: the head runs where the FLOP count charges it
        hidden = main.hidden_states(corrupted, attention_mask, token_type_ids)
        rows = hidden[where]
        token_logits = main.token_logits(rows)
        copy_logits = main.copy_head(rows).squeeze(-1)
        targets, inputs = input_ids[where], corrupted[where]
        loss = copy_mechanism_nll(token_logits, copy_logits, inputs, targets).mean()
        with torch.no_grad():
            copy = torch.sigmoid(copy_logits.float())
            mixture = (1 - copy).unsqueeze(1) * torch.softmax(token_logits.float(), dim=-1)
            mixture.scatter_add_(1, inputs.unsqueeze(1), copy.unsqueeze(1))
            correct = mixture.argmax(-1) == targets
            masked = positions.mask[where]
            metrics = {
                "all_tokens_loss": loss.detach(),
                "copy_probability": copy.mean(),
                "all_tokens_accuracy": correct.float().mean(),
                "mlm_accuracy": (correct & masked).float().sum() / masked.sum().clamp_min(1),
            }
        return loss, metrics

    def flop_plan(self, config: PretrainConfig) -> FlopPlan:
        return FlopPlan(head="masked_lm_everywhere_with_copy", **corruption_flop_plan(config))
