"""One GLUE fine-tuning run of one seed, the paper's recipe (its Table 5.2 / appendix: AdamW eps 1e-6, 10% warmup
then linear decay, no weight decay, batch 32, layer-wise LR decay, learning rate by model size, 10 epochs for RTE and
STS-B and 3 otherwise): train through the engine, score every dev set, predict the test sets, and count the FLOPs it
spent (`SeedRun`). `electra.glue.finetune` runs every seed of every task and assembles the report.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from accelerate.utils import set_seed
from torch.utils.data import DataLoader

from electra.core.outputs import StepOutput
from electra.finetune.models import load_encoder
from electra.finetune.recipe import finetune_args, rates, total_updates
from electra.finetune.results import read_seed_result
from electra.flops.analytic import finetune_flops as analytic_finetune_flops
from electra.glue.data import Collator
from electra.glue.inputs import TaskData
from electra.glue.metrics import task_scores
from electra.glue.model import GlueModel
from electra.glue.settings import FinetuneSettings
from electra.glue.tasks import TaskSpec
from electra.training.engine import Engine
from electra.training.optim import describe_lr_groups
from electra.training.processes import per_process_batch
from electra.training.task import Task, shuffled_epochs

logger = logging.getLogger(__name__)


LONG_TASKS = {"rte": 10, "stsb": 10}  # epochs; every other task trains 3


def paper_epochs(task: str) -> int:
    return LONG_TASKS.get(task, 3)


@dataclass
class SeedRun:
    seed: int
    metrics: dict[str, dict[str, float]]  # dev result name -> {metric: value}
    steps: int
    train_shapes: dict[int, int]  # padded length -> sequences trained at it (all processes)
    eval_shapes: dict[int, int]  # padded length -> sequences evaluated/predicted at it
    seconds: float
    test_predictions: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    flops: float = 0.0
    flops_method: str = ""
    train_logits: list | None = None  # outputs on the training set, dropout off (--save-train-logits)


def _predict(
    model,
    features: list[dict],
    collator: Collator,
    accelerator,
    batch_size: int,
    shapes: Counter | None = None,
) -> np.ndarray:
    """Logits for `features` in order (gathered over processes); counts padded batch shapes into `shapes`."""
    if shapes is not None:
        for start in range(0, len(features), batch_size):
            chunk = features[start : start + batch_size]
            shapes[max(len(f["input_ids"]) for f in chunk)] += len(chunk)

    loader = accelerator.prepare(
        DataLoader(features, batch_size=batch_size, shuffle=False, collate_fn=collator)
    )
    model.eval()
    outputs = []
    with torch.no_grad():
        for batch in loader:
            batch.pop("labels", None)
            _, logits = model(**batch)
            outputs.append(accelerator.gather_for_metrics(logits.float()).cpu())
    model.train()
    return torch.cat(outputs).numpy()


def _decide(spec: TaskSpec, logits: np.ndarray) -> np.ndarray:
    return logits if spec.is_regression else logits.argmax(-1)


class GlueSeedTask(Task):
    """One seed's fine-tuning for the engine: shuffled batches from a generator seeded per run (so a resumed run
    replays the same order), the task loss, and the padded shapes it trained at (for the FLOP count)."""

    def __init__(
        self, data: TaskData, model: GlueModel, collator: Collator, per_device: int, seed: int, accelerator
    ):
        self.model, self.data, self.collator = model, data, collator
        self.per_device, self.seed, self.accelerator = per_device, seed, accelerator
        self.train_shapes: Counter = Counter()

    def batches(self, start: int):
        return shuffled_epochs(
            self.data.train, self.per_device, self.seed, self.collator, self.accelerator, start
        )

    def step(self, model, batch) -> StepOutput:
        loss, _ = model(**batch)
        self.train_shapes[batch["input_ids"].shape[1]] += (
            batch["input_ids"].shape[0] * self.accelerator.num_processes
        )
        return StepOutput(loss, {"loss": loss.detach()})

    def tokens(self, batch) -> int:
        return batch["input_ids"].numel()

    def state_dict(self) -> dict:
        return {"train_shapes": {str(k): v for k, v in self.train_shapes.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.train_shapes = Counter({int(k): v for k, v in state.get("train_shapes", {}).items()})


def run_seed(
    data: TaskData,
    model_dir: str | Path,
    tokenizer,
    seed: int,
    settings: FinetuneSettings,
    accelerator,
    init_from: str | Path | None = None,
    show_groups: bool = False,
    run_dir: Path | None = None,
    resume: bool = False,
    predict_train: bool = False,
) -> tuple[SeedRun, GlueModel]:
    """One fine-tuning run: train, evaluate on every dev set, predict the test sets that were loaded (and, with
    `predict_train`, the training set: a teacher's outputs for `electra.glue.teachers`).

    With `run_dir`, its logs go there (metrics.csv, TensorBoard) and, with `settings.save_every`, checkpoints a
    `resume=True` call continues from."""
    spec = data.spec
    started = time.time()
    set_seed(seed)
    encoder = load_encoder(init_from or model_dir)
    model = GlueModel(encoder, spec.num_labels, spec.name, spec.labels)
    if init_from and (model.load_head_if_same_task(init_from) or model.load_multitask_head(init_from)):
        logger.info("%s: task layer loaded from %s", spec.name, init_from)
    lr, decay = rates(settings, encoder.config.hidden_size)
    collator = Collator(tokenizer.pad_token_id or 0, spec.is_regression)
    per_device = per_process_batch(settings.batch_size, accelerator.num_processes)
    epochs = settings.epochs if settings.epochs is not None else paper_epochs(spec.name)
    total = total_updates(settings, len(data.train), per_device, accelerator.num_processes, epochs)
    args = finetune_args(settings, total, lr, decay, run_dir, f"{spec.name} seed {seed}")
    task = GlueSeedTask(data, model, collator, per_device, seed, accelerator)
    if show_groups:
        accelerator.print(f"{spec.name}: {total} steps, learning rate per parameter group:")
        accelerator.print(describe_lr_groups(task.parameter_groups(model, args)))
    engine = Engine(args, accelerator)
    result = engine.fit(task, engine.resume_checkpoint(resume, f"{spec.name} seed {seed}"))

    eval_shapes: Counter = Counter()
    metrics = {}
    for name, features in data.dev.items():
        logits = _predict(model, features, collator, accelerator, settings.eval_batch_size, eval_shapes)
        metrics[name] = task_scores(spec, _decide(spec, logits), [f["labels"] for f in features])
    test_predictions = {}
    for stem, (ids, features) in data.test.items():
        logits = _predict(model, features, collator, accelerator, settings.eval_batch_size, eval_shapes)
        decided = _decide(spec, logits)
        if spec.is_regression:
            labels = [f"{min(5.0, max(0.0, float(v))):.3f}" for v in decided]
        else:
            labels = [spec.labels[int(v)] for v in decided]
        test_predictions[stem] = list(zip(ids, labels))
    train_logits = None
    if predict_train:
        train_logits = _predict(
            model, data.train, collator, accelerator, settings.eval_batch_size, eval_shapes
        ).tolist()
    unwrapped = accelerator.unwrap_model(model)
    flops, flops_method = finetune_flops(unwrapped, dict(task.train_shapes), dict(eval_shapes))
    run = SeedRun(
        seed,
        metrics,
        result.step,
        dict(task.train_shapes),
        dict(eval_shapes),
        time.time() - started,
        test_predictions,
        flops,
        flops_method,
        train_logits,
    )
    return run, unwrapped


def _seed_run(record: dict) -> SeedRun:
    """A seed's result as `write_seed_result` wrote it (JSON keys are strings; predictions are pairs)."""
    for key in ("train_shapes", "eval_shapes"):
        record[key] = {int(k): v for k, v in record[key].items()}
    record["test_predictions"] = {
        k: [tuple(pair) for pair in v] for k, v in record["test_predictions"].items()
    }
    run = SeedRun(**record)
    if not (isinstance(run.metrics, dict) and all(isinstance(m, dict) for m in run.metrics.values())):
        raise ValueError("no metrics")
    return run


def finished_seed(run_dir: Path | None) -> SeedRun | None:
    """A seed's result from an earlier (interrupted) invocation, when it finished (a damaged one: None, warned)."""
    return read_seed_result(run_dir, _seed_run)


def finetune_flops(
    model: GlueModel, train_shapes: dict[int, int], eval_shapes: dict[int, int]
) -> tuple[float, str]:
    """FLOPs of one fine-tuning run (training plus evaluation), from the padded batch shapes it really ran, in the
    paper's convention (`electra.flops.analytic.finetune_flops`: training charged as 2 x forward)."""
    config, labels = model.encoder.config, model.num_labels
    train = sum(
        analytic_finetune_flops(config, length, n, labels).train_flops for length, n in train_shapes.items()
    )
    evaluation = sum(
        analytic_finetune_flops(config, length, n, labels).forward_flops_per_sequence * n
        for length, n in eval_shapes.items()
    )
    return float(
        train + evaluation
    ), "electra.flops.analytic.finetune_flops (train 2x forward, plus eval forward)"
