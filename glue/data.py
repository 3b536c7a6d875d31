"""Examples -> token ids ([CLS] A [SEP] B [SEP], truncated longest-first, as BERT/ELECTRA do) and batches."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from electra.data.packing import pad_batch
from electra.glue.tasks import Example, TaskSpec


def encode_examples(
    examples: Sequence[Example], tokenizer, spec: TaskSpec, max_seq_length: int, batch: int = 2048
) -> list[dict]:
    """One dict per example: input_ids, token_type_ids, and `labels` (an index, or a float for STS-B) when known."""
    features: list[dict] = []
    for start in range(0, len(examples), batch):
        chunk = examples[start : start + batch]
        pairs = spec.text_b is not None
        encoded = tokenizer(
            [ex.text_a for ex in chunk],
            [ex.text_b or "" for ex in chunk] if pairs else None,
            truncation="longest_first",
            max_length=max_seq_length,
            return_token_type_ids=True,
            return_attention_mask=False,
        )
        for i, ex in enumerate(chunk):
            feature = {"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i]}
            if ex.label is not None:
                feature["labels"] = float(ex.label) if spec.is_regression else spec.labels.index(ex.label)
            features.append(feature)
    return features


class Collator:
    """Pads a list of features to the longest in the batch and adds the attention mask."""

    def __init__(self, pad_token_id: int, regression: bool):
        self.pad_token_id = pad_token_id
        self.regression = regression

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = pad_batch(features, self.pad_token_id)
        if "labels" in features[0]:
            dtype = torch.float32 if self.regression else torch.long
            batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=dtype)
        return batch
