"""The data a CVT run trains on (`electra.tagging.cvt_train`): the labeled splits, the unlabeled corpus and the
pretrained word vectors, each read and checked once here, and the rule that holds a dev set out of train."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from electra.core.errors import UserError
from electra.tagging.conll import Sentence, is_span_scheme, read_conll
from electra.tagging.cvt_settings import CvtSettings, CvtTrainingSettings
from electra.tagging.cvt_task import CvtTask, TaggingTask
from electra.tagging.unlabeled import read_unlabeled
from electra.tagging.word_vectors import read_word_vectors


@dataclass
class TaggingData:
    """Words and targets of each split (tags, or trees for the parser); `test_sentences` keeps the test file's
    rows for writing predictions back; `task` is what the items are and how they are scored."""

    train: list[tuple[list[str], Any]]
    dev: list[tuple[list[str], Any]]
    test: list[tuple[list[str], Any]]
    test_sentences: list[Sentence]
    unlabeled: list[list[str]]
    task: CvtTask
    vectors: tuple[list[str], torch.Tensor] | None = None  # `--word-vectors`: (normalized words, vectors)


def load_data(
    settings: CvtSettings,
    train: str | Path,
    test: str | Path | None,
    dev: str | Path | None = None,
    unlabeled: str | Path | None = None,
    columns: str | None = None,
    label: str | None = None,
) -> TaggingData:
    """Read the column files (`electra.tagging.conll`) and the unlabeled corpus; the splits are `hold_out`'s."""
    train_sentences = read_conll(train, columns, label)
    dev_pairs = None if dev is None else [(s.words, s.labels) for s in read_conll(dev, columns, label)]
    pairs, dev_pairs = hold_out([(s.words, s.labels) for s in train_sentences], dev_pairs, settings, train)
    test_sentences = read_conll(test, columns, label) if test is not None else []
    test_pairs = [(s.words, s.labels) for s in test_sentences]
    spans = is_span_scheme(tag for _, tags in pairs for tag in tags)
    task = TaggingTask(spans, settings.tag_scheme == "bioes")
    corpus = read_corpus(settings, unlabeled)
    return TaggingData(pairs, dev_pairs, test_pairs, test_sentences, corpus, task, read_vectors(settings))


def read_vectors(settings: CvtTrainingSettings) -> tuple[list[str], torch.Tensor] | None:
    """`--word-vectors`, read and checked once (`electra.tagging.word_vectors`; at most `max_vectors` of them)."""
    if settings.word_vectors is None:
        return None
    return read_word_vectors(settings.word_vectors, settings.word_dim, settings.max_vectors)


def read_corpus(settings: CvtTrainingSettings, unlabeled: str | Path | None) -> list[list[str]]:
    """The unlabeled sentences CVT learns from (none for a supervised run)."""
    if not settings.cvt or unlabeled is None:
        return []
    return read_unlabeled(unlabeled, settings.max_unlabeled)


def hold_out(
    pairs: list, dev: list | None, settings: CvtTrainingSettings, source: str | Path
) -> tuple[list, list]:
    """(train, dev): without `dev`, the first `dev_sentences` of a seed-0 shuffle of `pairs` are the dev set;
    then the first `train_fraction` of the rest (same shuffle) train, the same subset for every seed."""
    order = list(range(len(pairs)))
    random.Random(0).shuffle(order)
    if dev is None:
        if settings.dev_sentences >= len(pairs):
            raise UserError(
                f"--dev-sentences {settings.dev_sentences} leaves nothing of the {len(pairs)} in {source} to train "
                "on; hold out fewer, or give --dev FILE."
            )
        dev = [pairs[i] for i in order[: settings.dev_sentences]]
        order = order[settings.dev_sentences :]
    train = [pairs[i] for i in order]
    return train[: max(1, math.ceil(settings.train_fraction * len(train)))], dev
