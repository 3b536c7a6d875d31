"""A linear tagging layer on any BERT-style encoder, saved as one Hugging Face model directory.

Every piece's final hidden vector goes through dropout and one linear layer to the label logits, which is
`transformers`' `...ForTokenClassification` exactly (ELECTRA's and BERT's alike): the saved directory holds the
encoder under its `base_model_prefix` and the layer as `classifier.*`, with `num_labels`, `id2label` and
`label2id` in config.json, so `AutoModelForTokenClassification.from_pretrained(dir)` loads it with no code from
this library and gives the same logits. config.json also keeps `tagging_head`: the labels and the column layout
the model was trained on (what `electra tag` and a reader of the card need to use it on new files).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn

from electra.export.layout import save_with_head
from electra.tagging.features import IGNORE

HEAD_KEY = "tagging_head"  # config.json entry with the tagger's labels and layout


def token_classification_class(encoder: nn.Module) -> str | None:
    """The `transformers` class that holds encoder + `classifier` (ElectraForTokenClassification, ...), if any."""
    name = type(encoder).__name__.removesuffix("Model") + "ForTokenClassification"
    return name if hasattr(transformers, name) else None


class TaggerModel(nn.Module):
    """Encoder, dropout, and a linear layer per piece."""

    def __init__(self, encoder: nn.Module, labels: Sequence[str]):
        super().__init__()
        if getattr(encoder, "pooler", None) is not None:  # unused by a tagger; without it the saved model is
            encoder.pooler = None  # exactly transformers' ...ForTokenClassification
        self.encoder = encoder
        self.labels = list(labels)
        config = encoder.config
        dropout = getattr(config, "classifier_dropout", None)
        self.dropout = nn.Dropout(dropout if dropout is not None else config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, len(self.labels))
        nn.init.normal_(self.classifier.weight, std=getattr(config, "initializer_range", 0.02))
        nn.init.zeros_(self.classifier.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(loss or None, logits [batch, pieces, labels]); the loss is the mean cross-entropy over the pieces
        whose label is not IGNORE (each word's first piece)."""
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        logits = self.classifier(self.dropout(hidden))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE
            )
        return loss, logits

    def save(
        self, directory: str | Path, tokenizer: Any = None, settings: Mapping[str, Any] | None = None
    ) -> None:
        """The model as one Hugging Face directory (see the module docstring); `settings` (the layout, the seed)
        are kept in config.json under `tagging_head` beside the labels."""
        tensors = {f"classifier.{k}": v for k, v in self.classifier.state_dict().items()}
        updates = {
            "num_labels": len(self.labels),
            "id2label": dict(enumerate(self.labels)),
            "label2id": {label: i for i, label in enumerate(self.labels)},
        }
        head = {"labels": self.labels, **(settings or {})}
        architecture = token_classification_class(self.encoder)
        save_with_head(directory, self.encoder, tensors, HEAD_KEY, head, architecture, tokenizer, updates)
