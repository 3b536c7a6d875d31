"""A Hugging Face ELECTRA/BERT encoder plus a span head, saved as the encoder's HF layout + the head's safetensors.

Layout of a saved model directory:
    config.json, model.safetensors   the fine-tuned encoder (`transformers.AutoModel.from_pretrained(dir)` loads it)
    qa_head.json, qa_head.safetensors the head's settings and weights
    tokenizer files                   when a tokenizer was passed to `save`
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer

from electra.errors import UserError
from electra.export import load_pretrained, save_tokenizer
from squad.heads import HeadConfig, QAOutput, SpanHead

HEAD_CONFIG = "qa_head.json"
HEAD_WEIGHTS = "qa_head.safetensors"


class SquadModel(nn.Module):
    """`encoder` is the HF base model (found by the shared layer-wise optimizer); `qa_head` is the "head" group."""

    def __init__(self, encoder: nn.Module, head_config: HeadConfig):
        super().__init__()
        self.encoder = encoder
        self.head_config = head_config
        self.qa_head = SpanHead(encoder.config.hidden_size, head_config)

    @property
    def base_model(self) -> nn.Module:
        return self.encoder

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        is_impossible: torch.Tensor | None = None,
    ) -> QAOutput:
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        # Context tokens (segment 1) and [CLS], the null answer: the reference's answer mask.
        answer_mask = (token_type_ids * attention_mask).clone()
        answer_mask[:, 0] = 1
        return self.qa_head(hidden, answer_mask, start_positions, end_positions, is_impossible)

    # ---- persistence -----------------------------------------------------------------------------------
    @classmethod
    def from_encoder(cls, model_dir: str | Path, head_config: HeadConfig) -> SquadModel:
        """A new head on the encoder of any local HF ELECTRA/BERT checkpoint (a discriminator dir works)."""
        return cls(load_pretrained(AutoModel, model_dir), head_config)

    @classmethod
    def load(cls, model_dir: str | Path) -> SquadModel:
        """A model saved by `save` (encoder and head)."""
        from safetensors.torch import load_file

        model_dir = Path(model_dir)
        if not (model_dir / HEAD_CONFIG).is_file():
            raise UserError(f"{model_dir}: no {HEAD_CONFIG}; this is not a fine-tuned SQuAD model directory.")
        head_config = HeadConfig(**json.loads((model_dir / HEAD_CONFIG).read_text()))
        model = cls(load_pretrained(AutoModel, model_dir), head_config)
        model.qa_head.load_state_dict(load_file(str(model_dir / HEAD_WEIGHTS)))
        return model

    def save(self, model_dir: str | Path, tokenizer: Any = None) -> None:
        from safetensors.torch import save_file

        model_dir = Path(model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(str(model_dir))
        state = {k: v.detach().cpu().contiguous() for k, v in self.qa_head.state_dict().items()}
        save_file(state, str(model_dir / HEAD_WEIGHTS))
        (model_dir / HEAD_CONFIG).write_text(json.dumps(self.head_config.to_dict(), indent=2) + "\n")
        if tokenizer is not None:
            save_tokenizer(tokenizer, model_dir, self.encoder.config)


def load_tokenizer(model_dir: str | Path) -> Any:
    """The checkpoint's fast tokenizer (offsets are needed for span mapping); a local directory only (nothing is
    fetched from a hub: this library never reaches the network at run time)."""
    if not Path(model_dir).is_dir():
        raise UserError(
            f"{model_dir}: not a local directory; --tokenizer (and --model) must name a directory holding "
            "tokenizer.json or vocab.txt (hub names are not fetched)."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{model_dir}: no tokenizer could be loaded ({exc.__class__.__name__}); save the tokenizer with the "
            "checkpoint (tokenizer.save_pretrained(dir))."
        ) from exc
    if not tokenizer.is_fast:
        raise UserError(f"{model_dir}: the tokenizer is not a fast tokenizer; SQuAD needs character offsets.")
    return tokenizer
