"""Pretraining: corpus -> tokenizer -> packed examples -> `PretrainingModel` -> the engine -> an export.

`pretrain(config, inputs)` is the whole run behind `electra pretrain` and `python pretrain.py`: it guards the
output directory (a finished run is never overwritten; `--resume` must match the saved config), builds the model of
the configured objective, trains it through `electra.training.engine` (checkpoints, logs, FLOP meter, exact resume), and
writes the export (`electra.export.layout`), `summary.json` and the training curves. The run's tokenizer, examples and
batches come from `electra.training.pretraining_data`.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import set_seed

from electra.core.config import PretrainConfig
from electra.core.errors import ElectraWarning, UserError
from electra.core.outputs import StepOutput
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled
from electra.data.packing import CachedSource, PretrainingCollator
from electra.data.streaming import StreamedSource
from electra.export.checkpoint import checkpoint_step
from electra.flops.measured import startup_check
from electra.generators.fused_nll import plain_head
from electra.objectives import flop_report, get_objective
from electra.training.continued import load_initial_weights
from electra.training.engine import Engine
from electra.training.model import PretrainingModel, build_pretraining_model
from electra.training.pretraining_data import batch_source, loader_workers, tokenizer_and_examples
from electra.training.processes import make_accelerator, process_state
from electra.training.run_card import card_facts, export_run
from electra.training.run_folder import (
    check_output_dir,
    check_resume,
    how_to_go_on,
    record_elastic_resume,
    record_new_run,
    resumed_layout,
)
from electra.training.task import Task, TrainArgs, TrainResult


@dataclass
class PretrainResult:
    step: int
    stop_reason: str
    metrics: dict[str, float]  # the last logged training window
    output_dir: Path
    is_main_process: bool
    trained: bool = (
        True  # False: a finished run resumed with nothing left to do (its files stay as they were)
    )


class PretrainingTask(Task):
    """Batches of packed examples (from the cache in a seeded order, or streamed) that any step can restart from;
    the objective's step."""

    progress_keys = {
        "discriminator_accuracy": "disc_acc",
        "generator_accuracy": "gen_acc",
        "mlm_accuracy": "mlm_acc",
    }

    def __init__(
        self,
        model: PretrainingModel,
        source: CachedSource | StreamedSource,
        config: PretrainConfig,
        held_out=None,
        eval_batch_size: int = 32,
    ):
        self.model, self.source, self.collate, self.config = model, source, source.collate, config
        self.held_out, self.eval_batch_size = held_out, eval_batch_size
        self.flops_per_step = float(flop_report(config).train_flops_per_step)
        self.flop_check: dict[str, Any] | None = None

    def batches(self, start: int) -> Iterator[dict[str, torch.Tensor]]:
        return iter(self.source.loader(start))  # creating the iterator draws from the RNG

    def step(self, model, batch) -> StepOutput:
        return model(**batch)

    def tokens(self, batch) -> int:
        return int(batch["attention_mask"].sum())

    def flops(self, micro_batches) -> float:
        return self.flops_per_step

    def evaluate(self, model) -> dict[str, float] | None:
        """The objective's metrics on the held-out examples, with the same masks and samples every time (a fixed
        seed inside a forked RNG: the training stream is left exactly as it was)."""
        if self.held_out is None:
            return None
        device = next(model.parameters()).device
        sums: dict[str, float] = {}
        n = len(self.held_out)
        batches = 0
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(self.config.seed)
            for start in range(0, n, self.eval_batch_size):
                rows = self.held_out[start : min(n, start + self.eval_batch_size)]
                batch = self.collate([dict(zip(rows, values)) for values in zip(*rows.values())])
                output = model(**{k: v.to(device) for k, v in batch.items()})
                for name, value in output.metrics.items():
                    sums[name] = sums.get(name, 0.0) + float(value)
                batches += 1
        return {name: total / batches for name, total in sums.items()}

    def before_training(self, model, resumed: bool) -> None:
        """Measure one real forward against the analytic count, so a miscounted objective shows at once; the same
        count, three times the forward, is what a token executes in training, which the engine's MFU divides by.
        Objectives whose step changes shape mid-run (a generator trained alone first) are not measured."""
        objective = get_objective(self.config.objective)
        if not _is_main_process() or not objective.startup_flop_check:
            return
        batch = self.collate(self.source.rows(2))
        device = next(model.parameters()).device
        plan = objective.flop_plan(self.config)
        # RNG and buffers (step counters of scheduled objectives) are left as they were: the check is not a step.
        buffers = {name: value.clone() for name, value in model.named_buffers()}
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), plain_head():
            self.flop_check = startup_check(
                model, {k: v.to(device) for k, v in batch.items()}, self.config, plan
            )
        with torch.no_grad():
            for name, value in model.named_buffers():
                value.copy_(buffers[name])
        slots = self.flop_check["batch_size"] * self.flop_check["seq_len"]
        self.executed_flops_per_token = 3.0 * self.flop_check["measured_forward"] / slots
        print(
            f"FLOP counter check: measured/analytic matmul FLOPs = {self.flop_check['ratio']:.4f}"
            + (
                ""
                if self.flop_check["ok"]
                else "  (WARNING: more than 2% apart; the logged FLOPs may be off)"
            )
        )


