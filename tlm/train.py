"""TLM training: stage 1 trains the task and a language-modelling objective jointly from scratch, stage 2 fine-tunes
on the task alone; accuracy and macro-F1 on dev and test at the end. The same joint stage, started from a
checkpoint (`init_from`) and weighted uniformly or by meta-learned weights (`electra.tlm.tartan`), is MT-/META-TARTAN.

Stage 1, per step: one task batch T and ρ1 batches E_1..E_ρ1 of the retrieved corpus,

    loss = CE(classifier(T), y) + ρ2 · LM(T) + mean_j LM(E_j)

where LM is this library's pretraining loss for `--objective` (any registered objective: `mlm`, `electra`,
`electric`, ...): masking happens inside the pretraining model, so the task batch serves both terms. `--objective
none` is the task-only baseline (same architecture, trained from scratch on the task loss alone). All terms are one
forward and one backward, so multi-GPU (Accelerate / DDP) sees a single graph per step. A FLOP budget stops stage 1
at equal compute. Both stages run on the library's engine (`electra.training.engine`): logs in OUT/stage1/ and OUT/stage2/
(metrics.csv, TensorBoard), and with `save_every` checkpoints there that `resume` continues from.

This module runs a whole run; the parts live beside it: `electra.tlm.settings` (the settings, checked once as they
are built), `electra.tlm.task_data` (splits, tokenizer, batches), `electra.tlm.model` (the joint model and its
FLOPs), `electra.tlm.joint` and `electra.tlm.stage1` (stage 1), `electra.tlm.finetune` (stage 2),
`electra.tlm.evaluation` (the scores) and `electra.tlm.resume` (what a resume must match).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate.utils import set_seed

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.files import read_json_record, write_json_atomically
from electra.core.run_records import keep_run_record
from electra.data.packing import PretrainingCollator, build_pretraining_dataset
from electra.export.layout import save_tokenizer
from electra.tlm.evaluation import evaluate
from electra.tlm.finetune import Stage2Result, run_stage2
from electra.tlm.joint import JointTask
from electra.tlm.model import FlopCounter, TLMModel, build_models
from electra.tlm.outputs import refuse_missing_resume
from electra.tlm.resume import check_resume, resume_record
from electra.tlm.settings import TASK_ONLY, TLMSettings, run_config
from electra.tlm.stage1 import budget_steps, run_stage1
from electra.tlm.task_data import TaskCollator, corpus_of, read_splits, run_tokenizer
from electra.training.processes import make_accelerator, per_process_batch
from electra.training.run_log import read_metrics

logger = logging.getLogger(__name__)


@dataclass
class TrainedJoint:
    """A finished run: its results and what produced them (ISS scores candidates with the model)."""

    results: dict[str, Any]
    model: TLMModel
    tokenizer: Any
    config: Any


def read_loss_log(stage_dir: str | Path) -> list[dict[str, float]]:
    """The logged steps of one stage (OUT/stage1 or OUT/stage2): step, flops, learning_rate and the loss parts."""
    return read_metrics(stage_dir, "train")


def train_tlm(settings: TLMSettings) -> dict[str, Any]:
    """Both stages end to end; writes OUT/{config.json, tokenizer/, stage1/, stage2/, model/, results.json}.
    `resume` continues the run in OUT, and is refused where OUT holds none."""
    refuse_missing_resume(settings.out, settings.resume)
    if settings.resume:
        finished = finished_results(settings)
        if finished is not None:
            return finished
    return train_joint(settings).results


def finished_results(settings: TLMSettings) -> dict[str, Any] | None:
    """The results of a run that a `resume` finds finished (OUT/results.json readable), once the resume check
    passes (other settings or inputs are still refused); None when it has work left. A finished run is not
    trained again, with or without checkpoints: the resume changes nothing and says so."""
    settings, config = run_config(settings)
    out = Path(settings.out)
    saved = read_json_record(out / "results.json")
    if saved is None:
        return None
    check_resume(out, resume_record(settings), config)
    print(
        f"{out} already finished ({out / 'results.json'}); nothing to do (--overwrite instead of --resume "
        "trains it again).",
        file=sys.stderr,
        flush=True,
    )
    return saved


def run_plan(
    settings: TLMSettings, config: PretrainConfig, accelerator: Any, tokenizer: Any, num_labels: int
) -> tuple[dict[str, Any], int]:
    """The plan both stages' tasks read (`electra.tlm.joint.JointTask`) and stage 2's per-process batch size.
    --batch-size is the task batch of one step over all processes (external batches match it), as pretrain's;
    without an LM objective ρ1 and ρ2 are 0."""
    world = accelerator.num_processes
    batch_size = per_process_batch(settings.batch_size or config.train_batch_size, world)
    finetune_batch = per_process_batch(settings.finetune_batch_size, world, "--finetune-batch-size")
    use_lm = settings.objective != TASK_ONLY
    plan = dict(
        batch_size=batch_size,
        seed=settings.seed,
        collate=TaskCollator(tokenizer.pad_token_id),
        external_collate=PretrainingCollator(tokenizer.pad_token_id),
        rank=accelerator.process_index,
        world=world,
        rho1=settings.rho1 if use_lm else 0,
        rho2=settings.rho2 if use_lm else 0.0,
        accelerator=accelerator,
        eval_batch_size=settings.eval_batch_size,
        num_labels=num_labels,
        weighting=settings.weighting,
        meta_lr=settings.meta_lr,
        meta_head_steps=settings.meta_head_steps,
        meta_head_lr=settings.meta_head_lr,
        eval_every=settings.eval_every,
        balance_losses=settings.balance_losses,
    )
    return plan, finetune_batch


def train_joint(settings: TLMSettings) -> TrainedJoint:
    """`train_tlm`, keeping the trained model, its tokenizer and config."""
    settings, config = run_config(settings)
    out = Path(settings.out)
    record = resume_record(settings)
    if settings.resume:
        check_resume(out, record, config)
    accelerator = make_accelerator(config.mixed_precision)
    set_seed(settings.seed)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # every input is read before OUT gets a file: a refused run leaves nothing behind
    splits = read_splits(settings)
    external_corpus = corpus_of(settings.retrieved) if settings.retrieved else None
    if settings.objective != TASK_ONLY and settings.rho1 > 0 and external_corpus is None:
        raise UserError("--retrieved is required when rho1 > 0 (pass --rho1 0 for LM on the task data only).")
    tokenizer = run_tokenizer(settings, config, out / "tokenizer", splits.examples["train"], external_corpus)
    config.vocab_size = len(tokenizer)
    rows = splits.encode(tokenizer, config.max_seq_length)
    plan, finetune_batch = run_plan(settings, config, accelerator, tokenizer, len(splits.labels))
    dataset = None
    if plan["rho1"] > 0:
        dataset = build_pretraining_dataset(external_corpus, tokenizer, config, cache_dir=settings.cache_dir)
        logger.info("external corpus: %d examples from %s", len(dataset), external_corpus)
    meta = settings.weighting == "meta"
    if meta and plan["world"] > 1:
        raise UserError("--weighting meta runs on one process; launch it without multi-process Accelerate.")
    out.mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process:
        keep_run_record(out, record, settings.resume)
        config.save(out / "config.json")
        tokenizer.save_pretrained(str(out / "tokenizer"))

    set_seed(settings.seed)  # the same initial encoder for every arm that shares an architecture
    model = build_models(
        config, tokenizer, splits.labels, settings.objective, settings.init_from, meta_head=meta
    )
    counter = FlopCounter(config, model)
    steps = settings.steps
    if steps is None and settings.flops_budget:
        steps = budget_steps(settings.flops_budget, counter, plan, rows, dataset)
    joint = JointTask(model, rows["train"], dataset, plan, counter, rows["dev"])
    stage1 = run_stage1(settings, config, out / "stage1", joint, steps or config.max_steps)
    stage2_plan = plan | {"batch_size": finetune_batch}
    stage2 = run_stage2(settings, config, out / "stage2", model.classifier, rows, stage2_plan, counter)
    logger.info("after stage 1: dev %s", stage2.stage1_dev)
    test = evaluate(
        accelerator,
        model.classifier,
        rows["test"],
        settings.eval_batch_size,
        plan["collate"],
        len(splits.labels),
    )
    results = run_results(settings, plan, counter, stage1, stage2) | {
        "test": test,
        "labels": splits.labels.labels,
    }
    if accelerator.is_main_process:
        model.classifier.save_pretrained(str(out / "model"), safe_serialization=True)
        save_tokenizer(tokenizer, out / "model", model.classifier.config)
        write_json_atomically(out / "results.json", results)
    accelerator.end_training()
    logger.info("test (%s): %s", settings.task_test, test)  # ISS's reference run tests on the dev file
    return TrainedJoint(results, model, tokenizer, config)


def run_results(
    settings: TLMSettings,
    plan: dict[str, Any],
    counter: FlopCounter,
    stage1: tuple[int, float],
    stage2: Stage2Result,
) -> dict[str, Any]:
    """results.json's record of the run, but for the test scores and the labels: what ran, its compute, and
    the dev scores after stage 1 and at the kept epoch."""
    stage1_steps, stage1_flops = stage1
    return {
        "objective": settings.objective,
        "weighting": settings.weighting,
        "init_from": settings.init_from,
        "size": settings.size,
        "rho1": plan["rho1"],
        "rho2": plan["rho2"],
        "seed": settings.seed,
        "stage1_steps": stage1_steps,
        "stage1_flops": stage1_flops,
        "total_flops": stage1_flops + stage2.flops,
        "flops_budget": settings.flops_budget,
        "flop_source": counter.source,
        "best_epoch": stage2.best_epoch,
        "stage1_dev": stage2.stage1_dev,
        "dev": stage2.best_dev,
    }
