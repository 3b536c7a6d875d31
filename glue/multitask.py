"""Multi-task GLUE with born-again distillation and teacher annealing (BAM; Clark's dissertation, chapter 3).

One student (`electra.glue.model.MultiTaskModel`: a shared encoder, one linear head per task) trains on every task
at once. Each example of a batch is drawn from task τ with probability ∝ |D_τ|^exponent (0.75; `--task-exponent`),
then from τ's own reshuffled stream, so a batch mixes tasks (`--no-task-sampling` shuffles all examples together
instead, each once per epoch). Each task's examples in a batch go through the encoder as one group padded to its own
longest sequence: the loss is the same as one padded forward, without padding short tasks to long ones.

With teachers (`electra.glue.teachers`), a classification example's loss is the cross-entropy against
λ·one-hot(gold) + (1 − λ)·softmax(teacher logits), a regression example's the squared error to
λ·gold + (1 − λ)·teacher, with STS-B's scores divided by 5 (the chapter's [0, 1] labels). λ = s / S for update s
of S (0-based, warmup included: teacher annealing), or a fixed value (`--fixed-lambda`, the chapter's ablations).
Without teachers λ is 1: plain multi-task training, the same formula with the gold target. The loss is the sum over
the batch's examples divided by the batch (a mean, as the single-task loss here; the reference code sums, which with
clipping at 1 acts as a smaller rate). The update number travels in the batch, so a resumed run anneals exactly as
an uninterrupted one.

Training goes through the one `Engine` (progress, logs, FLOP meter, checkpoints, `--resume`); the result is one
model with a head per task (`--save-best`), the dev metric of every task per seed, and GLUE-server files for every
task (`--predict-test`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import set_seed

from electra.core.files import write_json_atomically
from electra.core.run_records import check_run_record, keep_run_record
from electra.core.settings import spelled
from electra.data.packing import pad_batch
from electra.finetune.models import load_encoder, resolve_model_dir
from electra.finetune.recipe import finetune_args, resolved_settings, size_defaults
from electra.finetune.results import write_seed_result
from electra.finetune.seeds import SeedJob, run_seeds
from electra.flops.analytic import finetune_flops as analytic_finetune_flops
from electra.glue.bam import MultiTaskTraining, StudentData, student_data, task_probabilities
from electra.glue.finetune import fitted_to_model
from electra.glue.inputs import (
    DATA_RECORD,
    check_task_data,
    check_task_rows,
    load_task_data,
    resume_record,
)
from electra.glue.metrics import task_scores
from electra.glue.model import REGRESSION_SCALE, MultiTaskModel, saved_seed
from electra.glue.multitask_report import MODEL_NAME, multitask_results, seed_average, write_multitask_card
from electra.glue.report import format_table, write_outputs
from electra.glue.seed_run import SeedRun, finished_seed
from electra.glue.settings import FinetuneSettings, GlueInputs, MultitaskSettings
from electra.glue.tasks import TaskSpec
from electra.glue.teachers import find_teacher_files, read_teacher, teacher_digests, teacher_fingerprint
from electra.training.engine import Engine
from electra.training.optim import describe_lr_groups
from electra.training.processes import make_accelerator, per_process_batch

MULTITASK_EPOCHS = 6  # the chapter's multi-task recipe: 6 epochs (single-task: 3), batch 128, decay 0.9
MULTITASK_LAYER_DECAY = 0.9
MULTITASK_LR_FACTOR = 2.0  # 1e-4 for BERT-Large, whose single-task rate in this recipe is 5e-5


# ---- one seed -------------------------------------------------------------------------------------------------
@dataclass
class MultitaskPlan:
    """The settings one student trains with, resolved for the model's size."""

    learning_rate: float
    layer_decay: float
    epochs: float
    batch_size: int
    total_steps: int


def plan(
    settings: FinetuneSettings, multi: MultitaskSettings, hidden_size: int, examples: int
) -> MultitaskPlan:
    """The chapter's multi-task recipe where a shared flag was not given: 6 epochs, twice the single-task rate of
    the model's size, layer decay 0.9; steps = epochs × (examples of every task) / batch."""
    _, size_lr, _ = size_defaults(hidden_size)
    epochs = settings.epochs if settings.epochs is not None else MULTITASK_EPOCHS
    batch = multi.multitask_batch_size
    total = settings.max_steps or max(1, round(epochs * examples / batch))
    return MultitaskPlan(
        settings.learning_rate or MULTITASK_LR_FACTOR * size_lr,
        settings.layer_decay or MULTITASK_LAYER_DECAY,
        epochs,
        batch,
        total,
    )


