"""The settings of `electra tag-bilstm` and `electra parse-bilstm`, declared once: their flags and checks both come from
here (light to import: the command line reads it before any model code loads)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from electra.core.errors import UserError
from electra.core.settings import (
    COUNT,
    DECAY,
    FRACTION,
    NON_NEGATIVE,
    NOT_NEGATIVE_COUNT,
    POSITIVE,
    RATE,
    SEED_RANGE,
    check_declared,
    setting,
)

AUXILIARY_MODULES = ("full", "fwd", "bwd", "future", "past")
PARSER_MODULES = ("full", "fwd-fwd", "fwd-bwd", "bwd-fwd", "bwd-bwd")
TAG_SCHEMES = ("bioes", "as-is")
UNLABELED_TRAINS = ("all", "modules")


@dataclass
class CvtTrainingSettings:
    """How a CVT model is trained, shared by the tagger (`CvtSettings`) and the parser (`ParseCvtSettings`);
    declared once, so each command's flags and these checks come from here. Defaults are the reference's recipe
    and model (Table 4.1); a CPU run passes smaller sizes and fewer steps."""

    known_modules: ClassVar[tuple[str, ...]] = AUXILIARY_MODULES

    cvt: bool = setting(
        False, "train with Cross-View Training on --unlabeled text (off: supervised only)", flags=("--cvt",)
    )
    modules: str = setting(
        ",".join(AUXILIARY_MODULES),
        "comma list of the auxiliary modules CVT trains (full, fwd, bwd, future, past)",
        flags=("--modules",),
    )
    max_steps: int = setting(
        20000, "labeled updates (CVT adds as many unlabeled ones)", within=COUNT, flags=("--max-steps",)
    )
    batch_size: int = setting(
        64, "sentences per minibatch, labeled and unlabeled", within=COUNT, flags=("--batch-size",)
    )
    learning_rate: float = setting(0.5, "SGD base rate", within=POSITIVE, flags=("--learning-rate",))
    momentum: float = setting(0.9, "SGD momentum", within=RATE)
    lr_decay: float = setting(0.005, "rate / (1 + lr_decay * sqrt(t))", within=NON_NEGATIVE)
    warmup_steps: int = setting(
        5000,
        "updates of linear warmup (both kinds count)",
        within=NOT_NEGATIVE_COUNT,
        flags=("--warmup-steps",),
    )
    max_grad_norm: float = setting(1.0, "global gradient-norm clip (0: none)", within=NON_NEGATIVE)
    ema_decay: float = setting(
        0.998, "decay of the weight average that is evaluated and kept", within=DECAY, flags=("--ema-decay",)
    )
    labeled_dropout: float = setting(0.5, "dropout rate on labeled batches", within=RATE)
    unlabeled_dropout: float = setting(0.2, "dropout rate on unlabeled batches", within=RATE)
    cvt_start: int = setting(
        0,
        "labeled updates made alone before the unlabeled ones start (0: from the first, the reference's)",
        within=NOT_NEGATIVE_COUNT,
        flags=("--cvt-start",),
    )
    unlabeled_trains: str = setting(
        "all",
        "what the unlabeled updates train: all (the encoder too, the reference's) or modules (the auxiliary "
        "modules only: the embeddings, character CNN and LSTMs learn from labeled batches alone)",
        choices=UNLABELED_TRAINS,
        flags=("--unlabeled-trains",),
    )
    label_smoothing: float = setting(0.1, "label smoothing on labeled batches", within=FRACTION)
    eval_every: int = setting(
        500, "labeled updates between dev evaluations", within=COUNT, flags=("--eval-every",)
    )
    train_fraction: float = setting(
        1.0,
        "share of the training sentences used (a fixed subset, after the dev hold-out)",
        within=FRACTION,
        flags=("--train-fraction",),
    )
    dev_sentences: int = setting(
        1500,
        "training sentences held out as dev (seed 0) when no --dev is given",
        within=COUNT,
        flags=("--dev-sentences",),
    )
    max_unlabeled: int | None = setting(
        None, "read at most N unlabeled sentences", within=COUNT, flags=("--max-unlabeled",)
    )
    min_word_count: int = setting(
        2,
        "words rarer than this in the training text read as <unk>",
        within=COUNT,
        flags=("--min-word-count",),
    )
    max_words: int | None = setting(
        None, "keep at most N words in the vocabulary (the most frequent)", within=COUNT
    )
    word_dim: int = setting(300, "word embedding size", within=COUNT, flags=("--word-dim",))
    word_vectors: str | None = setting(
        None,
        "start the word embeddings from these vectors (GloVe, word2vec or fastText text, gzipped too; their size "
        "must be --word-dim); their words join the vocabulary (None: random start)",
        flags=("--word-vectors",),
        metavar="FILE",
    )
    max_vectors: int | None = setting(
        None,
        "read at most the first N vectors of --word-vectors (None: all; a 2-million-word file makes a large model)",
        within=COUNT,
        flags=("--max-vectors",),
    )
    char_dim: int = setting(50, "character embedding size", within=COUNT, flags=("--char-dim",))
    char_filters: int = setting(
        100, "character CNN filters per width (widths 2, 3, 4)", within=COUNT, flags=("--char-filters",)
    )
    lstm1: int = setting(
        1024, "units of the first BiLSTM layer (per direction)", within=COUNT, flags=("--lstm1",)
    )
    lstm2: int = setting(
        512, "units of the second BiLSTM layer (per direction)", within=COUNT, flags=("--lstm2",)
    )
    projection: int = setting(
        512, "LSTM projection and hidden-layer size", within=COUNT, flags=("--projection",)
    )
    eval_batch_size: int = setting(128, "sentences per evaluation batch", within=COUNT)
    save_every: int = setting(
        0,
        "checkpoint each seed every N labeled updates in OUTPUT/seed-N/ (0: never), for --resume",
        within=NOT_NEGATIVE_COUNT,
        flags=("--save-every",),
    )
    seed: int = setting(1, "first seed; seeds are seed, seed+1, ...", within=SEED_RANGE, flags=("--seed",))
    seeds: int = setting(1, "runs with different seeds (median reported)", within=COUNT, flags=("--seeds",))

    def __post_init__(self) -> None:
        check_declared(self, "")
        names = [m.strip() for m in self.modules.split(",") if m.strip()]
        unknown = sorted(set(names) - set(self.known_modules))
        if unknown or not names:
            raise UserError(
                f"--modules {self.modules}: give a comma list of {', '.join(self.known_modules)} (unknown: {unknown})."
            )

    @property
    def module_names(self) -> tuple[str, ...]:
        return tuple(m.strip() for m in self.modules.split(",") if m.strip())

    def rate(self, step: int) -> float:
        """The reference's learning rate at update `step` (1-based, both kinds counted)."""
        warm = min(1.0, step / self.warmup_steps) if self.warmup_steps else 1.0
        return self.learning_rate * warm / (1.0 + self.lr_decay * math.sqrt(step))


