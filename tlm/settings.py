"""The settings of a TLM or TARTAN run (`TLMSettings`) and the model config they resolve to (`run_config`).

This is the boundary: `TLMSettings` checks every setting once, as it is built (from flags or from Python), and
refuses a bad one in one line. The code that trains (`electra.tlm.train` and the modules it runs) trusts what it
is given and checks nothing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from electra.core.config import TASK_AWARE_RANGES, PretrainConfig, check_ranges
from electra.core.errors import UserError
from electra.objectives import build_config, objective_names
from electra.tlm.tartan import WEIGHTINGS
from electra.tlm.tasks import Column, TaskExample, read_task_file
from electra.training.continued import checkpoint_shape, preset_of

TASK_ONLY = "none"  # the task-only baseline: no LM objective
METRICS = ("macro_f1", "accuracy")  # the dev metrics a run can keep its best state by


@dataclass
class TLMSettings:
    task_train: str
    task_dev: str
    task_test: str
    out: str
    retrieved: str | None = None  # the `electra tlm retrieve --out` folder (or any corpus path)
    objective: str = "electra"
    size: str | None = None  # a size preset; None: --init-from's own size, else tiny
    config_file: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    rho1: int = 3
    rho2: float = 20.0
    batch_size: int | None = None  # task batch; external batches match it (default: the size's batch)
    steps: int | None = None  # stage-1 steps; default from --flops-budget, else the size's max_steps
    flops_budget: float | None = None  # stage-1 training FLOPs
    finetune_epochs: int = 3
    finetune_lr: float = 1e-4
    finetune_layer_decay: float = 0.8
    finetune_batch_size: int = 32
    eval_batch_size: int = 128
    vocab: str | None = None
    text_columns: Sequence[Column] | None = None
    label_column: Column | None = None
    header: bool | None = None
    task_format: str | None = None
    seed: int = 42
    cache_dir: str | None = None
    progress: bool = True
    save_every: int = 0  # checkpoint each stage every N updates (0: never)
    resume: bool = False  # continue from OUT/stage1 and OUT/stage2 checkpoints
    # Start from this checkpoint (its shape and tokenizer) instead of from scratch.
    init_from: str | None = None
    weighting: str = "tlm"  # tlm | uniform (MT-TARTAN) | meta (META-TARTAN): how stage 1 weighs its terms
    meta_lr: float = 0.1  # META-TARTAN's η
    meta_head_steps: int = 1  # SGD steps fitting φ* per training step
    meta_head_lr: float = 0.1
    learning_rate: float | None = None  # stage-1 peak learning rate (default: the config's)
    eval_every: int = 0  # stage-1 dev evaluations every N steps, keeping the best (0: none)
    patience: int | None = None  # stop stage 1 after this many evaluations without a gain
    metric: str = "macro_f1"  # dev metric for keeping the best state: macro_f1 | accuracy
    # Divide every stage-1 term by its running mean before weighting (electra.tlm.tartan.LossScales).
    balance_losses: bool = False

    def __post_init__(self) -> None:
        """Refuse, in one line, a setting the run cannot use: a rate or count outside its range
        (`TASK_AWARE_RANGES`: a negative rate trains the wrong way, a zero one not at all), or a name that is not
        one of its choices. Checked here once, so the training code below relies on these values."""
        check_ranges(self, TASK_AWARE_RANGES)
        objectives = (*objective_names(), TASK_ONLY)
        if self.objective not in objectives:
            raise UserError(f"--objective {self.objective!r} is not one of {', '.join(objectives)}.")
        if self.weighting not in WEIGHTINGS:
            raise UserError(f"--weighting {self.weighting!r} is not one of {', '.join(WEIGHTINGS)}.")
        if self.metric not in METRICS:
            raise UserError(f"--metric {self.metric!r} is not macro_f1 or accuracy.")

    def read_split(self, path: str) -> list[TaskExample]:
        """A task split read with these settings' columns, header and format."""
        return read_task_file(
            path,
            text_columns=self.text_columns,
            label_column=self.label_column,
            header=self.header,
            fmt=self.task_format,
        )


def run_config(settings: TLMSettings) -> tuple[TLMSettings, PretrainConfig]:
    """The settings with their size resolved (the one `init_from` was built as, tiny without one) and the model
    config the run trains: read here once, so that ISS can check a layer against the model's shape before it
    spends the reference run."""
    lm_objective = settings.objective if settings.objective != TASK_ONLY else "electra"
    overrides = {**settings.overrides, "objective": lm_objective}
    if settings.size is None:
        found = (
            preset_of(settings.init_from)
            if settings.init_from and Path(settings.init_from).is_dir()
            else None
        )
        settings = replace(settings, size=found or "tiny")
    if settings.init_from is not None:  # a path that is no folder is refused by checkpoint_shape
        overrides = checkpoint_shape(
            settings.init_from, {**overrides, "init_from": settings.init_from}, settings.size
        )
    config = build_config(settings.size, settings.config_file, overrides)
    if settings.learning_rate is not None:
        config.learning_rate = settings.learning_rate
    return settings, config