def predict_task(
    model: MultiTaskModel,
    task: str,
    features: list[dict],
    batch_size: int,
    pad_token_id: int,
    device,
    shapes=None,
) -> np.ndarray:
    """One task's outputs for `features` in order, dropout off: logits, or 0-5 scores for regression."""
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, len(features), batch_size):
            chunk = features[start : start + batch_size]
            batch = {k: v.to(device) for k, v in pad_batch(chunk, pad_token_id).items()}
            if shapes is not None:
                shapes[batch["input_ids"].shape[1]] += len(chunk)
            (out,) = model([{"task": task, **batch}])
            outputs.append(out.float().cpu())
    model.train()
    result = torch.cat(outputs).numpy()
    return result * REGRESSION_SCALE if model.specs[task].is_regression else result


def run_student(
    tasks: list[StudentData],
    model_dir: Path,
    tokenizer,
    seed: int,
    settings: FinetuneSettings,
    multi: MultitaskSettings,
    accelerator,
    init_from: Path | None = None,
    run_dir: Path | None = None,
    resume: bool = False,
    show_groups: bool = False,
) -> tuple[SeedRun, MultiTaskModel]:
    """One student: train, then every task's dev metrics and the test predictions of the tasks that loaded them."""
    started = time.time()
    set_seed(seed)
    model = MultiTaskModel(load_encoder(init_from or model_dir), [t.spec for t in tasks])
    examples = sum(len(t.data.train) for t in tasks)
    recipe = plan(settings, multi, model.encoder.config.hidden_size, examples)
    per_device = per_process_batch(recipe.batch_size, accelerator.num_processes, "--multitask-batch-size")
    args = finetune_args(
        settings,
        recipe.total_steps,
        recipe.learning_rate,
        recipe.layer_decay,
        run_dir,
        f"multitask seed {seed}",
    )
    pad = tokenizer.pad_token_id or 0
    training = MultiTaskTraining(
        model,
        tasks,
        multi,
        recipe.total_steps,
        per_device * accelerator.num_processes,
        seed,
        pad,
        accelerator,
    )
    if show_groups:
        shares = task_probabilities([len(t.data.train) for t in tasks], multi.task_exponent)
        accelerator.print(
            f"multitask: {recipe.total_steps} steps of {recipe.batch_size} over {examples} examples; task shares "
            + ", ".join(f"{t.spec.name} {share:.3f}" for t, share in zip(tasks, shares))
        )
        accelerator.print(describe_lr_groups(training.parameter_groups(model, args)))
    engine = Engine(args, accelerator)
    result = engine.fit(training, engine.resume_checkpoint(resume, f"multitask seed {seed}"))
    model = accelerator.unwrap_model(model)
    eval_shapes: Counter = Counter()
    metrics, test_predictions = evaluate_student(
        model, tasks, settings.eval_batch_size, pad, accelerator, eval_shapes
    )
    flops = student_flops(model, dict(training.train_shapes), dict(eval_shapes))
    run = SeedRun(
        seed,
        metrics,
        result.step,
        dict(training.train_shapes),
        dict(eval_shapes),
        time.time() - started,
        test_predictions,
        flops,
        "electra.flops.analytic.finetune_flops (train 2x forward, plus eval forward)",
    )
    return run, model


def evaluate_student(
    model: MultiTaskModel,
    tasks: list[StudentData],
    batch_size: int,
    pad_token_id: int,
    accelerator,
    shapes: Counter,
) -> tuple[dict[str, dict[str, float]], dict[str, list[tuple[str, str]]]]:
    """Every task's dev metrics (by dev result name) and the GLUE-server rows of the test sets that were loaded."""
    metrics, test_predictions = {}, {}
    for task in tasks:
        spec = task.spec
        for name, features in task.data.dev.items():
            outputs = predict_task(
                model, spec.name, features, batch_size, pad_token_id, accelerator.device, shapes
            )
            decided = outputs if spec.is_regression else outputs.argmax(-1)
            metrics[name] = task_scores(spec, decided, [f["labels"] for f in features])
        for stem, (ids, features) in task.data.test.items():
            outputs = predict_task(
                model, spec.name, features, batch_size, pad_token_id, accelerator.device, shapes
            )
            if spec.is_regression:
                labels = [f"{min(5.0, max(0.0, float(v))):.3f}" for v in outputs]
            else:
                labels = [spec.labels[int(v)] for v in outputs.argmax(-1)]
            test_predictions[stem] = list(zip(ids, labels))
    return metrics, test_predictions


