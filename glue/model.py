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

from electra.core.errors import UserError
from electra.core.files import read_safetensors
from electra.export.layout import read_head, save_with_head
from electra.finetune.models import load_encoder
from electra.glue.tasks import TaskSpec, get_task

HEAD_KEY = "glue_head"  # config.json entry with the head's task settings
MULTI_HEAD_KEY = "glue_multitask"  # config.json entry of a multi-task model: its tasks and their heads
# The multi-task heads learn STS-B's 0-5 scores divided by this (the BAM chapter's [0, 1] labels); the single-task
# head learns the scores as they are.
REGRESSION_SCALE = 5.0
OLD_HEAD_WEIGHTS = "glue_head.safetensors"  # the first layout's side files
OLD_HEAD_CONFIG = "glue_head.json"


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

    def load_multitask_head(self, directory: str | Path) -> bool:
        """Start from this task's head of a multi-task model (`MultiTaskModel.save`), as single-task fine-tuning
        after multi-task training does (BAM Table 3.3); True if it had one. A regression head is rescaled from the
        multi-task [0, 1] labels to the 0-5 scores this head learns."""
        found = read_head(directory, MULTI_HEAD_KEY, (f"heads.{self.task}.",))
        if found is None:
            return False
        meta, tensors = found
        entry = next((t for t in meta.get("tasks", []) if t.get("task") == self.task), None)
        labels = list(self.labels) if self.labels else None
        if (
            entry is None
            or (entry.get("labels") or None) != labels
            or entry.get("num_labels") != self.num_labels
        ):
            return False
        scale = float(entry.get("scale", 1.0))
        state = {k.rsplit(".", 1)[1]: v * scale for k, v in tensors.items()}
        self.classifier.load_state_dict(state)
        return True


def saved_seed(directory: str | Path) -> int | None:
    """The fine-tuning seed a model saved by `GlueModel.save` or `MultiTaskModel.save` records (None: none
    recorded, or no model)."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    head = (config.get(HEAD_KEY) or config.get(MULTI_HEAD_KEY)) if isinstance(config, dict) else None
    return head.get("seed") if isinstance(head, dict) else None


class MultiTaskModel(nn.Module):
    """One shared encoder and one linear head per task on the [CLS] (or, for BERT, pooled) vector: the BAM
    chapter's multi-task model, where only the heads are task-specific. A regression head predicts the score
    divided by `REGRESSION_SCALE` (plain linear, as the reference code; the chapter's text adds a sigmoid)."""

    def __init__(self, encoder: nn.Module, specs: list[TaskSpec]):
        super().__init__()
        self.encoder = encoder
        config = encoder.config
        self.specs = {spec.name: spec for spec in specs}
        self.dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        self.heads = nn.ModuleDict(
            {spec.name: nn.Linear(config.hidden_size, spec.num_labels) for spec in specs}
        )
        for head in self.heads.values():
            nn.init.normal_(head.weight, std=getattr(config, "initializer_range", 0.02))
            nn.init.zeros_(head.bias)

    def forward(self, groups: list[dict[str, torch.Tensor | str]]) -> list[torch.Tensor]:
        """Outputs of each group of same-task examples (`task`, `input_ids`, `attention_mask`, `token_type_ids`):
        [n, labels] logits, or [n] scaled scores for regression. One call per batch, so a batch of several tasks is
        one forward for data-parallel training; each group is padded to its own longest sequence."""
        outputs = []
        for group in groups:
            out = self.encoder(
                input_ids=group["input_ids"],
                attention_mask=group.get("attention_mask"),
                token_type_ids=group.get("token_type_ids"),
            )
            pooled = getattr(out, "pooler_output", None)
            if pooled is None:
                pooled = out.last_hidden_state[:, 0]
            task = str(group["task"])
            logits = self.heads[task](self.dropout(pooled))
            outputs.append(logits.squeeze(-1) if self.specs[task].is_regression else logits)
        return outputs

    def save(self, directory: str | Path, tokenizer=None, seed: int | None = None) -> None:
        """One Hugging Face directory: the encoder under its prefix (`AutoModel` loads it), `heads.TASK.*` beside
        it, and the tasks in config.json (`MultiTaskModel.from_pretrained` loads the whole)."""
        tensors = {f"heads.{k}": v for k, v in self.heads.state_dict().items()}
        tasks = [
            {
                "task": name,
                "num_labels": spec.num_labels,
                "labels": list(spec.labels) if spec.labels else None,
                "scale": REGRESSION_SCALE if spec.is_regression else 1.0,
            }
            for name, spec in self.specs.items()
        ]
        settings = {"tasks": tasks, "seed": seed}
        save_with_head(directory, self.encoder, tensors, MULTI_HEAD_KEY, settings, None, tokenizer)

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> MultiTaskModel:
        """A model `save` wrote (the tokenizer is beside it: `AutoTokenizer.from_pretrained(directory)`)."""
        found = read_head(directory, MULTI_HEAD_KEY, ("heads.",))
        if found is None:
            raise UserError(
                f"{directory}: not a multi-task GLUE model (config.json has no {MULTI_HEAD_KEY})."
            )
        meta, tensors = found
        model = cls(load_encoder(directory), [get_task(t["task"]) for t in meta["tasks"]])
        model.heads.load_state_dict({k.removeprefix("heads."): v for k, v in tensors.items()})
        return model.eval()

    @torch.no_grad()
    def predict(self, task: str, tokenizer, texts: list[str], pairs: list[str] | None = None) -> list:
        """Labels (or 0-5 scores) of one task for raw texts: the quick way to use a saved model."""
        spec = self.specs[task]
        batch = tokenizer(texts, pairs, padding=True, truncation=True, return_tensors="pt")
        (logits,) = self.eval()([{"task": task, **batch}])
        if spec.is_regression:
            return [float(v) * REGRESSION_SCALE for v in logits]
        return [spec.labels[int(i)] for i in logits.argmax(-1)]