@dataclass
class CvtSettings(CvtTrainingSettings):
    """How `electra tag-bilstm` trains a CVT tagger (the shared settings, plus the tag scheme)."""

    tag_scheme: str = setting(
        "bioes",
        "train span tags as BIOES (as-is: the file's tags)",
        choices=TAG_SCHEMES,
        flags=("--tag-scheme",),
    )


@dataclass
class ParseCvtSettings(CvtTrainingSettings):
    """How `electra parse-bilstm` trains CVT's dependency parser: the shared settings with the parser's modules, no
    label smoothing (the reference smooths tags only), and the width of the bilinear classifier's projection."""

    known_modules: ClassVar[tuple[str, ...]] = PARSER_MODULES

    modules: str = setting(
        ",".join(PARSER_MODULES),
        "comma list of the auxiliary modules CVT trains (full, fwd-fwd, fwd-bwd, bwd-fwd, bwd-bwd: the head's "
        "view, then the dependent's)",
        flags=("--modules",),
    )
    label_smoothing: float = setting(0.0, "label smoothing on labeled batches", within=FRACTION)
    arc_dim: int = setting(
        128, "width both sides of the bilinear arc classifier project to", within=COUNT, flags=("--arc-dim",)
    )
    score_punctuation: bool = setting(
        False,
        "count punctuation in UAS/LAS (off: left out, as the paper reports)",
        flags=("--score-punctuation",),
    )
