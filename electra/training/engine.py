"""The one training loop: pretraining, GLUE, SQuAD and TLM each plug a `Task` (`electra.training.task`) into it.

The engine owns everything a training run needs that is not about the task: AdamW over parameter groups with one
no-decay rule (`electra.training.optim`), the warmup/decay schedule, gradient accumulation, clipping, mixed precision
(Accelerate), `torch.compile`, a progress bar, CSV and TensorBoard logs with namespaced scalars (`train/...`,
`eval/...`), a FLOP meter, periodic atomic checkpoints with exact resume (`electra.training.run_checkpoints`, written by
`electra.export.checkpoint`), evaluation with early stopping and best-state restore, and the stop rules (max steps,
FLOP budget, early stopping).

Per update the order is fixed: forward and backward of every micro-batch, clip, optimizer step, scheduler step,
zero the gradients. Metrics stay on the device until a logging step, so an update never waits for the device.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from electra.core.config import PretrainConfig
from electra.core.cpu_memory import keep_freed_memory
from electra.core.errors import UserError
from electra.core.output_lock import output_lock
from electra.core.settings import spelled
from electra.flops.peak import cached_matmul_peak, matmul_peak, native_precision, peak_dtype
from electra.nn.lane_attention import use_lanes
from electra.training import preemption
from electra.training.meters import LogWindow, MfuMeter
from electra.training.optim import TimeBudgetClock, build_adamw, schedule_on_clock
from electra.training.processes import make_accelerator, split_rng_per_process
from electra.training.run_checkpoints import FitState, RunCheckpoints
from electra.training.run_log import progress_off
from electra.training.stop_rules import StopRules
from electra.training.task import Task, TrainArgs, TrainResult
from electra.training.trackers import RunLog

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
        self.checkpoints = RunCheckpoints(args, accelerator, self._notice)

    def latest_checkpoint(self) -> Path | None:
        """The newest intact checkpoint to resume from (damaged newer ones are reported and skipped)."""
        return self.checkpoints.latest()

    def resume_checkpoint(self, resume: bool, what: str, finished: bool = False) -> Path | None:
        """`latest_checkpoint()` when `resume`; a resume that finds none, where an earlier run left its folder,
        says that `what` trains again from its first step (`finished`: it had ended, but kept no weights)."""
        return self.checkpoints.for_resume(resume, what, finished)

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
        run, batches, saved_window = self.checkpoints.restore(
            task, model, optimizer, scheduler, clock, resume_from
        )
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
                if self.checkpoints.saves and (run.step % args.save_every == 0 or done or stops.stopped):
                    self.checkpoints.save(task, self._plain(model), optimizer, scheduler, run)
        finally:  # an error leaves its one line last, not a progress bar drawn after it
            run.progress.close()
            run.log.close()
        if stops.preempted:  # its checkpoint is saved (when the run keeps them); --resume continues from it
            raise preemption.Preempted(run.step, preemption.requested(), saved=self.checkpoints.saves)
        if stopping is not None and stopping.restore_best and run.best is not None:
            self.checkpoints.restore_best(self._plain(model))
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
            self.checkpoints.refuse_earlier()
        elif not args.elastic:
            self.checkpoints.refuse_other_process_count(resume_from)
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
        self, task: Task, run: FitState, scheduler: Any, grad_norm: Any, counts_flops: bool, done: bool
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

    def _evaluate_and_watch(self, task: Task, model: nn.Module, run: FitState) -> None:
        """Evaluate; under early stopping with patience, stop once the watched metric has stalled that long."""
        previous = run.best
        run.best = self._evaluate(task, model, run.step, run.log, run.evaluations, run.best)
        stopping = self.args.early_stopping
        stalled = run.best is previous and run.best is not None and stopping is not None
        if stalled and stopping.patience is not None:
            if run.step - run.best["step"] >= stopping.patience * self.args.eval_every:
                run.stops.reason = "early_stopping"

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
                self.checkpoints.keep_best(unwrapped)
        return best


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
