"""Sentences -> WordPiece windows with one label per word, on the word's first piece (as google's ELECTRA tagging
task and `transformers`' `run_ner.py` do); the other pieces and [CLS]/[SEP] carry -100, which the loss skips.

Each word is tokenized on its own (what the reference tagging task does), so a word's pieces do not depend on its
neighbours; a word the tokenizer drops entirely (a control or zero-width character) becomes [UNK], so every word
gets a prediction. A sentence longer than `max_seq_length` pieces is split into windows of whole words (a word
longer than a window keeps its first pieces), so none is cut off unscored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from electra.core.errors import UserError
from electra.data.packing import pad_batch

IGNORE = -100  # cross_entropy's ignore_index: pieces that are not a word's first


@dataclass(frozen=True)
class Window:
    """Where one encoded window's words come from: sentence index, its first word, and the piece position of each
    of its words' first piece in the window."""

    sentence: int
    first_word: int
    starts: tuple[int, ...]


def word_pieces(tokenizer, sentences: Sequence[Sequence[str]]) -> list[list[list[int]]]:
    """Piece ids per word per sentence; a word with no pieces is [UNK]."""
    words = [w for sentence in sentences for w in sentence]
    ids = tokenizer(words, add_special_tokens=False)["input_ids"] if words else []
    unk = tokenizer.unk_token_id
    out, at = [], 0
    for sentence in sentences:
        out.append([pieces or [unk] for pieces in ids[at : at + len(sentence)]])
        at += len(sentence)
    return out


def encode(
    sentences: Sequence[Sequence[str]],
    tokenizer,
    max_seq_length: int,
    labels: Sequence[Sequence[str]] | None = None,
    label_ids: Mapping[str, int] | None = None,
) -> tuple[list[dict], list[Window]]:
    """(features, windows): per window, input_ids and token_type_ids ([CLS] pieces [SEP]) and, with `labels`,
    `labels` (the word's label id on its first piece; a label outside `label_ids` counts as IGNORE, so a dev
    file's unseen tag is scored but not trained on). Windows are in sentence order. `max_seq_length` is at least 3
    ([CLS], a piece, [SEP]): `electra.tagging.settings.TagSettings` checks it when the settings are made."""
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls is None or sep is None or tokenizer.unk_token_id is None:
        raise UserError(
            "the model's tokenizer has no [CLS], [SEP] or [UNK] token; `electra tag` fine-tunes BERT-style "
            "encoders (ELECTRA, BERT): give such a checkpoint."
        )
    budget = max_seq_length - 2
    features: list[dict] = []
    windows: list[Window] = []
    for index, words in enumerate(word_pieces(tokenizer, sentences)):
        tags = labels[index] if labels is not None else None
        start = 0
        while start < len(words):
            ids, piece_labels, starts = [cls], [IGNORE], []
            end = start
            while end < len(words) and (end == start or len(ids) - 1 + len(words[end]) <= budget):
                pieces = words[end][:budget]
                starts.append(len(ids))
                ids.extend(pieces)
                if tags is not None:
                    first = label_ids.get(tags[end], IGNORE) if label_ids is not None else IGNORE
                    piece_labels.extend([first] + [IGNORE] * (len(pieces) - 1))
                end += 1
            ids.append(sep)
            piece_labels.append(IGNORE)
            feature = {"input_ids": ids, "token_type_ids": [0] * len(ids)}
            if tags is not None:
                feature["labels"] = piece_labels
            features.append(feature)
            windows.append(Window(index, start, tuple(starts)))
            start = end
    return features, windows


class Collator:
    """Pads a list of features to the longest (pad_batch), `labels` with IGNORE and `word_starts` with False."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = pad_batch(features, self.pad_token_id)
        if "labels" in features[0]:
            length = batch["input_ids"].shape[1]
            labels = torch.full((len(features), length), IGNORE, dtype=torch.long)
            for i, feature in enumerate(features):
                labels[i, : len(feature["labels"])] = torch.tensor(feature["labels"])
            batch["labels"] = labels
        if "word_starts" in features[0]:  # --cvt's unlabeled windows
            length = batch["input_ids"].shape[1]
            starts = torch.zeros((len(features), length), dtype=torch.bool)
            for i, feature in enumerate(features):
                starts[i, : len(feature["word_starts"])] = torch.tensor(
                    feature["word_starts"], dtype=torch.bool
                )
            batch["word_starts"] = starts
        return batch


def words_from_windows(
    predictions: Sequence[Sequence[int]], windows: Sequence[Window], lengths: Sequence[int]
) -> list[list[int]]:
    """Per sentence, one predicted label id per word: `predictions[i]` are window i's ids per piece position
    (argmax), read at its words' first pieces. `lengths` are the sentences' word counts."""
    out = [[0] * n for n in lengths]
    for window, row in zip(windows, predictions):
        for offset, position in enumerate(window.starts):
            out[window.sentence][window.first_word + offset] = int(row[position])
    return out
