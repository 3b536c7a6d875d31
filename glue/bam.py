"""The training of a multi-task student (BAM; Clark's dissertation, chapter 3): which task each example of a batch
is drawn from, teacher annealing and its loss, and the student's task for the engine (`electra.glue.multitask`
runs it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from electra.core.outputs import StepOutput
from electra.data.packing import pad_batch
from electra.glue.inputs import (
    TaskData,
)
from electra.glue.model import REGRESSION_SCALE, MultiTaskModel
from electra.glue.settings import MultitaskSettings
from electra.glue.tasks import TaskSpec
from electra.training.task import Task


# ---- the schedule and the loss --------------------------------------------------------------------------------
def task_probabilities(sizes: Sequence[int], exponent: float) -> np.ndarray:
    """P(task τ) ∝ |D_τ|^exponent (exponent 0: uniform over tasks; 1: proportional to size)."""
    weights = np.asarray(sizes, dtype=np.float64) ** exponent
    return weights / weights.sum()


def example_order(
    sizes: Sequence[int], batch_size: int, seed: int, exponent: float, sampling: bool = True
) -> Iterator[list[tuple[int, int]]]:
    """Batches of (task index, example index), forever, a function of the arguments alone (a resumed run replays
    it). With `sampling`, each example's task is drawn ∝ size^exponent and the example is the next of that task's
    stream, reshuffled whenever it runs out; without, all examples are shuffled together once per epoch."""
    rng = np.random.default_rng(seed)
    if not sampling:
        pool = [(t, i) for t, n in enumerate(sizes) for i in range(n)]
        pending: list[tuple[int, int]] = []
        while True:
            while len(pending) < batch_size:
                pending += [pool[j] for j in rng.permutation(len(pool))]
            yield pending[:batch_size]
            pending = pending[batch_size:]
    probabilities = task_probabilities(sizes, exponent)
    streams = [np.random.default_rng([seed, t]) for t in range(len(sizes))]
    orders: list[list[int]] = [[] for _ in sizes]
    while True:
        batch = []
        for task in rng.choice(len(sizes), size=batch_size, p=probabilities):
            if not orders[task]:
                orders[task] = streams[task].permutation(sizes[task]).tolist()
            batch.append((int(task), orders[task].pop()))
        yield batch


def annealed_lambda(step: int, total_steps: int, fixed: float | None = None) -> float:
    """The weight of the gold label at update `step` (0-based) of `total_steps`: step / total, or `fixed`."""
    if fixed is not None:
        return float(fixed)
    return min(1.0, step / max(1, total_steps))


def annealed_loss(
    spec: TaskSpec,
    outputs: torch.Tensor,
    labels: torch.Tensor,
    teacher: torch.Tensor | None,
    lam: float,
) -> torch.Tensor:
    """The summed loss of one task's examples against λ·gold + (1 − λ)·teacher (gold alone without a teacher):
    cross-entropy to that mixed distribution for classification, squared error for (scaled) regression."""
    if spec.is_regression:
        target = labels.float()
        if teacher is not None:
            target = lam * target + (1.0 - lam) * teacher.float()
        return ((outputs.float() - target) ** 2).sum()
    target = nn.functional.one_hot(labels.long(), spec.num_labels).float()
    if teacher is not None:
        target = lam * target + (1.0 - lam) * torch.softmax(teacher.float(), dim=-1)
    return -(target * torch.log_softmax(outputs.float(), dim=-1)).sum()


# ---- the task the engine trains -------------------------------------------------------------------------------
@dataclass
class StudentData:
    """One task's training examples for the student: encoded features, scaled labels, teacher outputs aligned."""

    spec: TaskSpec
    data: TaskData
    labels: np.ndarray  # class indices, or scores / REGRESSION_SCALE
    teacher: np.ndarray | None  # [n, labels] logits, or [n] scores / REGRESSION_SCALE


