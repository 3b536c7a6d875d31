"""The settings every fine-tuning command shares, declared once: their flags, help and ranges come from here (light
to import: each command line reads it before any model code loads).

GLUE, the multi-task student and `electra tag` take each shared setting with `recipe_setting`, so a flag is
described and checked alike wherever it appears; a command declares only what is its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from electra.core.config import CPU_DROPOUT, MIXED_PRECISION, PretrainConfig
from electra.core.settings import (
    COUNT,
    DECAY,
    FRACTION,
    NON_NEGATIVE,
    NOT_NEGATIVE_COUNT,
    POSITIVE,
    check_declared,
    declaration,
    setting,
)

# Settings that only change how a run is watched or saved, not what it learns: a resume may change them.
RESUMABLE_SETTINGS = frozenset({"save_every", "log_every", "progress", "eval_batch_size"})


@dataclass
class RecipeSettings:
    """The optimizer and run settings every fine-tuning command shares, declared once (`setting`): a command's
    settings class takes each with `recipe_setting`, so its flag, help and range come from these lines. None, where
    allowed, means the paper's value for the model's size or the task."""

    learning_rate: float | None = setting(
        None,
        "default by hidden size: 3e-4 small, 1e-4 base, 5e-5 large",
        within=POSITIVE,
        flags=("--learning-rate",),
    )
    layer_decay: float | None = setting(
        None, "default 0.8 (0.9 for large)", within=DECAY, flags=("--layer-decay",)
    )
    epochs: float | None = setting(None, "training epochs", within=POSITIVE, flags=("--epochs",))
    max_steps: int | None = setting(
        None, "stop after N updates (overrides --epochs)", within=COUNT, flags=("--max-steps",)
    )
    batch_size: int = setting(
        32, "global batch (split over processes)", within=COUNT, flags=("--batch-size",)
    )
    eval_batch_size: int = setting(128, "evaluation batch", within=COUNT)
    max_seq_length: int = setting(128, "tokens per example", within=COUNT, flags=("--max-seq-length",))
    warmup_fraction: float = setting(
        0.1, "share of the updates that warm the rate up", within=FRACTION, flags=("--warmup-fraction",)
    )
    weight_decay: float = setting(0.0, "AdamW weight decay", within=NON_NEGATIVE, flags=("--weight-decay",))
    adam_epsilon: float = setting(1e-6, "AdamW epsilon", within=NON_NEGATIVE)
    max_grad_norm: float = setting(1.0, "global gradient-norm clip (the reference's 1)", within=NON_NEGATIVE)
    original_off_by_one: bool = setting(
        False,
        "use the reference code's layer-wise rates (two extra decay factors below the head)",
        flags=("--original-layer-decay",),
    )
    mixed_precision: str = setting(
        "no", "mixed precision", choices=MIXED_PRECISION, flags=("--mixed-precision",)
    )
    cpu_dropout: str = setting(
        "lanes",
        declaration(PretrainConfig, "cpu_dropout").metadata["help"],
        choices=CPU_DROPOUT,
        flags=("--cpu-dropout",),
    )
    save_every: int = setting(
        0,
        "checkpoint each seed's run every N updates under OUTPUT/runs/ (0: never), for --resume",
        within=NOT_NEGATIVE_COUNT,
        flags=("--save-every",),
    )
    log_every: int = setting(10, "updates between log rows", within=COUNT, flags=("--log-every",))
    progress: bool = setting(True, "progress bars")

    def __post_init__(self) -> None:
        check_declared(self, "")


def recipe_setting(name: str, default: Any = None, help: str | None = None) -> Any:
    """The recipe's declaration of the setting `name` (its help, range, choices and flags) for a command's own
    settings class, with another default or help where that command's differs."""
    spec = declaration(RecipeSettings, name)
    meta = dict(spec.metadata)
    return setting(
        spec.default if default is None else default,
        help or meta["help"],
        choices=meta["choices"],
        within=meta["within"],
        flags=meta["flags"],
        metavar=meta["metavar"],
    )