def student_flops(model: MultiTaskModel, train_shapes: dict[int, int], eval_shapes: dict[int, int]) -> float:
    """Training (2 × forward) plus evaluation FLOPs, from the padded shapes run, in the paper's convention; the
    heads are counted at the widest task's size (they are a rounding error of the encoder)."""
    config, labels = model.encoder.config, max(spec.num_labels for spec in model.specs.values())
    train = sum(
        analytic_finetune_flops(config, n_len, n, labels).train_flops for n_len, n in train_shapes.items()
    )
    evaluation = sum(
        analytic_finetune_flops(config, n_len, n, labels).forward_flops_per_sequence * n
        for n_len, n in eval_shapes.items()
    )
    return float(train + evaluation)


# ---- the command ----------------------------------------------------------------------------------------------
def multitask_settings_record(
    settings: FinetuneSettings, multi: MultitaskSettings, hidden_size: int, teachers: dict[str, str]
) -> dict[str, Any]:
    """The settings as run (multi-task defaults filled in), for results.json and the resume check."""
    recipe = plan(settings, multi, hidden_size, 1)
    return resolved_settings(settings, hidden_size) | {
        "learning_rate": recipe.learning_rate,
        "layer_decay": recipe.layer_decay,
        "epochs": recipe.epochs,
        "batch_size": recipe.batch_size,
        "multitask": asdict(multi),
        "teachers": teachers,
    }


def load_students(
    specs: list[TaskSpec],
    data_dir: Path,
    tokenizer,
    settings: FinetuneSettings,
    teachers: Sequence[str | Path] | None,
    predict_test: bool,
) -> tuple[list[StudentData], dict[str, str]]:
    """Every task's data, with its teacher's outputs aligned by example id (checked against the fingerprint)."""
    files = find_teacher_files(teachers, [s.name for s in specs]) if teachers else {}
    students = []
    for spec in specs:
        data = load_task_data(spec, data_dir, tokenizer, settings, predict_test)
        outputs = None
        if files:
            fingerprint = teacher_fingerprint(spec, data_dir, tokenizer, settings.max_seq_length)
            outputs = read_teacher(files[spec.name], spec, fingerprint).outputs_for(data.train_ids)
        students.append(student_data(data, outputs))
    return students, teacher_digests(files)


def run_multitask(
    model_dir: str | Path,
    specs: list[TaskSpec],
    data_dir: Path,
    settings: FinetuneSettings,
    multi: MultitaskSettings,
    seeds: list[int],
    output_dir: Path | None = None,
    teachers: Sequence[str | Path] | None = None,
    init_from: str | Path | None = None,
    predict_test: bool = False,
    save_best: bool = False,
    resume: bool = False,
) -> dict:
    """Train one multi-task student per seed on all `specs` at once (taught by `teachers`, when given); write
    results.json / results.md as `run_glue` does (the per-task median over seeds, the average without WNLI), the
    GLUE-server files of every task from the best seed (`predict_test`) and that seed's model, with a head per task
    and its card, in OUTPUT/checkpoints/multitask (`save_best`).

    The caller has checked the inputs (`electra glue --multitask`: at least two tasks, the seeds and lengths,
    every task file) before `--overwrite` deleted anything; the rows are read here."""
    model_dir = resolve_model_dir(model_dir)
    init_from = resolve_model_dir(init_from, spelled(GlueInputs, "init_from")) if init_from else None
    check_task_rows(specs, data_dir, predict_test, settings.skip_malformed)
    accelerator = make_accelerator(settings.mixed_precision)
    tokenizer, config, settings = fitted_to_model(model_dir, init_from, specs, settings, seeds)
    tasks, digests = load_students(specs, data_dir, tokenizer, settings, teachers, predict_test)
    resolved = multitask_settings_record(settings, multi, config.hidden_size, digests)
    if output_dir is not None:
        record = resume_record(model_dir, init_from, resolved)
        if resume:
            check_run_record(output_dir, record)
        data_records = check_task_data(output_dir, specs, data_dir, predict_test, resume)
        if accelerator.is_main_process:
            keep_run_record(output_dir, record, resume)
            for spec in specs:
                write_json_atomically(output_dir / "runs" / spec.name / DATA_RECORD, data_records[spec.name])
    job = StudentJob(tasks, model_dir, tokenizer, settings, multi, accelerator, init_from, output_dir, resume)
    best_dir = output_dir / "checkpoints" / MODEL_NAME if save_best and output_dir is not None else None
    runs, best = job.run_seeds(seeds, predict_test, best_dir)
    results = multitask_results(model_dir, init_from, specs, resolved, seeds, runs)
    if accelerator.is_main_process:
        print(format_table(results))
        if output_dir is not None:
            write_outputs(results, output_dir, best.test_predictions if predict_test else None)
            if best_dir is not None:
                write_multitask_card(best_dir, model_dir, results, best.seed)
    return results


