"""The ELECTRA paper's fine-tuning recipe, shared by every task: the learning rate and layer-wise decay by model
size, the seeds a run may take, and the engine arguments of one seed's run (its settings are declared in
`electra.finetune.settings`).

The paper (Table 5.2 and its appendix) fine-tunes with AdamW (epsilon 1e-6, no weight decay), 10% warmup then
linear decay, batch 32, layer-wise learning-rate decay, and a learning rate chosen by the model's size. GLUE, the
multi-task student, `electra tag` and the probes' recipe all read these declarations, so a flag is described and
checked alike wherever it appears.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.settings import SEED_RANGE, spelled
from electra.training.optim import warmup_steps_of
from electra.training.task import TrainArgs

# (largest hidden size, name, learning rate, layer decay): the paper's per-size fine-tuning settings.
SIZE_DEFAULTS = ((256, "small", 3e-4, 0.8), (768, "base", 1e-4, 0.8), (math.inf, "large", 5e-5, 0.9))


def size_defaults(hidden_size: int) -> tuple[str, float, float]:
    """(size name, learning rate, layer decay) for a model of this hidden size."""
    return next((name, lr, decay) for limit, name, lr, decay in SIZE_DEFAULTS if hidden_size <= limit)


def rates(settings: Any, hidden_size: int) -> tuple[float, float]:
    """(learning rate, layer decay) as run: the settings' own, else the paper's for the model's size."""
    _, size_lr, size_decay = size_defaults(hidden_size)
    return settings.learning_rate or size_lr, settings.layer_decay or size_decay


def resolved_settings(settings: Any, hidden_size: int) -> dict[str, Any]:
    """The settings (a dataclass) as run: the learning rate and layer decay of the model's size where none was
    given, and the size's name."""
    learning_rate, layer_decay = rates(settings, hidden_size)
    size = size_defaults(hidden_size)[0]
    return asdict(settings) | {"learning_rate": learning_rate, "layer_decay": layer_decay, "size": size}


def check_seeds(seeds: Sequence[int]) -> None:
    """At least one seed, each once, each one numpy accepts: one line otherwise, before any work (a seed given twice
    is the same run twice, counted twice in the median)."""
    if not seeds:
        raise UserError(f"{spelled(None, 'seeds', '--seeds')} must be at least 1.")
    repeated = next((seed for index, seed in enumerate(seeds) if seed in seeds[:index]), None)
    if repeated is not None:
        raise UserError(f"seed {repeated} is given twice in seeds {list(seeds)}; give each seed once.")
    in_range, wording = SEED_RANGE  # the range a declared seed setting is checked by
    outside = next((seed for seed in seeds if not in_range(seed)), None)
    if outside is not None:
        raise UserError(
            f"seed {outside} must {wording}; choose "
            f"{spelled(None, 'seeds', '--seed and --seeds')} so that every seed stays in it."
        )


def total_updates(settings: Any, examples: int, per_process: int, processes: int, epochs: float) -> int:
    """Updates of one seed's run: `settings.max_steps`, else `epochs` passes over `examples`."""
    steps_per_epoch = math.ceil(examples / (per_process * processes))
    return settings.max_steps or max(1, round(epochs * steps_per_epoch))


def finetune_args(
    settings: Any,
    total: int,
    learning_rate: float,
    layer_decay: float,
    run_dir: Path | None,
    description: str,
) -> TrainArgs:
    """The engine's arguments for a fine-tuning run of `total` updates under the recipe (`settings` declares the
    `electra.finetune.settings.RecipeSettings` fields): the reference schedule, warmup as a fraction of the run, checkpoints only when the run
    has a folder."""
    return TrainArgs(
        max_steps=total,
        learning_rate=learning_rate,
        warmup_steps=warmup_steps_of(settings.warmup_fraction, total),
        schedule="reference",
        weight_decay=settings.weight_decay,
        layer_decay=layer_decay,
        original_layer_decay=settings.original_off_by_one,
        adam_epsilon=settings.adam_epsilon,
        max_grad_norm=settings.max_grad_norm,
        output_dir=run_dir,
        log_every=settings.log_every,
        save_every=settings.save_every if run_dir is not None else 0,
        progress=settings.progress,
        description=description,
        cpu_dropout=settings.cpu_dropout,
    )
