"""SQuAD fine-tuning's settings, declared once: `electra squad`'s flags and their checks both come from here
(light to import: the command line reads it before any model code loads)."""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field

from electra.core.errors import UserError
from electra.core.settings import (
    COUNT,
    DECAY,
    NON_NEGATIVE,
    NOT_NEGATIVE_COUNT,
    POSITIVE,
    SEED_RANGE,
    check_declared,
    setting,
    spelling,
)
from electra.finetune.settings import recipe_setting
from electra.squad.features import FeatureSettings


@dataclass
class SquadSettings:
    """What `electra squad` and `electra.finetune_squad` train and evaluate with. Checked when made, so before
    `--overwrite` deletes an earlier run and before a model loads: every count is at least 1, rates and fractions
    within their ranges, the windows leave room for context, a no-answer threshold is a finite number."""

    model: str = setting(
        MISSING,
        "checkpoint dir (HF layout + tokenizer), or a fine-tuned SQuAD model dir when only --eval is given",
        flags=("--model",),
        required=True,
    )
    output: str = field(metadata={"help": "output directory"})
    tokenizer: str | None = setting(
        None, "tokenizer directory, when the checkpoint has none (default: --model)", flags=("--tokenizer",)
    )
    version: str = setting("1.1", "SQuAD version", choices=("1.1", "2.0"), flags=("--version",))
    train: str | None = setting(None, "training JSON in the official format", flags=("--train",))
    eval: str | None = setting(None, "evaluation JSON in the official format", flags=("--eval",))
    epochs: float = setting(2.0, "training epochs (paper: 2)", within=POSITIVE, flags=("--epochs",))
    max_steps: int | None = recipe_setting("max_steps")
    learning_rate: float = setting(
        1e-4,
        "peak rate (paper: 3e-4 Small, 1e-4 Base, 5e-5 Large)",
        within=POSITIVE,
        flags=("--learning-rate",),
    )
    layer_decay: float = setting(
        0.8, "layer-wise decay (paper: 0.8 Small/Base, 0.9 Large)", within=DECAY, flags=("--layer-decay",)
    )
    batch_size: int = setting(32, "training batch", within=COUNT, flags=("--batch-size",))
    eval_batch_size: int = setting(64, "evaluation batch", within=COUNT, flags=("--eval-batch-size",))
    warmup_fraction: float = recipe_setting("warmup_fraction")
    weight_decay: float = recipe_setting("weight_decay", 0.01)
    adam_epsilon: float = recipe_setting("adam_epsilon")
    max_grad_norm: float = recipe_setting("max_grad_norm")
    max_seq_length: int = setting(384, "tokens per window", within=COUNT, flags=("--max-seq-length",))
    doc_stride: int = setting(128, "tokens between window starts", within=COUNT, flags=("--doc-stride",))
    max_query_length: int = setting(64, "question tokens kept", within=COUNT, flags=("--max-query-length",))
    head: str = setting(
        "xlnet",
        "xlnet: ELECTRA's head (end conditioned on start, beam search); plain: independent start/end",
        choices=("xlnet", "plain"),
        flags=("--head",),
    )
    answerable: bool | None = setting(None, "answerability classifier (None: on for 2.0, off for 1.1)")
    answerable_weight: float = setting(0.5, "weight of the answerability loss", within=NON_NEGATIVE)
    beam_size: int = setting(20, "top-k starts and ends at inference", within=COUNT, flags=("--beam-size",))
    head_inner_size: int = setting(512, "the head's gelu layer (ELECTRA: 512)", within=COUNT)
    n_best_size: int = setting(20, "answers kept per question", within=COUNT, flags=("--n-best-size",))
    max_answer_length: int = setting(30, "in tokens", within=COUNT, flags=("--max-answer-length",))
    na_threshold: float | None = setting(
        None,
        "fixed no-answer threshold (2.0); default: the F1-best one on the evaluated set",
        flags=("--na-threshold",),
    )
    seed: int = setting(42, "random seed", within=SEED_RANGE, flags=("--seed",))
    mixed_precision: str = recipe_setting("mixed_precision")
    cpu_dropout: str = recipe_setting("cpu_dropout")
    cache_dir: str | None = setting(None, "feature cache (default: OUTPUT/cache)", flags=("--cache-dir",))
    max_train_examples: int | None = setting(
        None, "use only the first N training questions", within=COUNT, flags=("--max-train-examples",)
    )
    progress: bool = recipe_setting("progress")
    original_off_by_one: bool = recipe_setting("original_off_by_one")
    save_every: int = setting(
        0,
        "checkpoint every N updates under OUTPUT/train/ (0: never)",
        within=NOT_NEGATIVE_COUNT,
        flags=("--save-every",),
    )
    resume: bool = setting(
        False, "continue training from the latest checkpoint in OUTPUT/train/", flags=("--resume",)
    )
    log_every: int = setting(20, "updates between log rows", within=COUNT)

    def __post_init__(self) -> None:
        check_declared(self, "")
        if self.na_threshold is not None and not math.isfinite(self.na_threshold):
            raise UserError(
                f"na_threshold must be a finite number, got {self.na_threshold} (a large one, like 1e9, never "
                "predicts no answer)."
            )
        if self.train is None and self.eval is None:
            raise UserError(f"nothing to do: pass {squad('train')} FILE, {squad('eval')} FILE or both.")
        self.feature_settings()  # the windows' rule between lengths, checked as the feature settings are made

    def feature_settings(self) -> FeatureSettings:
        return FeatureSettings(self.max_seq_length, self.doc_stride, self.max_query_length)


squad = spelling(SquadSettings)  # --train on the command line, train in Python
