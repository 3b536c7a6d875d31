"""The two-tower cloze model trained alone: a bidirectional scorer that learns from every token.

Electric trains its two-tower generator as a side model, a fraction of the discriminator's width, and scores text
with the discriminator's energy (or, `--method cloze`, with that small generator). When the goal is the scorer, the
compute is better spent on the cloze model itself: q(x_t | x_\\t) at full width, maximum likelihood at every
position (a masked LM learns from 15% of them), and one forward scores a whole sentence with a normalised
pseudo-log-likelihood, where a masked LM needs one pass per token. There is no discriminator: the export holds
the generator part only, scored by `pll`'s cloze method, and nothing to fine-tune.
"""

from __future__ import annotations

from torch import nn

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.outputs import StepOutput
from electra.flops.analytic import FlopPlan
from electra.generators.two_tower import TwoTowerGenerator
from electra.nn.masking import candidate_mask, pick_positions
from electra.objectives.base import Objective, Parts, generator_export_part, generator_kinds
from electra.objectives.registry import register_objective

NO_KEPT_ENCODER = (
    "objective=cloze keeps no transformers encoder; start a cloze run from scratch (no --init-from)."
)


@register_objective
class Cloze(Objective):
    name = "cloze"
    summary = "the two-tower cloze model alone at full width, likelihood at every position; one-pass scorer"
    config_defaults = {
        "generator": "two-tower",
        "generator_hidden_multiplier": 1.0,
        "embedding_sharing": "none",
    }
    finetune_part = None  # a two-tower model is a scorer, not an encoder to fine-tune
    requires = {
        **generator_kinds("two-tower"),
        "embedding_sharing": (
            ("none",),
            "has no discriminator to share embeddings with; set embedding_sharing=none, not {value!r}.",
        ),
        "generator_from": ((None,), "trains its own model; remove generator_from."),
        # said before the corpus work, not when the weights are loaded
        "init_from": ((None,), NO_KEPT_ENCODER.removeprefix("objective=cloze ")),
    }

    def build(self, model: Parts, token_counts=None) -> None:
        model.discriminator = None
        if model.config.cloze_span == "word" and model.word_starts is None:
            raise UserError(
                "config: cloze_span=word needs the vocabulary's word starts; build the model from a "
                "tokenizer (electra.training.model.build_pretraining_model)."
            )
        model.generator = TwoTowerGenerator(model.config, word_starts=model.word_starts)

    def step(self, model, input_ids, attention_mask, token_type_ids) -> StepOutput:
        """The loss is the mean -log q(x_t | x_\\t) over every non-special token. Accuracy is read at a uniform
        15% of them, as ELECTRA's generator accuracy is, from the argmax the head finds anyway."""
        candidates = candidate_mask(input_ids, attention_mask, model.special_ids)
        slots = pick_positions(input_ids, attention_mask, model.special_ids, model.config.mask_prob)
        loss, hits = model.generator.mle_loss_and_hits(
            input_ids, attention_mask, token_type_ids, candidates, at=slots
        )
        accuracy = slots.mean(hits)
        metrics = {
            "cloze_loss": loss.detach(),
            "cloze_accuracy": accuracy,
            "loss": loss.detach(),
        }
        return StepOutput(loss, metrics)

    def flop_plan(self, config: PretrainConfig) -> FlopPlan:
        return FlopPlan(head="none", generator="two-tower", two_tower_head_at="candidates")

    def kept_encoder(self, model: Parts) -> nn.Module:
        return model.generator

    # No kept_module: a cloze run keeps no transformers model to continue from, and `requires` refuses init_from,
    # the one setting that asks for it (`electra.training.continued.load_initial_weights`), where the config is
    # checked.

    def export_parts(self, model: Parts):
        return [generator_export_part(model.generator, self.name)]

    def scoring(self, model: Parts) -> dict[str, list[str]]:
        return {"cloze": ["generator"]}
