"""The BERT baseline: one full-size masked LM predicts the masked ~15% of tokens (BERT's 80/10/10 masking)."""

from __future__ import annotations

import torch.nn.functional as F

from electra.core.config import PretrainConfig
from electra.core.outputs import StepOutput
from electra.export.layout import ExportPart, save_hf_model
from electra.flops.analytic import FlopPlan
from electra.generators.masked_lm import MaskedLMGenerator
from electra.nn.hf_configs import discriminator_hf_config
from electra.nn.masking import pick_positions
from electra.nn.metrics import generator_metrics
from electra.objectives.base import Objective, Parts, masked_input
from electra.objectives.registry import register_objective


@register_objective
class MaskedLM(Objective):
    name = "mlm"
    summary = "BERT's masked language model at the discriminator's size (the baseline)"
    config_defaults = {"mask_token_prob": 0.8, "random_token_prob": 0.1}
    finetune_part = "mlm"
    requires = {
        "generator_from": ((None,), "trains no generator beside it; remove generator_from."),
        # another generator would run without one and be recorded in config.json as if it had
        "generator": (("mlm",), "uses no generator; remove generator={value} (or --generator)."),
    }

    def build(self, model: Parts, token_counts=None) -> None:
        model.discriminator = None
        model.generator = MaskedLMGenerator(discriminator_hf_config(model.config, model.special.pad))

    def step(self, model, input_ids, attention_mask, token_type_ids) -> StepOutput:
        cfg = model.config
        positions = pick_positions(input_ids, attention_mask, model.special_ids, cfg.mask_prob)
        targets = positions.rows(input_ids)
        masked = masked_input(model, input_ids, positions.mask)
        logits = model.generator.logits_at(masked, attention_mask, token_type_ids, positions)
        loss = positions.mean(F.cross_entropy(logits.float(), targets, reduction="none"))
        metrics = {"mlm_loss": loss.detach(), "loss": loss.detach()}
        accuracy = generator_metrics(logits, targets, positions.weights())["generator_accuracy"]
        metrics["mlm_accuracy"] = accuracy
        return StepOutput(loss, metrics)

    def flop_plan(self, config: PretrainConfig) -> FlopPlan:
        return FlopPlan(head="masked_lm", generator=None)

    def kept_module(self, model: Parts):
        return model.generator.model

    def generator_module(self, model: Parts):
        return None  # the masked LM is the kept model

    def kept_encoder(self, model: Parts):
        return model.generator.model.electra

    def export_parts(self, model: Parts) -> list[ExportPart]:
        hf = model.generator.hf_model()
        return [ExportPart("mlm", type(hf).__name__, save_hf_model(hf, self.name))]

    def scoring(self, model: Parts) -> dict[str, list[str]]:
        return {"mlm": ["mlm"]}