@dataclass
class StudentJob:
    """What every seed's student shares: the tasks with their teachers, the model, the settings, and where (and
    whether) its runs and the best seed's model are kept."""

    tasks: list[StudentData]
    model_dir: Path
    tokenizer: Any
    settings: FinetuneSettings
    multi: MultitaskSettings
    accelerator: Any
    init_from: Path | None
    output_dir: Path | None
    resume: bool

    def run_dir(self, seed: int) -> Path | None:
        return self.output_dir / "runs" / MODEL_NAME / f"seed-{seed}" if self.output_dir is not None else None

    def train(self, seed: int, resume: bool, show_groups: bool = False) -> tuple[SeedRun, MultiTaskModel]:
        return run_student(
            self.tasks,
            self.model_dir,
            self.tokenizer,
            seed,
            self.settings,
            self.multi,
            self.accelerator,
            self.init_from,
            self.run_dir(seed),
            resume,
            show_groups,
        )

    def run_seeds(
        self, seeds: list[int], predict_test: bool, best_dir: Path | None
    ) -> tuple[list[SeedRun], SeedRun]:
        """Every seed's student (a resume reuses the finished ones) and the best by GLUE average; with `best_dir`,
        that seed's model is saved there (trained again from its checkpoint where an earlier run did not save it)."""
        runs, best = run_seeds(StudentSeeds(self, predict_test, best_dir), seeds)
        return runs, next(run for run in runs if run.seed == best)


@dataclass
class StudentSeeds(SeedJob[SeedRun]):
    """The students' seeds, for `electra.finetune.seeds.run_seeds`: the best by GLUE average."""

    job: StudentJob
    predict_test: bool
    best_dir: Path | None

    @property
    def saves(self) -> bool:
        return self.best_dir is not None

    def finished(self, seed: int) -> SeedRun | None:
        run = finished_seed(self.job.run_dir(seed)) if self.job.resume else None
        if run is not None and self.predict_test and not run.test_predictions:
            return None  # finished earlier without test predictions: run again (from its checkpoint)
        return run

    def train(self, seed: int, first: bool) -> tuple[SeedRun, MultiTaskModel]:
        run, model = self.job.train(seed, self.job.resume, show_groups=first)
        if self.job.run_dir(seed) is not None and self.job.accelerator.is_main_process:
            write_seed_result(self.job.run_dir(seed), run)
        return run, model

    def score(self, run: SeedRun) -> float:
        return seed_average(run)

    def keep(self, seed: int, model: MultiTaskModel) -> None:
        if self.job.accelerator.is_main_process:
            model.save(self.best_dir, self.job.tokenizer, seed=seed)

    def saved_seed(self) -> int | None:
        return saved_seed(self.best_dir)

    def save_again(self, seed: int) -> None:
        _, model = self.job.train(seed, resume=True)
        self.keep(seed, model)

    def report(self, seed: int, run: SeedRun) -> None:
        self.job.accelerator.print(
            f"multitask seed {seed}: average {100 * seed_average(run):.1f} ({run.steps} steps, {run.seconds:.0f}s)"
        )

    def finish(self) -> None:
        self.job.accelerator.wait_for_everyone()
