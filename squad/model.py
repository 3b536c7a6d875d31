"""A Hugging Face ELECTRA/BERT encoder plus a span head, saved as one Hugging Face model directory.

Layout of a saved model directory (written by `electra.export.layout.save_with_head`):
    config.json        the encoder's config, plus `squad_head` (the head's settings) and `architectures`
    model.safetensors  the encoder under `electra.` (or `bert.`), and the head:
                       - the plain head without an answerability classifier as `qa_outputs` (start; end), exactly
                         `ElectraForQuestionAnswering`'s layout: `AutoModelForQuestionAnswering` and
                         `pipeline("question-answering")` load it with no code from this library;
                       - ELECTRA's XLNet-style head (the default) as `qa_head.*`: `electra.squad.hf_model.ElectraForSquad`
                         (a `transformers` model class) loads it, since no `transformers` class has that head.
    tokenizer files    when a tokenizer was passed to `save`
`AutoModel.from_pretrained(dir)` loads the fine-tuned encoder from either. Directories written before this layout
(`qa_head.json` + `qa_head.safetensors` beside the encoder) still load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModel

from electra.core.errors import UserError
from electra.core.files import read_safetensors
from electra.export.layout import load_pretrained, read_head, save_with_head
from electra.squad.heads import HeadConfig, QAOutput, SpanHead

HEAD_KEY = "squad_head"  # config.json entry holding the head's settings
OLD_HEAD_CONFIG = "qa_head.json"  # the first layout's side files
OLD_HEAD_WEIGHTS = "qa_head.safetensors"


def span_forward(
    encoder: nn.Module,
    head: SpanHead,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor,
    start_positions: torch.Tensor | None = None,
    end_positions: torch.Tensor | None = None,
    is_impossible: torch.Tensor | None = None,
) -> QAOutput:
    """Encoder, then the head over context tokens and [CLS] (the null answer): the reference's answer mask."""
    hidden = encoder(
        input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
    ).last_hidden_state
    answer_mask = (token_type_ids * attention_mask).clone()
    answer_mask[:, 0] = 1
    return head(hidden, answer_mask, start_positions, end_positions, is_impossible)


def native_qa_class(encoder: nn.Module, config: HeadConfig) -> str | None:
    """The `transformers` class that holds this model exactly (`ElectraForQuestionAnswering`), when one does."""
    name = type(encoder).__name__
    if config.kind == "plain" and not config.answerable and name.endswith("Model"):
        return name.removesuffix("Model") + "ForQuestionAnswering"
    return None


def head_tensors(head: SpanHead, native: bool) -> dict[str, torch.Tensor]:
    if native:  # transformers' qa_outputs: one Linear(hidden, 2), start row first
        return {
            "qa_outputs.weight": torch.cat([head.start.weight, head.end.weight]),
            "qa_outputs.bias": torch.cat([head.start.bias, head.end.bias]),
        }
    return {f"qa_head.{k}": v for k, v in head.state_dict().items()}


def load_head_tensors(head: SpanHead, tensors: dict[str, torch.Tensor]) -> None:
    if "qa_outputs.weight" in tensors:
        weight, bias = tensors["qa_outputs.weight"], tensors["qa_outputs.bias"]
        state = {
            "start.weight": weight[:1],
            "start.bias": bias[:1],
            "end.weight": weight[1:],
            "end.bias": bias[1:],
        }
    else:
        state = {k.removeprefix("qa_head."): v for k, v in tensors.items() if k.startswith("qa_head.")}
    head.load_state_dict(state)


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
        return span_forward(
            self.encoder,
            self.qa_head,
            input_ids,
            attention_mask,
            token_type_ids,
            start_positions,
            end_positions,
            is_impossible,
        )

    # ---- persistence -----------------------------------------------------------------------------------
    @classmethod
    def from_encoder(cls, model_dir: str | Path, head_config: HeadConfig) -> SquadModel:
        """A new head on the encoder of any local HF ELECTRA/BERT checkpoint (a discriminator dir works)."""
        return cls(load_pretrained(AutoModel, model_dir), head_config)

    @classmethod
    def load(cls, model_dir: str | Path) -> SquadModel:
        """A model saved by `save` (encoder and head), or by the first layout."""
        model_dir = Path(model_dir)
        if (model_dir / OLD_HEAD_CONFIG).is_file():
            head_config = HeadConfig(**json.loads((model_dir / OLD_HEAD_CONFIG).read_text()))
            model = cls(load_pretrained(AutoModel, model_dir), head_config)
            model.qa_head.load_state_dict(read_safetensors(model_dir / OLD_HEAD_WEIGHTS))
            return model
        found = read_head(model_dir, HEAD_KEY, ("qa_outputs.", "qa_head."))
        if found is None:
            raise UserError(
                f"{model_dir}: its config.json has no {HEAD_KEY!r}; this is not a fine-tuned SQuAD model directory."
            )
        settings, tensors = found
        model = cls(load_pretrained(AutoModel, model_dir), HeadConfig(**settings))
        load_head_tensors(model.qa_head, tensors)
        return model

    def save(self, model_dir: str | Path, tokenizer: Any = None) -> None:
        native = native_qa_class(self.encoder, self.head_config)
        architecture = native or (
            "ElectraForSquad" if type(self.encoder).__name__ == "ElectraModel" else None
        )
        save_with_head(
            model_dir,
            self.encoder,
            head_tensors(self.qa_head, native is not None),
            HEAD_KEY,
            self.head_config.to_dict(),
            architecture,
            tokenizer,
        )