def size_to_budget(config: PretrainConfig, budget: float, keep_warmup: bool = False) -> int:
    """Fit the schedule to a FLOP budget: max_steps = the steps it buys, warmup at most a tenth of them (unless
    `keep_warmup`), and the budget as the stop rule. Returns the steps. The vocabulary must be final: it sets the
    cost of a step."""
    per_step = flop_report(config).train_flops_per_step
    steps = max(1, math.ceil(budget / per_step - 1e-9))
    config.max_steps = steps
    if not keep_warmup:
        config.warmup_steps = min(config.warmup_steps, max(1, steps // 10))
    config.flops_budget = budget
    return steps


# Under 2.7, dynamo fails inside transformers' encoder wrapper (README, "Libraries, and why").
COMPILE_NEEDS_TORCH = (2, 7)


def torch_release() -> tuple[int, int]:
    """(major, minor) of the running torch, compared as numbers: 2.10 is newer than 2.7."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def compile_plan(config: PretrainConfig, on_gpu: bool, processes: int = 1) -> tuple[bool, str]:
    """Whether and how to torch.compile: the config's choice, else what was measured to pay. On one H100 the
    compiled ELECTRA-Small step with CUDA graphs ran 2.3x the eager one after ~90 s of compilation, so it wins any
    run past ~2 minutes; on CPUs compilation did not pay, and CUDA graphs under several processes are left to
    users who opt in."""
    compile = config.compile if config.compile is not None else (on_gpu and processes == 1)
    mode = config.compile_mode or ("reduce-overhead" if on_gpu else "default")
    if compile and torch_release() < COMPILE_NEEDS_TORCH:
        # pyproject asks for 2.7, but an install with --no-deps keeps whatever torch it finds
        if config.compile:
            raise UserError(
                f"{spelled(PretrainConfig, 'compile')} needs torch >= 2.7 (this is {torch.__version__}, whose compiler fails inside "
                f"transformers' encoder); upgrade torch or drop {spelled(PretrainConfig, 'compile')}."
            )
        warnings.warn(
            f"torch {torch.__version__} cannot compile this step (2.7+ can): training eagerly",
            ElectraWarning,
            stacklevel=2,
        )
        compile = False
    return compile, mode


def train_args(
    config: PretrainConfig, output_dir: Path | None, on_gpu: bool = False, processes: int = 1
) -> TrainArgs:
    """The engine's settings of a pretraining config."""
    compile, compile_mode = compile_plan(config, on_gpu, processes)
    return TrainArgs(
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        warmup_steps=config.warmup_steps,
        schedule=config.lr_schedule,
        weight_decay=config.weight_decay,
        adam_betas=(config.adam_beta1, config.adam_beta2),
        adam_epsilon=config.adam_epsilon,
        max_grad_norm=config.max_grad_norm,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        compile=compile,
        compile_mode=compile_mode,
        output_dir=output_dir,
        log_every=config.log_every,
        save_every=config.save_every,
        keep_checkpoints=config.keep_checkpoints,
        flops_budget=config.flops_budget,
        time_budget=None if config.time_budget_minutes is None else 60.0 * config.time_budget_minutes,
        schedule_clock=config.schedule_clock,
        eval_every=config.eval_every,
        description="pretraining",
        cpu_dropout=config.cpu_dropout,
        seed=config.seed,
    )


def pretrain(config: PretrainConfig, inputs: RunInputs) -> PretrainResult:
    """Run (or resume) one pretraining run; returns the final metrics, the step and why it stopped.

    `config` was checked where it was made (`electra.objectives.build_config` behind `electra pretrain`,
    `electra.pretrain` and `compare`), so it is trusted here: `check_config` runs once on the way into a run."""
    # the run fills in its vocabulary size and budget-sized schedule on its own copy: a caller's config, reused for
    # a second run on another corpus, must not carry the first one's
    config = copy.deepcopy(config)
    output_dir = inputs.output_dir
    resume_from = check_output_dir(
        config, output_dir, output_dir / "checkpoints", inputs.resume, inputs.overwrite, inputs.size_to_budget
    )

    accelerator = make_accelerator(config.mixed_precision)
    world = accelerator.num_processes
    before = _process_layout(config, inputs, accelerator, resume_from is not None)
    micro_batch = config.train_batch_size // (world * config.gradient_accumulation_steps)
    set_seed(config.seed)
    tokenizer, dataset = tokenizer_and_examples(config, inputs, accelerator, resume_from is not None)
    config.vocab_size = len(tokenizer)
    if inputs.size_to_budget and config.flops_budget and resume_from is None:
        steps = size_to_budget(config, config.flops_budget, inputs.keep_warmup)
        accelerator.print(
            f"--flops-budget {config.flops_budget:.3g} buys {steps} steps (warmup {config.warmup_steps})"
        )
    args = train_args(config, output_dir, accelerator.device.type == "cuda", world)
    args.elastic = before != world  # the checkpoint's random streams are those of other processes
    collate = PretrainingCollator(
        tokenizer.pad_token_id, pad_to=config.max_seq_length if args.compile else None
    )
    where = (accelerator.process_index, world, loader_workers(config))
    source, held_out, counts = batch_source(config, inputs, tokenizer, dataset, collate, micro_batch, where)
    model = build_pretraining_model(config, tokenizer, token_counts=counts)
    if config.init_from is not None and resume_from is None:
        _start_from_initial_weights(model, config.init_from, accelerator)
    if resume_from is None and accelerator.is_main_process:
        record_new_run(config, inputs, tokenizer, world, loader_workers(config))

    task = PretrainingTask(model, source, config, held_out, micro_batch)
    accelerator.print(_run_line(task, args, world, micro_batch))
    resumed_at = checkpoint_step(resume_from) if resume_from is not None else None
    result = Engine(args, accelerator).fit(task, resume_from)

    finished_before = result.step == resumed_at and (output_dir / "summary.json").is_file()
    if finished_before:
        # A finished run resumed with nothing left to do: its exports, cards and summary describe the training
        # that happened; rewritten from this invocation they would lose every metric.
        how = how_to_go_on(result.stop_reason, output_dir)
        accelerator.print(f"{output_dir} already finished at step {result.step}; nothing to do ({how}).")
    elif accelerator.is_main_process:
        _export(task, inputs, tokenizer, result, accelerator)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return PretrainResult(
        result.step,
        result.stop_reason,
        result.metrics,
        output_dir,
        accelerator.is_main_process,
        trained=not finished_before,
    )


def _start_from_initial_weights(model: PretrainingModel, init_from: Any, accelerator: Any) -> None:
    """`--init-from`: the checkpoint's weights into a fresh run's model, saying which parts start fresh."""
    fresh = load_initial_weights(model, init_from)
    accelerator.print(
        f"continuing from {init_from}: "
        + "; ".join(f"{part}: {len(names)} tensor(s) fresh" for part, names in fresh.items())
        + ("" if "generator" in fresh or model.generator is None else "; generator: fresh")
    )


def _run_line(task: PretrainingTask, args: TrainArgs, world: int, micro_batch: int) -> str:
    """The line a run starts with: its data, parameters, batch layout, FLOPs per step, held-out examples, and
    whether the first step compiles."""
    config, source, model, held_out = task.config, task.source, task.model, task.held_out
    return (
        f"{source.describe()} | {sum(p.numel() for p in model.parameters()):,} parameters | batch "
        f"{config.train_batch_size} = {world} process{'es' if world != 1 else ''} x {micro_batch} x "
        f"{config.gradient_accumulation_steps} accumulation | {task.flops_per_step:.3g} train FLOPs/step"
        + (f" | {len(held_out):,} held out" if held_out is not None else "")
        + (
            f" | torch.compile ({args.compile_mode}): the first step compiles for a minute or two"
            if args.compile
            else ""
        )
    )


def _export(
    task: PretrainingTask, inputs: RunInputs, tokenizer: Any, result: TrainResult, accelerator: Any
) -> None:
    """A trained run's export (the models, their cards and summary.json, by the main process) and a line naming
    what was written."""
    last = dict(result.metrics, step=result.step)
    facts = card_facts(
        task.config, inputs, task.model, tokenizer, result, task.source.describe(), task.held_out
    )
    written = export_run(
        task.model, tokenizer, inputs.output_dir, facts, dict(last, stop_reason=result.stop_reason), task
    )
    accelerator.print(
        f"done at step {result.step} ({result.stop_reason}); exports: "
        + ", ".join(str(v) for v in written.values())
    )


def _process_layout(config: PretrainConfig, inputs: RunInputs, accelerator: Any, resumed: bool) -> int:
    """How the global batch is shared over this launch's processes (`config.gradient_accumulation_steps` set for
    it); returns the processes the run had before (this launch's, unless an `--elastic` resume changes them)."""
    world, before = accelerator.num_processes, accelerator.num_processes
    output_dir = inputs.output_dir
    if resumed:
        check_resume(output_dir, inputs, world, config, loader_workers(config))
        config.gradient_accumulation_steps, before = resumed_layout(output_dir, config, world)
    if config.train_batch_size % (world * config.gradient_accumulation_steps):
        raise UserError(
            f"train_batch_size {config.train_batch_size} is not divisible by processes ({world}) x "
            f"gradient_accumulation_steps ({config.gradient_accumulation_steps})."
        )
    if before != world:
        accelerator.print(
            f"{spelled(RunInputs, 'elastic')}: continuing a run of {before} process(es) on {world}, {config.gradient_accumulation_steps} "
            f"accumulation steps: the global batch ({config.train_batch_size}) and the order of the examples are "
            "kept; not bit for bit: each process draws new random streams (masking, sampling, dropout)"
        )
        if accelerator.is_main_process:
            record_elastic_resume(output_dir, world, config.gradient_accumulation_steps)
    return before


def _is_main_process() -> bool:
    return process_state().is_main_process
