"""The classifier's dev and test scores: accuracy and macro-F1 over every class train knows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from sklearn.metrics import accuracy_score, f1_score
from torch import nn

from electra.tlm.task_data import eval_batches


def classification_metrics(
    predictions: Sequence[int], labels: Sequence[int], num_labels: int
) -> dict[str, float]:
    """Accuracy and macro-F1; a class never predicted nor present counts 0 towards the macro mean."""
    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "macro_f1": float(
            f1_score(labels, predictions, average="macro", labels=list(range(num_labels)), zero_division=0)
        ),
    }


@torch.no_grad()
def evaluate(
    accelerator: Any,
    classifier: nn.Module,
    rows: Sequence[dict],
    batch_size: int,
    collate: Any,
    num_labels: int,
) -> dict[str, float]:
    """`classification_metrics` of `classifier` on `rows`, in eval mode (it is left in train mode)."""
    classifier.eval()
    predictions: list[int] = []
    labels: list[int] = []
    for batch in eval_batches(rows, batch_size, collate):
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        logits = classifier(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        ).logits
        predictions.extend(logits.argmax(-1).tolist())
        labels.extend(batch["labels"].tolist())
    classifier.train()
    return classification_metrics(predictions, labels, num_labels)
