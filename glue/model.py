"""A linear task head on any BERT-style encoder, saved as one Hugging Face model directory.

The ELECTRA paper classifies from the final [CLS] vector with one linear layer (regression for STS-B: one output,
squared error). For BERT checkpoints, whose encoder has a pretrained pooler, the pooled vector is used instead,
as BERT does. A fine-tuned checkpoint (written by `electra.export.layout.save_with_head`) is config.json, with the task's
labels and `glue_head` settings, and one model.safetensors: the encoder under its prefix (`AutoModel` and
`--init-from` read it), and the layer as
- `classifier.*` on an encoder with a pooler: exactly `BertForSequenceClassification`, which
  `AutoModelForSequenceClassification` loads with no code from this library;
- `glue_head.*` on ELECTRA: `transformers`' ElectraForSequenceClassification has a two-layer head, not the
  paper's one layer, so the weights keep a name that class does not silently half-load.
Checkpoints of the first layout (`glue_head.safetensors` + `glue_head.json` beside the encoder) still load.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModel

from electra.core.files import read_safetensors
from electra.export.layout import load_pretrained, read_head, save_with_head

HEAD_KEY = "glue_head"  # config.json entry with the head's task settings
OLD_HEAD_WEIGHTS = "glue_head.safetensors"  # the first layout's side files
OLD_HEAD_CONFIG = "glue_head.json"


def load_encoder(model_dir: str | Path) -> nn.Module:
    """The bare encoder (ElectraModel / BertModel ...) of any local HF checkpoint: pretraining heads are dropped."""
    return load_pretrained(AutoModel, model_dir)


class GlueModel(nn.Module):
    """Encoder + dropout + linear layer on the [CLS] (or pooled) vector."""

    def __init__(
        self, encoder: nn.Module, num_labels: int, task: str = "", labels: tuple[str, ...] | None = None
    ):
        super().__init__()
        self.encoder = encoder
        config = encoder.config
        self.task, self.labels, self.num_labels = task, labels, num_labels
        self.dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=getattr(config, "initializer_range", 0.02))
        nn.init.zeros_(self.classifier.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(loss or None, logits); logits are [batch, num_labels], or [batch] scores for regression."""
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:
            pooled = out.last_hidden_state[:, 0]
        logits = self.classifier(self.dropout(pooled))
        if self.num_labels == 1:
            logits = logits.squeeze(-1)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = nn.functional.mse_loss(logits.float(), labels.float())
            else:
                loss = nn.functional.cross_entropy(logits.float(), labels.long())
        return loss, logits

    def save(self, directory: str | Path, tokenizer=None, seed: int | None = None) -> None:
        """`seed`, the fine-tuning seed, is recorded with the head: a resumed `--save-best` run reads it back to
        know which seed's model the directory holds."""
        native = self.uses_pooler
        prefix = "classifier." if native else "glue_head."
        tensors = {prefix + k: v for k, v in self.classifier.state_dict().items()}
        labels = list(self.labels) if self.labels else None
        settings = {"task": self.task, "num_labels": self.num_labels, "labels": labels}
        if seed is not None:
            settings["seed"] = seed
        updates: dict = {"num_labels": self.num_labels}
        if labels:
            updates.update(
                id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)}
            )
        if self.num_labels == 1:
            updates["problem_type"] = "regression"
        name = type(self.encoder).__name__
        architecture = name.removesuffix("Model") + "ForSequenceClassification" if native else None
        save_with_head(directory, self.encoder, tensors, HEAD_KEY, settings, architecture, tokenizer, updates)

    @property
    def uses_pooler(self) -> bool:
        return getattr(self.encoder, "pooler", None) is not None

    def load_head_if_same_task(self, directory: str | Path) -> bool:
        """Reuse a saved task layer when it was trained on this very task (same labels); True if loaded.
        A checkpoint from another task (MNLI -> RTE, as the paper does) keeps only its encoder."""
        directory = Path(directory)
        found = read_head(directory, HEAD_KEY, ("classifier.", "glue_head."))
        if found is not None:
            meta, tensors = found
            state = {k.split(".", 1)[1]: v for k, v in tensors.items()}
        elif (directory / OLD_HEAD_CONFIG).is_file() and (directory / OLD_HEAD_WEIGHTS).is_file():
            meta = json.loads((directory / OLD_HEAD_CONFIG).read_text())
            state = read_safetensors(directory / OLD_HEAD_WEIGHTS)
        else:
            return False
        same_labels = (meta.get("labels") or None) == (list(self.labels) if self.labels else None)
        if meta.get("task") != self.task or meta.get("num_labels") != self.num_labels or not same_labels:
            return False
        self.classifier.load_state_dict(state)
        return True


def saved_seed(directory: str | Path) -> int | None:
    """The fine-tuning seed a model saved by `GlueModel.save` records (None: none recorded, or no model)."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    head = config.get(HEAD_KEY) if isinstance(config, dict) else None
    return head.get("seed") if isinstance(head, dict) else None
