"""The pretraining model: the parts an objective builds, and its training step as the forward pass.

`PretrainingModel` holds whatever the configured objective attaches (`discriminator`, `generator`, extra heads) and
delegates the step to it, so one class serves every registered objective: the training engine, checkpoints and
`electra.export.layout` only ever see this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.outputs import SpecialIds, StepOutput
from electra.data.tokenization import word_start_flags
from electra.export.layout import write_export
from electra.nn.lane_attention import use_lane_modules
from electra.objectives import get_objective


class PretrainingModel(nn.Module):
    def __init__(
        self,
        config: PretrainConfig,
        special: SpecialIds,
        token_counts: Any = None,
        word_starts: torch.Tensor | None = None,
    ):
        super().__init__()
        self.config = config
        self.special = special
        self.word_starts = word_starts  # which vocabulary entries begin a word (cloze_span=word needs it)
        self.objective = get_objective(config.objective)
        self.register_buffer("special_ids", torch.tensor(special.as_list()), persistent=False)
        self.discriminator: nn.Module | None = None
        self.generator: nn.Module | None = None
        self.objective.build(self, token_counts)
        if config.cpu_dropout == "lanes":
            use_lane_modules(self)

    @property
    def encoder(self) -> nn.Module:
        """The `transformers` encoder that is kept and fine-tuned (the discriminator's, or the MLM model's)."""
        return self.objective.kept_encoder(self)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> StepOutput:
        return self.objective.step(self, input_ids, attention_mask, token_type_ids)

    def export(self, output_dir: str | Path, tokenizer: Any) -> dict[str, Path]:
        """Hugging Face directories and the manifest (`electra.export.layout`): what every consumer loads. Weights that
        are not finite are refused: an export of NaNs would load without complaint and fine-tune to nothing."""
        broken = [name for name, p in self.named_parameters() if not torch.isfinite(p).all()]
        if broken:
            raise UserError(
                f"{output_dir}: not exported: {len(broken)} weight tensor(s) hold NaN or inf ({broken[0]}, ...); "
                "resume from an earlier checkpoint with a lower learning rate."
            )
        objective = self.objective
        tokenizer.model_max_length = (
            self.config.max_position_embeddings
        )  # truncation=True stops where the model does
        return write_export(
            output_dir,
            objective.export_parts(self),
            tokenizer,
            objective=objective.name,
            finetune=objective.finetune_part,
            scoring=objective.scoring(self),
        )


def build_pretraining_model(
    config: PretrainConfig, tokenizer: Any, token_counts: Any = None
) -> PretrainingModel:
    """Sizes the vocabulary from the tokenizer (so a trained WordPiece of any size just works) and builds the model."""
    if config.vocab_size != len(tokenizer):
        config.vocab_size = len(tokenizer)
    word_starts = word_start_flags(tokenizer) if config.cloze_span == "word" else None
    return PretrainingModel(
        config, SpecialIds.from_tokenizer(tokenizer), token_counts=token_counts, word_starts=word_starts
    )
