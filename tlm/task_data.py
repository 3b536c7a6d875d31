"""What a TLM run reads and feeds: the task splits with their class ids, the tokenizer, the retrieved corpus's
path, and the batches of both (seeded, resumable, and the same on every process)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.data.packing import PretrainingCollator, ResumableBatchOrder
from electra.data.tokenization import load_or_train_tokenizer
from electra.tlm.retrieval import check_selection
from electra.tlm.settings import TLMSettings
from electra.tlm.tasks import LabelVocab, TaskExample
from electra.training.pretraining_data import run_vocabulary

SPLITS = ("train", "dev", "test")


def corpus_of(retrieved: str | Path) -> Path:
    """`OUT/corpus` of a retrieval run (once `electra.tlm.retrieval.check_selection` finds it whole), or the path itself
    when it is already a corpus."""
    path = Path(retrieved)
    if not path.exists():
        raise UserError(f"{path}: retrieved corpus does not exist; run `electra tlm retrieve` first.")
    check_selection(path)
    return path / "corpus" if (path / "corpus").is_dir() else path


@dataclass
class TaskSplits:
    """The task's train, dev and test examples (by split name) and their class ids, numbered by train's labels."""

    labels: LabelVocab
    examples: dict[str, list[TaskExample]]
    label_ids: dict[str, list[int]]

    def encode(self, tokenizer: Any, max_length: int) -> dict[str, list[dict]]:
        """Every split's rows for the collator (`encode_task`), by split name."""
        return {
            split: encode_task(self.examples[split], self.label_ids[split], tokenizer, max_length)
            for split in SPLITS
        }


def read_splits(settings: TLMSettings) -> TaskSplits:
    """The three splits, all read before any is labelled, so a missing or malformed file is refused before work;
    a dev or test label that train does not have is refused by `LabelVocab.encode`."""
    paths = dict(zip(SPLITS, (settings.task_train, settings.task_dev, settings.task_test)))
    examples = {split: settings.read_split(path) for split, path in paths.items()}
    labels = LabelVocab.from_examples(examples["train"], settings.task_train)
    label_ids = {split: labels.encode(examples[split], paths[split]) for split in SPLITS}
    return TaskSplits(labels, examples, label_ids)


def run_tokenizer(
    settings: TLMSettings,
    config: PretrainConfig,
    saved: Path,
    train_examples: Sequence[TaskExample],
    corpus: Path | None,
) -> Any:
    """The run's tokenizer: the one a resumed run saved in `saved`, else `--init-from`'s or `--vocab`'s vocabulary
    (a differing pair is refused by `run_vocabulary`), else WordPiece trained on the retrieved `corpus`, or on the
    task's training texts when there is none."""
    vocab = run_vocabulary(config, settings.vocab)
    if settings.resume and (saved / "tokenizer.json").is_file():
        return load_or_train_tokenizer(str(saved), None, config.tokenizer_vocab_size, config.lowercase)
    if vocab is None and corpus is None:
        with tempfile.TemporaryDirectory() as scratch:
            task_texts = Path(scratch) / "task_texts.txt"
            task_texts.write_text("\n\n".join(e.text for e in train_examples) + "\n")
            return load_or_train_tokenizer(
                None, task_texts, config.tokenizer_vocab_size, config.lowercase, text_form=config.text_form
            )
    return load_or_train_tokenizer(
        vocab, corpus, config.tokenizer_vocab_size, config.lowercase, text_form=config.text_form
    )


def encode_task(
    examples: Sequence[TaskExample], labels: Sequence[int], tokenizer: Any, max_length: int
) -> list[dict]:
    """`[CLS] text [SEP]` ids (truncated to `max_length`) with the class id, ready for the collator."""
    encoded = tokenizer([e.text for e in examples], truncation=True, max_length=max_length)
    return [
        {"input_ids": ids, "token_type_ids": [0] * len(ids), "label": label}
        for ids, label in zip(encoded["input_ids"], labels)
    ]


class TaskCollator:
    """Pads task rows like the pretraining collator and adds the labels."""

    def __init__(self, pad_token_id: int):
        self.pad = PretrainingCollator(pad_token_id)

    def __call__(self, rows: Sequence[dict]) -> dict[str, torch.Tensor]:
        batch = self.pad(rows)
        batch["labels"] = torch.tensor([row["label"] for row in rows], dtype=torch.long)
        return batch


def batches_forever(
    rows: Any, batch_size: int, seed: int, collate: Any, rank: int = 0, world: int = 1, start: int = 0
) -> Iterator[dict]:
    """Seeded shuffled batches, epoch after epoch, from batch number `start` (rows: a list or a `datasets.Dataset`)."""
    order = ResumableBatchOrder(len(rows), batch_size, seed, rank=rank, world_size=world)
    for indices in order.batches(start):
        if isinstance(rows, list):
            yield collate([rows[i] for i in indices])
        else:
            columns = rows[indices]
            yield collate([dict(zip(columns, values)) for values in zip(*columns.values())])


def eval_batches(rows: Sequence[dict], batch_size: int, collate: Any) -> Iterator[dict]:
    """Batches of rows sorted by length, so little padding is computed (metrics do not depend on row order)."""
    ordered = sorted(rows, key=lambda row: len(row["input_ids"]))
    for start in range(0, len(ordered), batch_size):
        yield collate(ordered[start : start + batch_size])


def mean_padded_tokens(batches: Iterator[dict], samples: int = 8) -> float:
    """The mean token count (padding included) of the next `samples` batches."""
    return float(np.mean([next(batches)["input_ids"].numel() for _ in range(samples)]))