def student_data(data: TaskData, teacher_outputs: np.ndarray | None) -> StudentData:
    spec = data.spec
    labels = np.asarray(
        [f["labels"] for f in data.train], dtype=np.float32 if spec.is_regression else np.int64
    )
    if spec.is_regression:
        labels = labels / REGRESSION_SCALE
        if teacher_outputs is not None:
            teacher_outputs = teacher_outputs.reshape(-1) / REGRESSION_SCALE
    return StudentData(spec, data, labels, teacher_outputs)


class MultiTaskTraining(Task):
    """The student's training for the engine: batches of mixed tasks (with their update number), the annealed
    loss, and the padded shapes it trained at (for the FLOP count)."""

    progress_keys = {"lambda": "λ"}

    def __init__(
        self,
        model: MultiTaskModel,
        tasks: list[StudentData],
        multi: MultitaskSettings,
        total_steps: int,
        batch_size: int,
        seed: int,
        pad_token_id: int,
        accelerator,
    ):
        self.model, self.tasks, self.multi = model, tasks, multi
        self.total_steps, self.batch_size, self.seed = total_steps, batch_size, seed
        self.pad_token_id, self.accelerator = pad_token_id, accelerator
        self.has_teachers = all(t.teacher is not None for t in tasks)
        self.train_shapes: Counter = Counter()

    def lam(self, step: int) -> float:
        """λ of update `step`: annealed (or fixed) with teachers, 1 (the gold label) without."""
        if not self.has_teachers:
            return 1.0
        return annealed_lambda(step, self.total_steps, self.multi.fixed_lambda)

    def batches(self, start: int) -> Iterator[dict[str, Any]]:
        """The global batch of update `step` is drawn alike in every process; each takes its share."""
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        sizes = [len(t.data.train) for t in self.tasks]
        order = example_order(
            sizes, self.batch_size, self.seed, self.multi.task_exponent, self.multi.task_sampling
        )
        for step, drawn in enumerate(order):
            if step >= start:
                yield self.collate(drawn[rank::world], step)

    def collate(self, drawn: list[tuple[int, int]], step: int) -> dict[str, Any]:
        """One group per task present, in task order, padded to its own longest sequence."""
        groups = []
        for index, task in enumerate(self.tasks):
            rows = [i for t, i in drawn if t == index]
            if not rows:
                continue
            group: dict[str, Any] = {
                "task": task.spec.name,
                **pad_batch([task.data.train[i] for i in rows], self.pad_token_id),
            }
            group["labels"] = torch.from_numpy(task.labels[rows])
            if task.teacher is not None:
                group["teacher"] = torch.from_numpy(task.teacher[rows])
            groups.append(group)
        return {"groups": groups, "step": step, "size": len(drawn)}

    def step(self, model, batch) -> StepOutput:
        lam = self.lam(int(batch["step"]))
        outputs = model(batch["groups"])
        loss = outputs[0].new_zeros((), dtype=torch.float32)
        present = set()
        for group, output in zip(batch["groups"], outputs):
            spec = self.model.specs[group["task"]]
            present.add(spec.name)
            loss = loss + annealed_loss(spec, output, group["labels"], group.get("teacher"), lam)
            self.train_shapes[group["input_ids"].shape[1]] += (
                group["input_ids"].shape[0] * self.accelerator.num_processes
            )
        loss = loss / batch["size"]
        # every head takes part in every step (data-parallel training needs a gradient for each parameter)
        idle = [
            p for name, head in self.model.heads.items() if name not in present for p in head.parameters()
        ]
        if idle:
            loss = loss + 0.0 * sum(p.sum() for p in idle)
        return StepOutput(loss, {"loss": loss.detach(), "lambda": torch.tensor(lam, device=loss.device)})

    def tokens(self, batch) -> int:
        return sum(group["input_ids"].numel() for group in batch["groups"])

    def state_dict(self) -> dict:
        return {"train_shapes": {str(k): v for k, v in self.train_shapes.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.train_shapes = Counter({int(k): v for k, v in state.get("train_shapes", {}).items()})
