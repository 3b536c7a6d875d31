"""Stage 2: the classifier fine-tuned on the task alone, evaluated on dev after every epoch, the best epoch kept."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from electra.core.config import PretrainConfig
from electra.core.outputs import StepOutput
from electra.tlm.evaluation import evaluate
from electra.tlm.model import FlopCounter
from electra.tlm.settings import TLMSettings
from electra.tlm.task_data import batches_forever
from electra.training.engine import Engine
from electra.training.optim import warmup_steps_of
from electra.training.task import EarlyStopping, Task, TrainArgs

logger = logging.getLogger(__name__)


class ClassifierTask(Task):
    """Stage 2's task for the engine: the classifier's own loss on the task's training rows; `plan` as
    `electra.tlm.joint.JointTask`'s, with stage 2's per-process `batch_size`."""

    def __init__(
        self,
        classifier: nn.Module,
        train_rows: list[dict],
        dev_rows: list[dict],
        plan: dict[str, Any],
        counter: FlopCounter,
    ):
        self.model, self.train_rows, self.dev_rows = classifier, train_rows, dev_rows
        self.plan, self.counter = plan, counter

    def batches(self, start: int) -> Any:
        p = self.plan
        return batches_forever(
            self.train_rows, p["batch_size"], p["seed"] + 2, p["collate"], p["rank"], p["world"], start
        )

    def step(self, model: nn.Module, batch: dict) -> StepOutput:
        loss = model(**batch).loss
        return StepOutput(loss, {"loss": loss.detach(), "task": loss.detach()})

    def tokens(self, batch: dict) -> int:
        return batch["input_ids"].numel()

    def flops(self, micro_batches: list[dict]) -> float:
        return (
            sum(self.counter.task_rate * b["input_ids"].numel() for b in micro_batches) * self.plan["world"]
        )

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        p = self.plan
        return evaluate(
            p["accelerator"], model, self.dev_rows, p["eval_batch_size"], p["collate"], p["num_labels"]
        )


@dataclass
class Stage2Result:
    """The dev scores after stage 1 and at the kept epoch (the same, and epoch 0, without stage 2), and the
    FLOPs stage 2 spent."""

    stage1_dev: dict[str, float]
    best_dev: dict[str, float]
    best_epoch: int
    flops: float  # 0 without stage 2


def stage2_args(
    settings: TLMSettings, config: PretrainConfig, output_dir: Path, steps: int, per_epoch: int
) -> TrainArgs:
    """Stage 2's optimizer (the `finetune_*` settings, with the config's weight decay and clipping) and its
    per-epoch dev evaluation, which starts from the stage-1 weights (epoch 0)."""
    return TrainArgs(
        max_steps=steps,
        learning_rate=settings.finetune_lr,
        warmup_steps=warmup_steps_of(0.1, steps),
        schedule="reference",
        weight_decay=config.weight_decay,
        layer_decay=settings.finetune_layer_decay,
        max_grad_norm=config.max_grad_norm,
        output_dir=output_dir,
        log_every=config.log_every,
        save_every=settings.save_every,
        eval_every=per_epoch,
        early_stopping=EarlyStopping(settings.metric, "max", evaluate_at_start=True),
        progress=settings.progress,
        description="TLM stage 2 (task)",
        cpu_dropout=config.cpu_dropout,
    )


def run_stage2(
    settings: TLMSettings,
    config: PretrainConfig,
    output_dir: Path,
    classifier: nn.Module,
    rows: dict[str, list[dict]],
    plan: dict[str, Any],
    counter: FlopCounter,
) -> Stage2Result:
    """Stage 2 trained (or continued, with `resume`) in `output_dir` for `finetune_epochs` epochs of `plan`'s
    batches, leaving `classifier` with its best dev epoch's weights; with no epochs, the stage-1 classifier's
    dev scores."""
    per_epoch = max(1, len(rows["train"]) // (plan["batch_size"] * plan["world"]))
    steps = per_epoch * settings.finetune_epochs
    if not (steps and settings.finetune_epochs > 0):
        dev = evaluate(
            plan["accelerator"],
            classifier,
            rows["dev"],
            plan["eval_batch_size"],
            plan["collate"],
            plan["num_labels"],
        )
        return Stage2Result(dev, dev, 0, 0)
    stage2 = Engine(stage2_args(settings, config, output_dir, steps, per_epoch), plan["accelerator"])
    task = ClassifierTask(classifier, rows["train"], rows["dev"], plan, counter)
    result = stage2.fit(task, stage2.resume_checkpoint(settings.resume, "stage 2"))
    stage1_dev = {k: v for k, v in result.evaluations[0].items() if k != "step"}
    for evaluation in result.evaluations[1:]:
        logger.info("stage 2 epoch %d: dev %s", evaluation["step"] // per_epoch, evaluation)
    return Stage2Result(stage1_dev, result.best["metrics"], result.best["step"] // per_epoch, result.flops)
