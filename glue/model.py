"""A linear task head on any BERT-style encoder, saved so that the encoder stays a plain HF checkpoint.

The ELECTRA paper classifies from the final [CLS] vector with one linear layer (regression for STS-B: one output,
squared error). For BERT checkpoints, whose encoder has a pretrained pooler, the pooled vector is used instead,
as BERT does. A fine-tuned checkpoint is the encoder's `save_pretrained` folder (so `AutoModel` and `--init-from`
read it) plus `glue_head.safetensors` and `glue_head.json` for the task layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModel

from electra.export import load_pretrained, save_tokenizer

HEAD_WEIGHTS = "glue_head.safetensors"
HEAD_CONFIG = "glue_head.json"


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

    def save(self, directory: str | Path, tokenizer=None) -> None:
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(str(directory))
        if tokenizer is not None:
            save_tokenizer(tokenizer, directory, self.encoder.config)
        state = {k: v.detach().cpu().contiguous() for k, v in self.classifier.state_dict().items()}
        save_file(state, str(directory / HEAD_WEIGHTS))
        meta = {
            "task": self.task,
            "num_labels": self.num_labels,
            "labels": list(self.labels) if self.labels else None,
        }
        (directory / HEAD_CONFIG).write_text(json.dumps(meta, indent=2) + "\n")

    def load_head_if_same_task(self, directory: str | Path) -> bool:
        """Reuse a saved task layer when it was trained on this very task (same labels); True if loaded.
        A checkpoint from another task (MNLI -> RTE, as the paper does) keeps only its encoder."""
        from safetensors.torch import load_file

        directory = Path(directory)
        if not (directory / HEAD_CONFIG).is_file() or not (directory / HEAD_WEIGHTS).is_file():
            return False
        meta = json.loads((directory / HEAD_CONFIG).read_text())
        same_labels = (meta.get("labels") or None) == (list(self.labels) if self.labels else None)
        if meta.get("task") != self.task or meta.get("num_labels") != self.num_labels or not same_labels:
            return False
        self.classifier.load_state_dict(load_file(str(directory / HEAD_WEIGHTS)))
        return True
