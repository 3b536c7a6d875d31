"""GLUE fine-tuning's settings, declared once: `electra glue`'s flags and their checks both come from here (light
to import: the command line reads it before any model code loads)."""

from __future__ import annotations

from dataclasses import dataclass

from electra.core.config import (
    COUNT,
    CPU_DROPOUT,
    DECAY,
    FRACTION,
    MIXED_PRECISION,
    NON_NEGATIVE,
    NOT_NEGATIVE_COUNT,
    POSITIVE,
    PretrainConfig,
    check_declared,
    declaration,
    setting,
)


@dataclass
class FinetuneSettings:
    """How each task is fine-tuned; declared once (`setting`), so `electra glue`'s flags and this class's checks
    come from the same lines. None, where allowed, means the paper's value for the model's size or the task."""

    learning_rate: float | None = setting(
        None,
        "default by hidden size: 3e-4 small, 1e-4 base, 5e-5 large",
        within=POSITIVE,
        flags=("--learning-rate",),
    )
    layer_decay: float | None = setting(
        None, "default 0.8 (0.9 for large)", within=DECAY, flags=("--layer-decay",)
    )
    epochs: float | None = setting(
        None, "default: 10 for RTE and STS-B, 3 otherwise", within=POSITIVE, flags=("--epochs",)
    )
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
    double_unordered: bool = setting(
        True, "do not also train MRPC and STS-B on swapped sentence pairs", flags=("--no-double-unordered",)
    )
    original_off_by_one: bool = setting(
        False,
        "use the reference code's layer-wise rates (two extra decay factors below the head)",
        flags=("--original-layer-decay",),
    )
    max_train_examples: int | None = setting(
        None, "a fixed random subset of train", within=COUNT, flags=("--max-train-examples",)
    )
    skip_malformed: bool = setting(
        False,
        "drop TSV rows with too few or too many fields (warns) instead of stopping",
        flags=("--skip-malformed",),
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


@dataclass
class MultitaskSettings:
    """What `electra glue --multitask` adds to `FinetuneSettings`: the multi-task student of the BAM chapter
    (Clark's dissertation, ch. 3). Its epochs, learning rate and layer decay are the shared flags, which default to
    the chapter's multi-task values when not given (6 epochs, twice the single-task rate of the model's size, decay
    0.9); its batch has a flag of its own because the single-task batch has a declared default."""

    task_exponent: float = setting(
        0.75,
        "each example's task is drawn with probability proportional to |train set|^EXPONENT",
        within=NON_NEGATIVE,
        flags=("--task-exponent",),
    )
    task_sampling: bool = setting(
        True,
        "no task sampling: shuffle every task's examples together, each seen once per epoch (ablation)",
        flags=("--no-task-sampling",),
    )
    fixed_lambda: float | None = setting(
        None,
        "hold the teacher-annealing weight on the gold label at this value instead of step/total (ablations: 0, 0.5)",
        within=FRACTION,
        flags=("--fixed-lambda",),
        metavar="LAMBDA",
    )
    multitask_batch_size: int = setting(
        128,
        "global batch of the multi-task student (examples of every task mixed)",
        within=COUNT,
        flags=("--multitask-batch-size",),
    )

    def __post_init__(self) -> None:
        check_declared(self, "")
