"""The one training loop: pretraining, GLUE, SQuAD and TLM each plug a `Task` into it.

The engine owns everything a training run needs that is not about the task: AdamW over parameter groups with one
no-decay rule (`electra.training.optim`), the warmup/decay schedule, gradient accumulation, clipping, mixed precision
(Accelerate), `torch.compile`, a progress bar, CSV and TensorBoard logs with namespaced scalars (`train/...`,
`eval/...`), a FLOP meter, periodic atomic checkpoints with exact resume (`electra.export.checkpoint`), evaluation with
early stopping and best-state restore, and the stop rules (max steps, FLOP budget, early stopping).

A task supplies only what is its own: the model, its batches (from any step, so a resumed run sees the data an
uninterrupted one would), how a batch becomes a loss and metrics, and optionally how to evaluate, how many tokens
and FLOPs a step costs, and any state of its own that a checkpoint must keep.

Per update the order is fixed: forward and backward of every micro-batch, clip, optimizer step, scheduler step,
zero the gradients. Metrics stay on the device until a logging step, so an update never waits for the device.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from electra.core.config import PretrainConfig
from electra.core.cpu_memory import keep_freed_memory
from electra.core.errors import UserError
from electra.core.output_lock import output_lock
from electra.core.outputs import StepOutput
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled, spelling
from electra.export.checkpoint import (
    checkpoint_processes,
    checkpoint_step,
    latest_intact_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_tensors_atomically,
)
from electra.flops.peak import cached_matmul_peak, matmul_peak, native_precision, peak_dtype
from electra.nn.lane_attention import use_lanes
from electra.training import preemption
from electra.training.meters import LogWindow, MfuMeter
from electra.training.optim import (
    TimeBudgetClock,
    build_adamw,
    layerwise_lr_groups,
    parameter_groups,
    schedule_on_clock,
)
from electra.training.processes import make_accelerator, seed_process, split_rng_per_process
from electra.training.run_log import default_report_to, progress_off
from electra.training.stop_rules import StopRules
from electra.training.trackers import RunLog

arg = spelling(RunInputs)  # --resume on the command line, resume=True in Python

BEST_WEIGHTS = "best.safetensors"


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


@dataclass
class _Run:
    """A fit in progress: the counters a checkpoint keeps, and what its log steps and stop rules use."""

    step: int = 0
    flops_spent: float = 0.0
    elapsed_before: float = 0.0  # training seconds of earlier invocations (a resumed run's)
    best: dict[str, Any] | None = None
    evaluations: list[dict[str, float]] = field(default_factory=list)
    last: dict[str, float] = field(default_factory=dict)  # the latest logged row
    warned_warmup: bool = False
    log: RunLog | None = None
    progress: Any = None  # the tqdm bar
    window: LogWindow | None = None
    mfu: MfuMeter | None = None
    stops: StopRules | None = None


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


# Said at the start of an fp32 run on a CPU that multiplies bf16 natively: the step is then mostly bf16 GEMMs, and on
# a 2-core Xeon with AMX ELECTRA-Small's step ran 1.9x as fast (README "Speed").
BF16_HINT = (
    "note: this CPU multiplies bf16 natively (AMX or AVX-512-BF16): mixed precision bf16 trains faster here, about "
    "1.9x at ELECTRA-Small's shape on one such CPU (--mixed-precision bf16, or --set mixed_precision=bf16 where a "
    "command has no such flag)."
)
_hinted = False  # the hint is said once per process, not once per GLUE task and seed


class Engine:
    def __init__(self, args: TrainArgs, accelerator: Any = None):
        if accelerator is None:
            accelerator = make_accelerator()
        self.args = args
        self.accelerator = accelerator

    @property
    def checkpoints_dir(self) -> Path | None:
        """Where checkpoints are, whether or not this run writes any: a `--resume` without the first run's
        `--save-every` (the consumers' default is 0, and it is a setting a resume may change) had looked nowhere,
        and trained a killed seed or stage again from its first step beside the checkpoints it could continue."""
        return None if self.args.output_dir is None else self.args.output_dir / "checkpoints"

    @property
    def saves_checkpoints(self) -> bool:
        return self.args.output_dir is not None and self.args.save_every > 0

    def latest_checkpoint(self) -> Path | None:
        """The newest intact checkpoint to resume from (damaged newer ones are reported and skipped)."""
        directory = self.checkpoints_dir
        return latest_intact_checkpoint(directory, self._notice) if directory is not None else None

    def resume_checkpoint(self, resume: bool, what: str, finished: bool = False) -> Path | None:
        """`latest_checkpoint()` when `resume`; a resume that finds none, where an earlier run left its folder,
        says that `what` trains again from its first step (`finished`: it had ended, but kept no weights). That
        was silent, and a run started without `--save-every` (which keeps none) looked continued."""
        if not resume:
            return None
        found = self.latest_checkpoint()
        if found is None and self.args.output_dir is not None and self.args.output_dir.is_dir():
            state = "finished but kept no checkpoint of its weights" if finished else "holds no checkpoint"
            self._notice(
                f"{arg('resume')}: {self.args.output_dir} {state} (checkpoints are kept with "
                f"{spelled(PretrainConfig, 'save_every')} N); {what} "
                "trains again from its first step."
            )
        return found

    def _notice(self, text: str) -> None:
        """A line for the user beside the results, on standard error (once, from the main process): on standard
        output it ended up inside `electra squad ... > results.json`, which then did not parse."""
        self.accelerator.print(text, file=sys.stderr)

    def _warn_if_the_budget_ends_in_warmup(self, end_step: int) -> bool:
        """On the time clock the warmup stays in steps: where the budget ends inside it, the rate never reaches its
        peak, let alone decays, and the run had said nothing (a Small preset's 10,000 warmup steps on a CPU).
        Returns whether it warned."""
        warmup = self.args.warmup_steps
        if end_step > warmup:
            return False
        self._notice(
            f"WARNING: the time budget ends around step {end_step:,}, inside the {warmup:,}-step warmup: the "
            f"learning rate will not reach its peak, let alone decay; pass a shorter warmup ({spelled(None, 'warmup_steps', '--set warmup_steps')}="
            f"{max(1, end_step // 10):,}, a tenth of the steps that fit) or a larger budget."
        )
        return True

    def _hint_bf16(self) -> None:
        global _hinted
        if not _hinted:
            _hinted = True
            self._notice(BF16_HINT)

    def _refuse_earlier_checkpoints(self) -> None:
        """A fresh run must not start beside another run's checkpoints: pruning keeps the highest steps, so its
        own would be deleted as it wrote them, and a later --resume would continue the other run."""
        directory = self.checkpoints_dir
        earlier = (
            sorted(p.name for p in directory.glob("step-*") if p.is_dir()) if directory is not None else []
        )
        if earlier:
            raise UserError(
                f"{directory} holds an earlier run's checkpoints (up to {earlier[-1]}); continue that run with "
                f"{arg('resume')}, or start over with {arg('overwrite')} or another output."
            )

    def _refuse_other_process_count(self, checkpoint: Path) -> None:
        """A checkpoint continues only with as many processes as wrote it: each process restores its own random
        stream, and a task's batches are sharded by process. Every process reads the same files, so all of them
        refuse together (none is left waiting for another at a collective)."""
        saved, now = checkpoint_processes(checkpoint), self.accelerator.num_processes
        if saved and saved != now:
            launch = (
                "in one process (no launcher)"
                if saved == 1
                else f"with {saved} (torchrun --nproc_per_node {saved}, or accelerate launch --num_processes {saved})"
            )
            raise UserError(
                f"{arg('resume')}: {checkpoint} was written by {saved} process(es), this launch has {now}; resume "
                f"it {launch}, or start over with {arg('overwrite')}."
            )

    # ------------------------------------------------------------------------------------------------------
    def fit(self, task: Task, resume_from: Path | None = None) -> TrainResult:
        """Train `task` from scratch, or from the checkpoint `resume_from`, until a stop rule fires.

        The main process holds the output folder's lock throughout: a second run there is refused."""
        writer = self.args.output_dir if self.accelerator.is_main_process else None
        with output_lock(writer), preemption.deferring():
            return self._fit(task, resume_from)

    def _fit(self, task: Task, resume_from: Path | None) -> TrainResult:
        args, acc = self.args, self.accelerator
        model, optimizer, scheduler, clock = self._set_up(task, resume_from)
        run, batches, saved_window = self._restore(task, model, optimizer, scheduler, clock, resume_from)
        model, optimizer = acc.prepare(model, optimizer)
        if args.compile:
            model = torch.compile(model, mode=None if args.compile_mode == "default" else args.compile_mode)
        run.log = RunLog(
            args.output_dir or Path("."),
            enabled=args.output_dir is not None and acc.is_main_process,
            accelerator=acc,
            resume_step=run.step,
            report_to=args.report_to,
            run_name=args.description,
        )
        run.progress = _progress_bar(args, run.step, enabled=args.progress and acc.is_main_process)
        if clock is not None:
            clock.start(run.step, run.elapsed_before)
        task.before_training(self._plain(model), resumed=resume_from is not None)
        run.mfu = MfuMeter(lambda fresh: self._matmul_peak(task, fresh), acc.num_processes)
        stopping = args.early_stopping
        if stopping is not None and stopping.evaluate_at_start and resume_from is None:
            run.best = self._evaluate(task, model, 0, run.log, run.evaluations, run.best)
        model.train()
        run.window = LogWindow(acc.device, saved_window)
        run.stops = stops = StopRules(args, acc, clock, run.step, run.elapsed_before)
        if resume_from is not None:  # a resumed run whose budget was already spent takes no further step
            stops.check_resumed(run.flops_spent)
        try:
            while run.step < args.max_steps and not stops.stopped:
                micro_batches, grad_norm = self._update(
                    task, model, optimizer, scheduler, batches, run.window
                )
                run.step += 1
                step_flops = task.flops(micro_batches)
                if step_flops is not None:
                    run.flops_spent += step_flops
                run.progress.update(1)
                done = stops.after_update(run.step, run.flops_spent)
                if run.step % args.log_every == 0 or done:
                    done = self._log_step(task, run, scheduler, grad_norm, step_flops is not None, done)
                if ((args.eval_every and run.step % args.eval_every == 0) or done) and not stops.preempted:
                    self._evaluate_and_watch(task, model, run)
                if self.saves_checkpoints and (run.step % args.save_every == 0 or done or stops.stopped):
                    self._save(task, model, optimizer, scheduler, run)
        finally:  # an error leaves its one line last, not a progress bar drawn after it
            run.progress.close()
            run.log.close()
        if stops.preempted:  # its checkpoint is saved (when the run keeps them); --resume continues from it
            raise preemption.Preempted(run.step, preemption.requested(), saved=self.saves_checkpoints)
        if stopping is not None and stopping.restore_best and run.best is not None:
            self._restore_best(self._plain(model))
        seconds = stops.seconds()
        return TrainResult(
            run.step, stops.reason, run.last, run.flops_spent, seconds, run.evaluations, run.best
        )

    def _set_up(
        self, task: Task, resume_from: Path | None
    ) -> tuple[nn.Module, Any, Any, TimeBudgetClock | None]:
        """The model on its device, its optimizer, schedule and schedule clock; refusals and warnings first."""
        args, acc = self.args, self.accelerator
        if resume_from is None:
            self._refuse_earlier_checkpoints()
        elif not args.elastic:
            self._refuse_other_process_count(resume_from)
        model = task.model
        split_rng_per_process(acc.process_index, acc.num_processes)  # a resumed run then restores its own
        # On the device before the optimizer exists: fused AdamW needs CUDA parameters to choose itself.
        model.to(acc.device)
        if acc.device.type == "cpu":
            keep_freed_memory()  # the next step reuses this step's blocks instead of faulting them in again
        self._warn_about_precision()
        if args.cpu_dropout == "lanes":
            use_lanes(model)  # a no-op where the task built it so; other devices keep torch's path inside
        optimizer = build_adamw(
            task.parameter_groups(model, args),
            args.learning_rate,
            args.adam_betas,
            args.adam_epsilon,
            args.weight_decay,
        )
        multiplier, clock = schedule_on_clock(
            args.schedule, args.warmup_steps, args.max_steps, args.schedule_clock, args.time_budget
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
        if args.schedule == "linear" and args.warmup_steps >= args.max_steps and resume_from is None:
            self._notice(
                f"WARNING: warmup_steps={args.warmup_steps} is not below max_steps={args.max_steps}: the learning "
                f"rate only warms up (to {args.learning_rate * args.max_steps / args.warmup_steps:.3g}) and never "
                f"decays; pass a smaller warmup ({spelled(None, 'warmup_steps', '--set warmup_steps')}=N) for the whole schedule."
            )
        return model, optimizer, scheduler, clock

    def _warn_about_precision(self) -> None:
        acc = self.accelerator
        if not native_precision(acc.device, _matmul_dtype(acc)):
            self._notice(
                f"WARNING: this CPU has no native {acc.mixed_precision} matmuls: the run will be far slower than in "
                f"fp32 ({spelled(PretrainConfig, 'mixed_precision')} no)."
            )
        elif (
            acc.device.type == "cpu"
            and acc.mixed_precision == "no"
            and native_precision("cpu", torch.bfloat16)
        ):
            self._hint_bf16()

    def _restore(
        self,
        task: Task,
        model: nn.Module,
        optimizer: Any,
        scheduler: Any,
        clock: Any,
        resume_from: Path | None,
    ) -> tuple[_Run, Iterator[Any], dict[str, Any]]:
        """The run's counters, its batches from the step it starts at, and the log window a checkpoint kept."""
        run = _Run()
        if resume_from is not None:
            run.step = checkpoint_step(resume_from)
        # may draw from the RNG: before the checkpoint restores it
        batches = task.batches(run.step * self.args.gradient_accumulation_steps)
        if resume_from is None:
            return run, batches, {}
        rank = self.accelerator.process_index
        state = load_checkpoint(
            resume_from, model, optimizer, scheduler, rank=None if self.args.elastic else rank
        )
        if self.args.elastic:
            seed_process(self.args.seed + 7919 * run.step, rank)
        run.flops_spent, run.elapsed_before = state.get("flops_spent", 0.0), state.get("elapsed_seconds", 0.0)
        run.best, run.evaluations = state.get("best"), state.get("evaluations", [])
        if clock is not None:
            clock.load_state_dict(state.get("schedule_clock", {}))
        task.load_state_dict(state.get("task", {}))
        self._notice(f"resumed from {resume_from} at step {run.step}")
        return run, batches, state.get("log_window") or {}

    def _update(
        self,
        task: Task,
        model: nn.Module,
        optimizer: Any,
        scheduler: Any,
        batches: Iterator[Any],
        window: LogWindow,
    ) -> tuple[list[Any], Any]:
        """One optimizer update: forward and backward of every micro-batch, clip, step, schedule, zero."""
        acc, accumulation = self.accelerator, self.args.gradient_accumulation_steps
        micro_batches = []
        for micro in range(accumulation):
            host_batch = next(batches)
            micro_batches.append(host_batch)
            window.tokens += task.tokens(host_batch)  # counted on the host: no device sync
            batch = _to_device(host_batch, acc.device)
            with contextlib.nullcontext() if micro == accumulation - 1 else acc.no_sync(model):
                with acc.autocast():
                    output = task.step(model, batch)
                acc.backward(output.loss / accumulation)
            window.add(output.metrics, accumulation)
        clip = self.args.max_grad_norm
        grad_norm = acc.clip_grad_norm_(model.parameters(), clip) if clip else None
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        window.steps += 1
        return micro_batches, grad_norm

    def _log_step(
        self, task: Task, run: _Run, scheduler: Any, grad_norm: Any, counts_flops: bool, done: bool
    ) -> bool:
        """Reduce the window into a row, write and show it; then, unless the run ends here, ask every process
        whether the time budget is spent. Returns whether this update is the run's last."""
        args, clock = self.args, run.stops.clock
        metrics, tokens_per_second, step_seconds = run.window.close(self.accelerator)
        metrics.update(
            learning_rate=scheduler.get_last_lr()[0],
            grad_norm=float(grad_norm) if grad_norm is not None else math.nan,
            tokens_per_second=tokens_per_second,
            elapsed_seconds=run.stops.seconds(),
        )
        if counts_flops:
            metrics["flops"] = run.flops_spent
        mfu = run.mfu(tokens_per_second, task.executed_flops_per_token, done)
        if mfu is not None:
            metrics["mfu"] = mfu
        if not math.isfinite(metrics.get("loss", 0.0)):
            raise UserError(
                f"{args.description} step {run.step}: the loss is not finite ({metrics['loss']}); lower the "
                "learning rate or use fp32."
            )
        run.last = metrics
        run.log.log(run.step, {f"train/{k}": v for k, v in metrics.items()})
        run.progress.set_postfix(_postfix(metrics, task.progress_keys))
        if progress_off():  # --no-progress: "logs only", a line per log step (main process)
            total = (clock.end_step() if clock is not None else None) or args.max_steps
            self._notice(_log_line(args.description, run.step, total, metrics, task))
        run.window.reset()
        if not done:
            done = run.stops.at_log(run.step, step_seconds)
        if clock is not None and clock.end_step() is not None:  # the bar counts the steps that fit the budget
            run.progress.total = clock.end_step()
            run.progress.refresh()
            if not done and not run.warned_warmup:
                run.warned_warmup = self._warn_if_the_budget_ends_in_warmup(clock.end_step())
        return done

    def _evaluate_and_watch(self, task: Task, model: nn.Module, run: _Run) -> None:
        """Evaluate; under early stopping with patience, stop once the watched metric has stalled that long."""
        previous = run.best
        run.best = self._evaluate(task, model, run.step, run.log, run.evaluations, run.best)
        stopping = self.args.early_stopping
        stalled = run.best is previous and run.best is not None and stopping is not None
        if stalled and stopping.patience is not None:
            if run.step - run.best["step"] >= stopping.patience * self.args.eval_every:
                run.stops.reason = "early_stopping"

    def _save(self, task: Task, model: nn.Module, optimizer: Any, scheduler: Any, run: _Run) -> None:
        acc = self.accelerator
        trainer_state = {
            "flops_spent": run.flops_spent,
            "elapsed_seconds": run.stops.seconds(),
            "best": run.best,
            "evaluations": run.evaluations,
            "task": task.state_dict(),
            "log_window": run.window.state(acc),
        }
        if run.stops.clock is not None:
            trainer_state["schedule_clock"] = run.stops.clock.state_dict()
        save_checkpoint(
            self.checkpoints_dir,
            run.step,
            self._plain(model),
            optimizer,
            scheduler,
            trainer_state,
            rank=acc.process_index,
            is_main=acc.is_main_process,
            barrier=acc.wait_for_everyone,
            keep=self.args.keep_checkpoints,
        )

    def _matmul_peak(self, task: Task, fresh: bool = False) -> float | None:
        """The device's dense matmul rate in the run's precision (fp32's where that precision is emulated), in
        FLOP/s, where the task measured what a token executes and this process logs; None otherwise. The first
        reading is shared by the runs of a process; `fresh` takes a new one."""
        acc = self.accelerator
        if not task.executed_flops_per_token or not acc.is_main_process:
            return None
        read = matmul_peak if fresh else cached_matmul_peak
        return read(str(acc.device), peak_dtype(acc.device, _matmul_dtype(acc)))

    def _plain(self, model: nn.Module) -> nn.Module:
        """The module itself, without Accelerate's or torch.compile's wrapper: what checkpoints store (no
        `_orig_mod.` prefixes), what evaluation runs (eager: no recompilation for eval mode or another batch
        size) and what the start-up FLOP check measures (FlopCounterMode does not run inside a compiled graph)."""
        return self.accelerator.unwrap_model(model, keep_torch_compile=False)

    # ------------------------------------------------------------------------------------------------------
    def _evaluate(self, task: Task, model, step: int, log: RunLog, evaluations: list, best):
        """Evaluate, log `eval/...`, and keep the best state when the watched metric improves."""
        unwrapped = self._plain(model)
        was_training = unwrapped.training
        unwrapped.eval()
        with torch.no_grad():
            metrics = task.evaluate(unwrapped)
        unwrapped.train(was_training)
        if metrics is None:
            return best
        evaluations.append({"step": step, **metrics})
        log.log(step, {f"eval/{k}": v for k, v in metrics.items()})
        stopping = self.args.early_stopping
        if stopping is None:
            return best
        value = metrics.get(stopping.metric)
        if value is None:
            raise ValueError(f"early stopping watches {stopping.metric!r}, which evaluate() did not return")
        if stopping.better(value, None if best is None else best["value"]):
            best = {"step": step, "metric": stopping.metric, "value": value, "metrics": metrics}
            if stopping.restore_best:
                self._keep_best(unwrapped)
        return best

    def _keep_best(self, model: nn.Module) -> None:
        """The best weights: in memory, and beside the checkpoints so a resumed run can still restore them."""
        self._best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        if self.saves_checkpoints and self.accelerator.is_main_process:
            save_tensors_atomically(self._best_state, self.checkpoints_dir / BEST_WEIGHTS)

    def _restore_best(self, model: nn.Module) -> None:
        state = getattr(self, "_best_state", None)
        if state is None and self.checkpoints_dir is not None:
            path = self.checkpoints_dir / BEST_WEIGHTS
            state = load_file(str(path)) if path.is_file() else None
        if state is not None:
            model.load_state_dict(state, strict=False)


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


def _to_device(batch: Any, device: torch.device) -> Any:
    if torch.is_tensor(batch):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def _matmul_dtype(accelerator: Any) -> torch.dtype:
    """The precision the run's matmuls execute in under Accelerate's autocast."""
    precisions = {"bf16": torch.bfloat16, "fp16": torch.float16}
    return precisions.get(str(accelerator.mixed_precision), torch.float32)


def _progress_bar(args: TrainArgs, step: int, enabled: bool):
    return tqdm(
        total=args.max_steps, initial=step, disable=not enabled or progress_off(), desc=args.description
    )


def _log_line(description: str, step: int, total: int, metrics: dict[str, float], task: Task) -> str:
    """The progress bar's figures as one line, for a run whose bar is off (`--no-progress`, a batch job's log):
    before, such a run wrote nothing between its start and its end."""
    shown = ", ".join(f"{name} {value}" for name, value in _postfix(metrics, task.progress_keys).items())
    return f"{description} step {step}/{total}: {shown}"


def _postfix(metrics: dict[str, float], keys: dict[str, str]) -> dict[str, str]:
    out = {"loss": f"{metrics['loss']:.3f}"} if "loss" in metrics else {}
    out.update({short: f"{metrics[key]:.3f}" for key, short in keys.items() if key in metrics})
    out["tok/s"] = f"{metrics['tokens_per_second']:.0f}"
    if "mfu" in metrics:
        out["mfu"] = f"{metrics['mfu']:.0%}"
    return out
