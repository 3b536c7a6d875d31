"""The settings of a TLM or TARTAN run, declared once (`TLMDeclared`): type, default, range or choices, help, and
the flag that sets each. `electra tlm train` and `electra tartan` build their flags from here, and
`electra.tlm.settings.TLMSettings` (these fields, plus the objective registry's check) checks them. Light to import:
the command line reads it before any model code loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from electra.core.errors import UserError
from electra.core.settings import (
    COUNT,
    DECAY,
    NON_NEGATIVE,
    NOT_NEGATIVE_COUNT,
    POSITIVE,
    SEED_RANGE,
    Range,
    check_declared,
    setting,
)
from electra.tlm.tasks import Column

TASK_ONLY = "none"  # the task-only baseline: no LM objective
WEIGHTINGS = ("tlm", "uniform", "meta")  # how stage 1 weighs its terms (electra.tlm.tartan)
METRICS = ("macro_f1", "accuracy")  # the dev metrics a run can keep its best state by
# ρ1 counts the retrieved batches interleaved with each task batch: a whole number (a fraction cannot be
# interleaved), 0 for none.
RETRIEVED_BATCHES: Range = (lambda v: hasattr(v, "__index__") and v >= 0, "be a whole number, at least 0")


@dataclass
class TLMDeclared:
    """Every setting of a run, checked once as it is built (from flags or from Python), refused in one line: a
    negative rate trains the wrong way, a zero one not at all, a zero count runs nothing. The code that trains
    trusts these values and checks nothing again."""

    task_train: str = field(metadata={"help": "task training file"})
    task_dev: str = field(
        metadata={"help": "task validation file: dev evaluations, early stopping (and META-TARTAN's g_meta)"}
    )
    task_test: str = field(metadata={"help": "task test file, scored with the kept state"})
    out: str = field(metadata={"help": "output folder"})
    retrieved: str | None = setting(
        None, "the `tlm retrieve --out` folder (or any corpus)", flags=("--retrieved",)
    )
    objective: str = setting(
        "electra",
        "LM objective: any registered one (`electra pretrain --help` lists them), or 'none' for the task-only "
        "baseline trained from scratch",
        flags=("--objective",),
    )
    size: str | None = setting(
        None,
        "model size preset (tiny, mini, small, base, large); default: tiny, or --init-from's own size",
        flags=("--size",),
    )
    config_file: str | None = setting(
        None, "JSON config file layered over the size", flags=("--config",), metavar="CONFIG"
    )
    overrides: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "config overrides (field: value) layered over the config file"},
    )
    rho1: int = setting(
        3, "retrieved (external) batches per task batch", within=RETRIEVED_BATCHES, flags=("--rho1",)
    )
    rho2: float = setting(
        20.0, "weight of the LM loss on task (internal) data", within=NON_NEGATIVE, flags=("--rho2",)
    )
    batch_size: int | None = setting(
        None,
        "task batch size (retrieved and auxiliary batches match it)",
        within=COUNT,
        flags=("--batch-size",),
    )
    steps: int | None = setting(
        None,
        "stage-1 (joint training) steps (default: from --flops-budget, else the size's max_steps)",
        within=COUNT,
        flags=("--steps",),
    )
    flops_budget: float | None = setting(
        None, "stop stage 1 (joint training) after this many FLOPs", within=COUNT, flags=("--flops-budget",)
    )
    finetune_epochs: int = setting(
        3,
        "stage-2 epochs on the task alone, after the joint training; 0 for none",
        within=NOT_NEGATIVE_COUNT,
        flags=("--finetune-epochs",),
    )
    finetune_lr: float = setting(
        1e-4, "stage-2 peak learning rate", within=POSITIVE, flags=("--finetune-lr",)
    )
    finetune_layer_decay: float = setting(
        0.8, "stage-2 layer-wise learning-rate decay", within=DECAY, flags=("--finetune-layer-decay",)
    )
    finetune_batch_size: int = setting(
        32, "stage-2 batch size", within=COUNT, flags=("--finetune-batch-size",)
    )
    eval_batch_size: int = setting(128, "dev and test batch size", within=COUNT)
    vocab: str | None = setting(
        None,
        "WordPiece vocab.txt; with --init-from it must match that vocabulary (default: --init-from's, else one "
        "trained on the retrieved corpus)",
        flags=("--vocab",),
    )
    text_columns: Sequence[Column] | None = field(
        default=None, metadata={"help": "text column name(s) or 0-based index(es); default: from the file"}
    )
    label_column: Column | None = field(
        default=None, metadata={"help": "label column name or 0-based index; default: from the file"}
    )
    header: bool | None = field(
        default=None, metadata={"help": "does the TSV/CSV have a header (None: guess)"}
    )
    task_format: str | None = field(
        default=None, metadata={"help": "tsv, csv or jsonl; default: from the suffix"}
    )
    seed: int = setting(42, "random seed", within=SEED_RANGE, flags=("--seed",))
    cache_dir: str | None = setting(None, "where packed LM examples are cached", flags=("--cache-dir",))
    progress: bool = setting(True, "progress bars")
    save_every: int = setting(
        0,
        "checkpoint each stage every N updates, for --resume; 0: never",
        within=NOT_NEGATIVE_COUNT,
        flags=("--save-every",),
    )
    resume: bool = setting(False, "continue from the checkpoints in --out", flags=("--resume",))
    init_from: str | None = setting(
        None,
        "start from this checkpoint (its shape and vocabulary) instead of scratch",
        flags=("--init-from",),
    )
    weighting: str = setting(
        "tlm",
        "how stage 1 weighs its terms: uniform (MT-TARTAN), meta (META-TARTAN: learned), or tlm (TLM's: rho2 on the "
        "task texts' LM loss)",
        choices=WEIGHTINGS,
        flags=("--weighting",),
    )
    meta_lr: float = setting(
        0.1, "META-TARTAN's step size η for the weights", within=POSITIVE, flags=("--meta-lr",)
    )
    meta_head_steps: int = setting(
        1, "SGD steps fitting φ* per training step", within=COUNT, flags=("--meta-head-steps",)
    )
    meta_head_lr: float = setting(0.1, "SGD rate fitting φ*", within=POSITIVE, flags=("--meta-head-lr",))
    learning_rate: float | None = setting(
        None, "stage-1 peak learning rate", within=POSITIVE, flags=("--learning-rate",)
    )  # None: the model config's
    eval_every: int = setting(
        0,
        "stage-1 dev evaluation every N steps, keeping the best state; 0: none",
        within=NOT_NEGATIVE_COUNT,
        flags=("--eval-every",),
    )
    patience: int | None = setting(
        None, "stop stage 1 after N dev evaluations without a gain", within=COUNT, flags=("--patience",)
    )
    metric: str = setting(
        "macro_f1", "dev metric the best state is kept by", choices=METRICS, flags=("--metric",)
    )
    balance_losses: bool = setting(
        False,
        "divide every stage-1 term by its running mean before weighting (electra.tlm.tartan.LossScales)",
    )

    def __post_init__(self) -> None:
        """The choices in the words the flags use (`--weighting 'sum' is not one of ...`), every field against its
        declaration, then the rules between fields."""
        if self.weighting not in WEIGHTINGS:
            raise UserError(f"--weighting {self.weighting!r} is not one of {', '.join(WEIGHTINGS)}.")
        if self.metric not in METRICS:
            raise UserError(f"--metric {self.metric!r} is not macro_f1 or accuracy.")
        check_declared(self, "")
        if self.patience is not None and not self.eval_every:
            raise UserError(
                "--patience counts dev evaluations, and --eval-every 0 makes none; give --eval-every N or drop "
                "--patience."
            )
