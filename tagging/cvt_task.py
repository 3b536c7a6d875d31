"""What the CVT loop (`electra.tagging.cvt_train`) asks of a task, and tagging as such a task.

A task names its model, its labeled loss, how it is scored and how its predictions are written; the loop is the
same for the tagger (`TaggingTask`, here) and the parser (`electra.tagging.parse_task`). Chunking and NER train on
BIOES tags (converted from the file's BIO), decode greedily (per-word argmax, no CRF) and are scored as spans on
the tags converted back; other tags (part of speech) by accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from electra.tagging.conll import Sentence, to_bio, to_bioes, write_conll
from electra.tagging.cvt_model import (
    Batch,
    CvtEncoder,
    CvtTagger,
    CvtTaggerConfig,
    Vocabulary,
    cvt_loss,
    primary_argmax,
    supervised_loss,
)
from electra.tagging.cvt_settings import CvtTrainingSettings
from electra.tagging.spans import score_tags


class CvtTask(Protocol):
    """What the loop needs to know of a task (tagging here, parsing in `electra.tagging.parse_task`): its model,
    its labeled loss, how it is scored and how predictions are written. A split's items are (words, target)."""

    metric: str  # the score that picks the best evaluation ("f1", "accuracy", "las", "uas")

    def labels(self, targets: Sequence) -> list[str]: ...

    def training_target(self, target: Any) -> Any: ...

    def new_model(self, config: dict) -> CvtEncoder: ...

    def labeled_loss(
        self,
        model: CvtEncoder,
        batch: Batch,
        targets: Sequence,
        vocab: Vocabulary,
        settings: CvtTrainingSettings,
    ) -> torch.Tensor: ...

    def unlabeled_loss(
        self, model: CvtEncoder, batch: Batch, settings: CvtTrainingSettings
    ) -> torch.Tensor: ...

    def evaluate(
        self, model: CvtEncoder, pairs: Sequence, vocab: Vocabulary, settings: CvtTrainingSettings
    ) -> tuple[dict[str, float], list]: ...

    def write_predictions(self, path: Path, sentences: Sequence[Sentence], predictions: list) -> None: ...


def _label_tensor(tags: Sequence[Sequence[str]], vocab: Vocabulary, width: int) -> torch.Tensor:
    labels = torch.full((len(tags), width), -1, dtype=torch.long)
    for i, sentence in enumerate(tags):
        labels[i, 1 : len(sentence) + 1] = torch.tensor([vocab.label_ids[t] for t in sentence])
    return labels


def predict(
    model: CvtTagger, sentences: Sequence[Sequence[str]], vocab: Vocabulary, batch_size: int
) -> list[list[str]]:
    """Greedy tags of the primary module (the argmax at each word), in the model's label scheme."""
    return [[vocab.labels[j] for j in ids] for ids in primary_argmax(model, sentences, vocab, batch_size)]


@dataclass
class TaggingTask:
    """Tagging as a CVT task: span tags (chunks, entities) scored by span F1 and trained as BIOES when `bioes`;
    other tags (part of speech) by accuracy."""

    spans: bool
    bioes: bool = True

    @property
    def metric(self) -> str:
        return "f1" if self.spans else "accuracy"

    def training_target(self, tags: list[str]) -> list[str]:
        return to_bioes(tags) if self.spans and self.bioes else tags

    def labels(self, targets: Sequence[list[str]]) -> list[str]:
        labels = sorted({tag for tags in targets for tag in tags})
        return (["O"] if "O" in labels else []) + [t for t in labels if t != "O"]

    def new_model(self, config: dict) -> CvtTagger:
        return CvtTagger(CvtTaggerConfig(**config))

    def labeled_loss(
        self,
        model: CvtTagger,
        batch: Batch,
        targets: Sequence,
        vocab: Vocabulary,
        settings: CvtTrainingSettings,
    ) -> torch.Tensor:
        labels = _label_tensor(targets, vocab, batch.words.shape[1])
        return supervised_loss(model, batch, labels, settings.labeled_dropout, settings.label_smoothing)

    def unlabeled_loss(self, model: CvtTagger, batch: Batch, settings: CvtTrainingSettings) -> torch.Tensor:
        return cvt_loss(model, batch, settings.unlabeled_dropout, model.config.modules)[0]

    def evaluate(
        self, model: CvtTagger, pairs: Sequence, vocab: Vocabulary, settings: CvtTrainingSettings
    ) -> tuple[dict[str, float], list[list[str]]]:
        """Scores against the file's own tags (span F1 for span tags, token accuracy always) and the
        predictions, converted back to BIO when trained as BIOES."""
        predicted = predict(model, [w for w, _ in pairs], vocab, settings.eval_batch_size)
        if self.spans:
            predicted = [to_bio(tags) for tags in predicted]
        return score_tags([t for _, t in pairs], predicted, self.spans), predicted

    def write_predictions(self, path: Path, sentences: Sequence[Sentence], predictions: list) -> None:
        write_conll(path, sentences, predictions)
