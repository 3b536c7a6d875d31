"""Dependency parsing as a task of the CVT loop (`electra.tagging.cvt_train`): treebank splits in, the parser
(`electra.tagging.cvt_parser`) trained supervised or with Cross-View Training, UAS/LAS out.

Each item is (words, (heads, relations)). The best evaluation is picked by LAS when the treebank has relations and
by UAS when it has none (LAS then equals UAS: every arc has the one relation `_`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from electra.tagging.conll import Sentence
from electra.tagging.cvt_data import TaggingData, hold_out, read_corpus, read_vectors
from electra.tagging.cvt_model import Batch, Vocabulary
from electra.tagging.cvt_parser import (
    CvtParser,
    CvtParserConfig,
    edge_targets,
    parse,
    parse_cvt_loss,
    parse_supervised_loss,
)
from electra.tagging.cvt_settings import ParseCvtSettings
from electra.tagging.dependencies import Tree, attachment_scores, read_treebank, write_parses


@dataclass
class ParsingTask:
    """Parsing for the CVT loop; `relations` says whether the treebank labels its arcs."""

    relations: bool
    arc_dim: int = 128
    score_punctuation: bool = False

    @property
    def metric(self) -> str:
        return "las" if self.relations else "uas"

    def training_target(self, tree: Tree) -> Tree:
        return tree

    def labels(self, targets: Sequence[Tree]) -> list[str]:
        return sorted({relation for tree in targets for relation in tree.relations})

    def new_model(self, config: dict) -> CvtParser:
        return CvtParser(CvtParserConfig(**config, arc_dim=self.arc_dim))

    def labeled_loss(
        self,
        model: CvtParser,
        batch: Batch,
        targets: Sequence[Tree],
        vocab: Vocabulary,
        settings: ParseCvtSettings,
    ) -> torch.Tensor:
        relations = [[vocab.label_ids[r] for r in tree.relations] for tree in targets]
        edges = edge_targets([t.heads for t in targets], relations, batch.words.shape[1], len(vocab.labels))
        return parse_supervised_loss(model, batch, edges, settings.labeled_dropout, settings.label_smoothing)

    def unlabeled_loss(self, model: CvtParser, batch: Batch, settings: ParseCvtSettings) -> torch.Tensor:
        return parse_cvt_loss(model, batch, settings.unlabeled_dropout, model.config.modules)[0]

    def evaluate(
        self,
        model: CvtParser,
        pairs: Sequence[tuple[list[str], Tree]],
        vocab: Vocabulary,
        settings: ParseCvtSettings,
    ) -> tuple[dict[str, float], list[tuple[list[int], list[str]]]]:
        predicted = parse(model, [w for w, _ in pairs], vocab, settings.eval_batch_size)
        return attachment_scores([t for _, t in pairs], predicted, self.score_punctuation), predicted

    def write_predictions(self, path: Path, sentences: Sequence[Sentence], predictions: list) -> None:
        write_parses(path, sentences, predictions)


def load_treebank_data(
    settings: ParseCvtSettings,
    train: str | Path,
    test: str | Path | None,
    dev: str | Path | None = None,
    unlabeled: str | Path | None = None,
    columns: str | None = None,
) -> TaggingData:
    """The treebank splits (`hold_out`'s rule: without `dev`, `dev_sentences` of train are held out) and the
    unlabeled corpus, for `electra parse-bilstm`."""
    train_sentences, train_trees, relations = read_treebank(train, columns)
    dev_pairs = None
    if dev is not None:
        dev_sentences, dev_trees, _ = read_treebank(dev, columns)
        dev_pairs = [(s.words, t) for s, t in zip(dev_sentences, dev_trees)]
    pairs, dev_pairs = hold_out(
        [(s.words, t) for s, t in zip(train_sentences, train_trees)], dev_pairs, settings, train
    )
    test_sentences, test_trees = ([], []) if test is None else read_treebank(test, columns)[:2]
    test_pairs = [(s.words, t) for s, t in zip(test_sentences, test_trees)]
    task = ParsingTask(relations, settings.arc_dim, settings.score_punctuation)
    corpus = read_corpus(settings, unlabeled)
    return TaggingData(pairs, dev_pairs, test_pairs, test_sentences, corpus, task, read_vectors(settings))
