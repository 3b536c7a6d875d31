"""Fine-tune one checkpoint on GLUE tasks over several seeds, the way the ELECTRA paper does (its Table 5.2 /
appendix: AdamW eps 1e-6, 10% warmup then linear decay, no weight decay, batch 32, layer-wise LR decay,
learning rate by model size, 10 epochs for RTE and STS-B and 3 otherwise, median over seeds).

The training loop runs through Accelerate, so `accelerate launch` gives multi-GPU data parallelism and
`--mixed-precision bf16` autocasts the forward passes. One seed's run is `electra.glue.seed_run`; this module runs
every seed of every task (`GlueJob`, `TaskSeeds`) and assembles their summary (`run_glue`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from transformers import AutoConfig, AutoTokenizer

from electra.core.files import write_json_atomically
from electra.core.run_records import check_run_record, keep_run_record
from electra.core.settings import spelled
from electra.data.tokenization import require_tokenizer_fits
from electra.export.layout import fit_length
from electra.finetune.models import resolve_model_dir
from electra.finetune.recipe import resolved_settings
from electra.finetune.results import write_seed_result
from electra.finetune.seeds import SeedJob, median, run_seeds
from electra.glue.inputs import (
    DATA_RECORD,
    TaskData,
    check_init_from,
    check_run_inputs,
    check_task_data,
    check_task_rows,
    load_task_data,
    record_in_results,
    resume_record,
)
from electra.glue.model import GlueModel, saved_seed
from electra.glue.report import format_table, write_outputs
from electra.glue.seed_run import SeedRun, finished_seed, run_seed
from electra.glue.settings import FinetuneSettings, GlueInputs
from electra.glue.tasks import PAPER_AVERAGE_TASKS, TaskSpec
from electra.glue.teachers import TEACHERS_DIR, teacher_fingerprint, write_teacher
from electra.training.processes import make_accelerator


def summarise(spec: TaskSpec, runs: list[SeedRun]) -> dict[str, dict]:
    """Per dev set: the primary metric's median and per-seed values, and every metric's median."""
    rows = {}
    for name in spec.dev_files:
        metric_names = list(runs[0].metrics[name])
        per_seed = {m: [run.metrics[name][m] for run in runs] for m in metric_names}
        rows[name] = {
            "task": spec.name,
            "metric": spec.primary_metric,
            "median": median(per_seed[spec.primary_metric]),
            "seeds": per_seed[spec.primary_metric],
            "seed_ids": [run.seed for run in runs],
            "medians": {m: median(values) for m, values in per_seed.items()},
            "per_seed": per_seed,
        }
    return rows


def glue_average(rows: dict[str, dict]) -> tuple[float, list[str]]:
    """The paper's GLUE dev average: the primary metric's median over CoLA, SST-2, MRPC, STS-B, QQP, MNLI
    (matched), QNLI and RTE, of those that were run; WNLI and MNLI-mm are reported but not averaged."""
    used = [name for name in PAPER_AVERAGE_TASKS if name in rows and not math.isnan(rows[name]["median"])]
    if not used:
        return math.nan, []
    return float(np.mean([rows[name]["median"] for name in used])), used


def _carry_earlier_tasks(
    output_dir: Path,
    tasks: list[str],
    rows: dict,
    all_runs: dict,
    total_flops: float,
    notice: Callable[[str], None],
) -> tuple[list[str], list[str], dict, dict, float]:
    """A resumed run's summary with the tasks the earlier summary in `output_dir` held and this run did not:
    their rows, seeds and FLOPs as recorded (the resume check has matched the model and settings), in the earlier
    order, and a `notice` naming them. Why: `--resume --task rte` into a folder of six tasks rewrote results.json
    and results.md with RTE alone, and the table of the other five was gone without a word (their seeds stayed
    under runs/)."""
    try:
        earlier = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
        earlier_tasks = [t for t in earlier.get("tasks", []) if t not in tasks]
        carried_rows = {
            name: row for name, row in earlier["results"].items() if row.get("task") in earlier_tasks
        }
        carried_runs = {task: earlier["runs"][task] for task in earlier_tasks}
        carried_flops = sum(float(run.get("flops") or 0.0) for runs in carried_runs.values() for run in runs)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [], tasks, rows, all_runs, total_flops  # no earlier summary (or not one this code wrote)
    if not earlier_tasks:
        return [], tasks, rows, all_runs, total_flops
    order = [t for t in earlier["tasks"] if t in earlier_tasks or t in tasks]
    order += [t for t in tasks if t not in order]
    merged = {**rows, **carried_rows}
    merged = {name: row for task in order for name, row in merged.items() if row["task"] == task}
    notice(
        f"{spelled(GlueInputs, 'resume')}: results.json keeps {', '.join(earlier_tasks)} from the earlier run in {output_dir} (not run "
        "again now)"
    )
    return earlier_tasks, order, merged, {**all_runs, **carried_runs}, total_flops + carried_flops


AVERAGE_CONVENTION = (
    "mean of per-task medians of the paper's metric (MCC CoLA, Spearman STS-B, accuracy otherwise) over CoLA, "
    "SST-2, MRPC, STS-B, QQP, MNLI-m, QNLI, RTE where run; WNLI and MNLI-mm not averaged"
)


def fitted_to_model(
    model_dir: Path,
    init_from: Path | None,
    specs: list[TaskSpec],
    settings: FinetuneSettings,
    seeds: list[int],
) -> tuple[Any, Any, FinetuneSettings]:
    """The model's tokenizer (checked to fit its embeddings), its config, and the settings with the sequence length
    fitted to its positions (checked again: a model with very few positions can fit it below a task's minimum).
    Single- and multi-task runs start here."""
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    config = AutoConfig.from_pretrained(str(model_dir))
    require_tokenizer_fits(tokenizer, config.vocab_size, model_dir)
    check_init_from(model_dir, init_from)
    settings = replace(settings, max_seq_length=fit_length(settings.max_seq_length, config))
    check_run_inputs(specs, settings, seeds)
    return tokenizer, config, settings


def run_glue(
    model_dir: str | Path,
    specs: list[TaskSpec],
    data_dir: Path,
    settings: FinetuneSettings,
    seeds: list[int],
    output_dir: Path | None = None,
    init_from: str | Path | None = None,
    predict_test: bool = False,
    save_best: bool = False,
    resume: bool = False,
    save_train_logits: bool = False,
) -> dict:
    """Fine-tune on every task with every seed; write results.json / results.md (and test TSVs, checkpoints; with
    `save_train_logits`, the best seed's outputs on its training set as OUTPUT/teachers/TASK.json).

    With `output_dir`, each seed's run keeps its logs in OUTPUT/runs/TASK/seed-N/ and its result in result.json
    there; `resume=True` reuses finished seeds and continues an unfinished one from its latest checkpoint
    (`settings.save_every`).

    The caller has checked the inputs (`electra glue`, `electra.finetune_glue` and `compare` call
    `electra.glue.inputs.check_run_inputs` and `check_files` before `--overwrite` deletes anything)."""
    model_dir = resolve_model_dir(model_dir)
    init_from = resolve_model_dir(init_from, spelled(GlueInputs, "init_from")) if init_from else None
    if len(specs) > 1:  # one task reads its files first thing anyway
        check_task_rows(specs, data_dir, predict_test, settings.skip_malformed)
    accelerator = make_accelerator(settings.mixed_precision)
    tokenizer, config, settings = fitted_to_model(model_dir, init_from, specs, settings, seeds)
    resolved = resolved_settings(settings, config.hidden_size)
    data_records = _check_and_keep_records(
        output_dir, model_dir, init_from, resolved, specs, data_dir, predict_test, resume, accelerator
    )
    job = GlueJob(
        model_dir,
        tokenizer,
        settings,
        seeds,
        accelerator,
        output_dir,
        init_from,
        save_best,
        resume,
        save_train_logits,
    )
    done = job.run_tasks(specs, data_dir, predict_test, data_records)
    rows, all_runs, test_files, total_flops, flops_method = done
    tasks, carried = [spec.name for spec in specs], []
    if resume and output_dir is not None:
        carried, tasks, rows, all_runs, total_flops = _carry_earlier_tasks(
            output_dir, tasks, rows, all_runs, total_flops, accelerator.print
        )
    results = _results(job, resolved, tasks, carried, rows, all_runs, total_flops, flops_method)
    if accelerator.is_main_process:
        print(format_table(results))
        if output_dir is not None:
            write_outputs(results, output_dir, test_files if predict_test else None)
    return results


def _results(
    job: GlueJob,
    resolved: dict[str, Any],
    tasks: list[str],
    carried: list[str],
    rows: dict[str, dict],
    all_runs: dict[str, list[dict]],
    total_flops: float,
    flops_method: str | None,
) -> dict:
    """results.json's content: the model, the settings and seeds, the summary rows and their GLUE average, the
    fine-tuning FLOPs, and every seed's record by task."""
    average, averaged = glue_average(rows)
    return {
        "model": str(job.model_dir),
        "init_from": str(job.init_from) if job.init_from else None,
        "tasks": tasks,
        "carried_over": carried,
        "settings": resolved,
        "seeds": job.seeds,
        "results": rows,
        "average": average,
        "average_over": averaged,
        "average_convention": AVERAGE_CONVENTION,
        "finetune_flops": total_flops,
        "finetune_flops_method": flops_method,
        "runs": all_runs,
    }


def _check_and_keep_records(
    output_dir: Path | None,
    model_dir: Path,
    init_from: Path | None,
    resolved: dict[str, Any],
    specs: list[TaskSpec],
    data_dir: Path,
    predict_test: bool,
    resume: bool,
    accelerator: Any,
) -> dict[str, Any]:
    """The records a run keeps in its output folder, checked against a resumed run's before anything trains (a
    resume under another model or settings would relabel the finished seeds): the run's record (model and
    settings), kept by the main process, and each task's data record, returned ({} without an output folder)."""
    if output_dir is None:
        return {}
    record = resume_record(model_dir, init_from, resolved)
    if resume:
        check_run_record(output_dir, record, record_in_results)
    data_records = check_task_data(output_dir, specs, data_dir, predict_test, resume)
    if accelerator.is_main_process:
        keep_run_record(output_dir, record, resume)
    return data_records


@dataclass
class GlueJob:
    """What every task of a `run_glue` call shares: the model, its tokenizer, the settings, the seeds and where
    (and whether) the runs, the best seed's model and a resume's finished seeds are kept."""

    model_dir: Path
    tokenizer: Any
    settings: FinetuneSettings
    seeds: list[int]
    accelerator: Any
    output_dir: Path | None
    init_from: Path | None
    save_best: bool
    resume: bool
    save_train_logits: bool = False  # each seed also predicts its training set (a teacher's outputs)
    best_seeds: dict[str, int] = field(
        default_factory=dict
    )  # task -> its best seed, once run_task has run it

    def run_dir(self, task: str, seed: int) -> Path | None:
        return self.output_dir / "runs" / task / f"seed-{seed}" if self.output_dir is not None else None

    def run_task(
        self, spec: TaskSpec, data: TaskData, predict_test: bool
    ) -> tuple[list[SeedRun], dict[str, list[tuple[str, str]]]]:
        """Every seed of one task (a resume reuses the finished ones), and the test predictions of its best seed;
        with `save_best`, that seed's model in OUTPUT/checkpoints/TASK (trained again where an earlier run
        finished it without saving)."""
        runs, best = run_seeds(TaskSeeds(self, spec, data, predict_test), self.seeds)
        self.best_seeds[spec.name] = best
        return runs, next(run for run in runs if run.seed == best).test_predictions

    def run_tasks(
        self, specs: list[TaskSpec], data_dir: Path, predict_test: bool, data_records: dict[str, Any]
    ) -> tuple[dict[str, dict], dict[str, list[dict]], dict[str, list[tuple[str, str]]], float, str | None]:
        """Every task in turn: (summary rows, every seed's record by task, the best seeds' test predictions, the
        fine-tuning FLOPs and how they were counted). The main process writes each task's data record and, with
        `save_train_logits`, its best seed's outputs on the training set as a teacher file."""
        rows: dict[str, dict] = {}
        all_runs: dict[str, list[dict]] = {}
        test_files: dict[str, list[tuple[str, str]]] = {}
        total_flops, flops_method = 0.0, None
        writes = self.output_dir is not None and self.accelerator.is_main_process
        for spec in specs:
            data = load_task_data(spec, data_dir, self.tokenizer, self.settings, predict_test)
            if writes:
                write_json_atomically(
                    self.output_dir / "runs" / spec.name / DATA_RECORD, data_records[spec.name]
                )
            runs, best_predictions = self.run_task(spec, data, predict_test)
            if self.save_train_logits and writes:
                best = next(run for run in runs if run.seed == self.best_seeds[spec.name])
                write_teacher(
                    self.output_dir / TEACHERS_DIR / f"{spec.name}.json",
                    spec,
                    data.train_ids,
                    best.train_logits,
                    teacher_fingerprint(spec, data_dir, self.tokenizer, self.settings.max_seq_length),
                    str(self.init_from or self.model_dir),
                    best.seed,
                )
            for run in runs:
                total_flops, flops_method = total_flops + run.flops, run.flops_method
            rows.update(summarise(spec, runs))
            all_runs[spec.name] = [
                asdict(run) | {"test_predictions": None, "train_logits": None} for run in runs
            ]
            test_files.update(best_predictions)
        return rows, all_runs, test_files, total_flops, flops_method


@dataclass
class TaskSeeds(SeedJob[SeedRun]):
    """The seeds of one GLUE task, for `electra.finetune.seeds.run_seeds`."""

    job: GlueJob
    spec: TaskSpec
    data: TaskData
    predict_test: bool

    @property
    def best_dir(self) -> Path | None:
        job = self.job
        return job.output_dir / "checkpoints" / self.spec.name if job.save_best and job.output_dir else None

    @property
    def saves(self) -> bool:
        return self.best_dir is not None

    def finished(self, seed: int) -> SeedRun | None:
        """A resume's finished seed, unless it lacks the test predictions or training-set outputs asked for now."""
        job, name = self.job, self.spec.name
        run = finished_seed(job.run_dir(name, seed)) if job.resume else None
        if run is not None and self.predict_test and set(self.data.test) - set(run.test_predictions):
            job.accelerator.print(
                f"{name} seed {seed}: finished earlier without test predictions; running it again for "
                f"{spelled(GlueInputs, 'predict_test')} (from its last checkpoint if it has one, else from the start: same seed, same run)"
            )
            return None
        if run is not None and job.save_train_logits and run.train_logits is None:
            job.accelerator.print(
                f"{name} seed {seed}: finished earlier without its training-set outputs; running it again for "
                "--save-train-logits (from its last checkpoint if it has one)"
            )
            return None
        return run

    def train(self, seed: int, first: bool) -> tuple[SeedRun, GlueModel]:
        job = self.job
        run_dir = job.run_dir(self.spec.name, seed)
        run, model = run_seed(
            self.data,
            job.model_dir,
            job.tokenizer,
            seed,
            job.settings,
            job.accelerator,
            job.init_from,
            show_groups=first,
            run_dir=run_dir,
            resume=job.resume,
            predict_train=job.save_train_logits,
        )
        if run_dir is not None and job.accelerator.is_main_process:
            write_seed_result(run_dir, run)
        return run, model

    def score(self, run: SeedRun) -> float:
        return run.metrics[next(iter(self.spec.dev_files))][self.spec.primary_metric]

    def keep(self, seed: int, model: GlueModel) -> None:
        if self.job.accelerator.is_main_process:
            model.save(self.best_dir, self.job.tokenizer, seed=seed)

    def saved_seed(self) -> int | None:
        return saved_seed(self.best_dir)

    def save_again(self, seed: int) -> None:
        """The best seed finished in an earlier run that did not save it: its run continues from its checkpoint
        (the same seed, the same run) and its model is saved."""
        job, acc = self.job, self.job.accelerator
        acc.print(
            f"{self.spec.name}: the best seed, {seed}, finished in an earlier run that did not save it; running "
            f"it again to save it in {self.best_dir}"
        )
        _, model = run_seed(
            self.data,
            job.model_dir,
            job.tokenizer,
            seed,
            job.settings,
            acc,
            job.init_from,
            run_dir=job.run_dir(self.spec.name, seed),
            resume=True,
        )
        self.keep(seed, model)
        del model
        acc.free_memory()

    def report(self, seed: int, run: SeedRun) -> None:
        self.job.accelerator.print(
            f"{self.spec.name} seed {seed}: {run.metrics} ({run.steps} steps, {run.seconds:.0f}s)"
        )

    def release(self) -> None:
        self.job.accelerator.free_memory()

    def finish(self) -> None:
        self.job.accelerator.wait_for_everyone()  # every process reads the saved seed after the main one wrote it
