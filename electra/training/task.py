"""What a task plugs into the engine (`electra.training.engine`): the `Task` it trains, the `TrainArgs` that say how,
the `EarlyStopping` rule an evaluation is watched by, and the `TrainResult` a fit returns.

A task supplies only what is its own: the model, its batches (from any step, so a resumed run sees the data an
uninterrupted one would), how a batch becomes a loss and metrics, and optionally how to evaluate, how many tokens
and FLOPs a step costs, and any state of its own that a checkpoint must keep. `shuffled_epochs` is the batches a
fine-tuning task hands over.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from electra.core.outputs import StepOutput
from electra.training.optim import layerwise_lr_groups, parameter_groups
from electra.training.run_log import default_report_to


@dataclass
class EarlyStopping:
    """Watch one evaluation metric: remember the best state, stop after `patience` evaluations without a gain."""

    metric: str
    mode: str = "max"  # max | min
    patience: int | None = None  # None: never stop early, only keep the best state
    restore_best: bool = True  # load the best state's weights when training ends
    evaluate_at_start: bool = False  # the starting weights compete too (step 0)

    def better(self, value: float, best: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        if best is None:
            return True
        return value > best if self.mode == "max" else value < best


@dataclass
class TrainArgs:
    """How to train, independent of what is trained."""

    max_steps: int
    learning_rate: float
    warmup_steps: int = 0
    schedule: str = "linear"  # electra.training.optim.lr_schedule: linear | reference
    weight_decay: float = 0.0
    layer_decay: float | None = None  # layer-wise learning-rate decay (fine-tuning); None: one rate
    original_layer_decay: bool = False  # the reference code's layer-wise rates (electra.training.optim)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_epsilon: float = 1e-6
    max_grad_norm: float = 1.0  # 0: no clipping
    gradient_accumulation_steps: int = 1
    compile: bool = False
    compile_mode: str = "default"  # torch.compile's mode (reduce-overhead: CUDA graphs)
    output_dir: Path | None = None  # logs and checkpoints go here; None: neither
    log_every: int = 50
    save_every: int = 0  # 0: no periodic checkpoints (nor the final one)
    keep_checkpoints: int = 2
    flops_budget: float | None = None  # stop at the first update that spends it
    # seconds of training in this invocation: stop (and save) at the first log step past it. Under schedule_clock
    # "time" it is the whole run's (resumptions included), and the decay ends there
    time_budget: float | None = None
    schedule_clock: str = "steps"  # electra.training.optim.schedule_on_clock: steps | time
    eval_every: int = 0  # 0: evaluate only at the end (when the task can evaluate)
    early_stopping: EarlyStopping | None = None
    progress: bool = True
    description: str = "training"
    report_to: tuple[str, ...] = field(default_factory=default_report_to)  # csv, tensorboard, wandb
    cpu_dropout: str = "lanes"  # electra.nn.dropout's cheap masks on a CPU ("torch": torch's own)
    # a resume on another number of processes than wrote the checkpoint (`--elastic`): the checkpoint's random
    # streams are per process, so each process draws a fresh one from (seed, step, process) instead
    elastic: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        """Nothing is checked here: every value was checked where the settings came in (PretrainConfig, the
        fine-tuning settings, TLMSettings: counts at least 1, rates in range, schedule and clock among their
        choices), which is where a bad value gets its one line; the steps a recipe computes are at least 1."""
        if self.output_dir is not None:
            self.output_dir = Path(self.output_dir)


@dataclass
class TrainResult:
    step: int
    stop_reason: str  # max_steps | flops_budget | time_budget | early_stopping
    metrics: dict[str, float]  # the last logged training window (namespace stripped)
    flops: float
    seconds: float
    evaluations: list[dict[str, float]] = field(default_factory=list)
    best: dict[str, Any] | None = None  # {"step", "metric", "value", "metrics"} under early stopping


class Task:
    """What a training run trains. Subclasses set `model` and implement `batches` and `step`."""

    model: nn.Module
    progress_keys: dict[str, str] = {}  # metric -> short name shown on the progress bar
    # Matmul FLOPs one counted token really executes in training (a measured forward plus a backward of twice it),
    # set by `before_training` at the latest; the engine then logs MFU against the device's measured matmul peak
    executed_flops_per_token: float | None = None

    def parameter_groups(self, model: nn.Module, args: TrainArgs) -> list[dict[str, Any]]:
        """Optimizer groups; the default applies the one no-decay rule, layer-wise when `args.layer_decay`."""
        if args.layer_decay is not None:
            return layerwise_lr_groups(
                model, args.learning_rate, args.layer_decay, args.weight_decay, args.original_layer_decay
            )
        return parameter_groups(model, args.learning_rate, args.weight_decay)

    def batches(self, start: int) -> Iterator[Any]:
        """Host batches forever, from micro-batch number `start` (0 for a fresh run) in a fixed order."""
        raise NotImplementedError

    def step(self, model: nn.Module, batch: Any) -> StepOutput:
        """Loss (and detached metrics) of one micro-batch already on the device; called under autocast."""
        raise NotImplementedError

    def tokens(self, batch: Any) -> int:
        """Tokens a host batch holds, for tokens/s (0 when it does not matter)."""
        return 0

    def flops(self, micro_batches: list[Any]) -> float | None:
        """Training FLOPs of one update over these host micro-batches; None turns the FLOP meter off."""
        return None

    def evaluate(self, model: nn.Module) -> dict[str, float] | None:
        """Metrics on held-out data (the unwrapped model, in eval mode); None when the task has none."""
        return None

    def before_training(self, model: nn.Module, resumed: bool) -> None:
        """Called once with the unwrapped model on its device, right before the first update."""

    def state_dict(self) -> dict[str, Any]:
        """JSON-able task state a checkpoint must keep beyond weights, optimizer and RNG."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def shuffled_epochs(dataset: Any, batch_size: int, seed: int, collate: Any, accelerator: Any, start: int = 0):
    """Batches of `dataset` reshuffled every epoch by a generator seeded with `seed` (so the order is a function
    of seed and step), sharded over processes by Accelerate, forever, from batch number `start`: what a
    fine-tuning task's `batches` returns. Skipping replays the order without training on it."""
    generator = torch.Generator().manual_seed(seed)
    loader = accelerator.prepare(
        DataLoader(dataset, batch_size=batch_size, shuffle=True, collate_fn=collate, generator=generator)
    )
    skip = start
    while True:
        for batch in loader:
            if skip:
                skip -= 1
                continue
            yield batch
