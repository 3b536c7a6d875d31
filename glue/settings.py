"""GLUE fine-tuning's settings, declared once: `electra glue`'s flags and their checks both come from here (light
to import: the command line reads it before any model code loads)."""

from __future__ import annotations

from dataclasses import dataclass

from electra.core.settings import COUNT, FRACTION, NON_NEGATIVE, check_declared, setting
from electra.finetune.settings import recipe_setting


@dataclass
class GlueInputs:
    """What a GLUE run reads and writes, declared once: `electra glue`'s flags, and the names of
    `electra.finetune_glue`'s arguments (the fields), so that a message names each as its caller typed it
    (`electra.core.settings.spelled`)."""

    model: str = setting(
        None, "Hugging Face checkpoint directory (e.g. RUN/discriminator)", flags=("--model",), required=True
    )
    tasks: str = setting(
        None,
        "cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, a comma list, or all",
        flags=("--task",),
        metavar="TASK",
        required=True,
    )
    data_dir: str | None = setting(
        None, "GLUE data folder (CoLA/, SST-2/, ...); default $GLUE_DIR", flags=("--data-dir",)
    )
    # the command line adds it with its aliases (`electra.core.flags.add_output_option`)
    output_dir: str | None = setting(
        None, "write results.json, results.md (and test files) here", flags=("--output",)
    )
    seeds: int = setting(
        1, "fine-tuning runs per task; the median is reported", within=COUNT, flags=("--seeds",)
    )
    init_from: str | None = setting(
        None,
        "start from this fine-tuned checkpoint (e.g. MNLI for RTE, or a --multitask model: its task's head too)",
        flags=("--init-from",),
    )
    predict_test: bool = setting(
        False, "write GLUE-server TSVs to OUTPUT/glue_test/", flags=("--predict-test",)
    )
    save_best: bool = setting(
        False, "save the best seed per task to OUTPUT/checkpoints/", flags=("--save-best",)
    )
    resume: bool = setting(
        False,
        "reuse the seeds OUTPUT already finished and continue an interrupted one from its checkpoint",
        flags=("--resume",),
    )
    overwrite: bool = setting(
        False, "replace the results an earlier run left in the output", flags=("--overwrite",)
    )


@dataclass
class FinetuneSettings:
    """How each task is fine-tuned; declared once (`setting`, and the shared recipe's `recipe_setting`), so
    `electra glue`'s flags and this class's checks come from the same lines. None, where allowed, means the paper's
    value for the model's size or the task."""

    learning_rate: float | None = recipe_setting("learning_rate")
    layer_decay: float | None = recipe_setting("layer_decay")
    epochs: float | None = recipe_setting("epochs", help="default: 10 for RTE and STS-B, 3 otherwise")
    max_steps: int | None = recipe_setting("max_steps")
    batch_size: int = recipe_setting("batch_size")
    eval_batch_size: int = recipe_setting("eval_batch_size")
    max_seq_length: int = recipe_setting("max_seq_length")
    warmup_fraction: float = recipe_setting("warmup_fraction")
    weight_decay: float = recipe_setting("weight_decay")
    adam_epsilon: float = recipe_setting("adam_epsilon")
    max_grad_norm: float = recipe_setting("max_grad_norm")
    double_unordered: bool = setting(
        True, "do not also train MRPC and STS-B on swapped sentence pairs", flags=("--no-double-unordered",)
    )
    original_off_by_one: bool = recipe_setting("original_off_by_one")
    max_train_examples: int | None = setting(
        None, "a fixed random subset of train", within=COUNT, flags=("--max-train-examples",)
    )
    skip_malformed: bool = setting(
        False,
        "drop TSV rows with too few or too many fields (warns) instead of stopping",
        flags=("--skip-malformed",),
    )
    mixed_precision: str = recipe_setting("mixed_precision")
    cpu_dropout: str = recipe_setting("cpu_dropout")
    save_every: int = recipe_setting("save_every")
    log_every: int = recipe_setting("log_every")
    progress: bool = recipe_setting("progress")

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
