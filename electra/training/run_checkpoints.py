"""A fit's checkpoints: where they are, which one a resume continues, the runs a checkpoint refuses, and what a
checkpoint keeps of a fit in progress beyond weights, optimizer and RNG (`FitState`).

The engine (`electra.training.engine`) holds one `RunCheckpoints` and asks it at set-up (refuse, restore), at every
save step, and for the best weights under early stopping; the files themselves are written and read atomically by
`electra.export.checkpoint`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors.torch import load_file
from torch import nn

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
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
from electra.training.meters import LogWindow, MfuMeter
from electra.training.processes import seed_process
from electra.training.stop_rules import StopRules
from electra.training.task import Task, TrainArgs
from electra.training.trackers import RunLog

arg = spelling(RunInputs)  # --resume on the command line, resume=True in Python

BEST_WEIGHTS = "best.safetensors"


@dataclass
class FitState:
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


class RunCheckpoints:
    """The checkpoints of the runs one engine trains, under `args.output_dir`/checkpoints; `notice` says a line to
    the user (standard error, main process)."""

    def __init__(self, args: TrainArgs, accelerator: Any, notice: Callable[[str], None]):
        self.args = args
        self.accelerator = accelerator
        self._notice = notice
        self._best_state: dict[str, Any] | None = None

    @property
    def directory(self) -> Path | None:
        """Where checkpoints are, whether or not this run writes any: a `--resume` without the first run's
        `--save-every` (the consumers' default is 0, and it is a setting a resume may change) had looked nowhere,
        and trained a killed seed or stage again from its first step beside the checkpoints it could continue."""
        return None if self.args.output_dir is None else self.args.output_dir / "checkpoints"

    @property
    def saves(self) -> bool:
        return self.args.output_dir is not None and self.args.save_every > 0

    def latest(self) -> Path | None:
        """The newest intact checkpoint to resume from (damaged newer ones are reported and skipped)."""
        directory = self.directory
        return latest_intact_checkpoint(directory, self._notice) if directory is not None else None

    def for_resume(self, resume: bool, what: str, finished: bool = False) -> Path | None:
        """`latest()` when `resume`; a resume that finds none, where an earlier run left its folder, says that
        `what` trains again from its first step (`finished`: it had ended, but kept no weights). That was silent,
        and a run started without `--save-every` (which keeps none) looked continued."""
        if not resume:
            return None
        found = self.latest()
        if found is None and self.args.output_dir is not None and self.args.output_dir.is_dir():
            state = "finished but kept no checkpoint of its weights" if finished else "holds no checkpoint"
            self._notice(
                f"{arg('resume')}: {self.args.output_dir} {state} (checkpoints are kept with "
                f"{spelled(PretrainConfig, 'save_every')} N); {what} "
                "trains again from its first step."
            )
        return found

    def refuse_earlier(self) -> None:
        """A fresh run must not start beside another run's checkpoints: pruning keeps the highest steps, so its
        own would be deleted as it wrote them, and a later --resume would continue the other run."""
        directory = self.directory
        earlier = (
            sorted(p.name for p in directory.glob("step-*") if p.is_dir()) if directory is not None else []
        )
        if earlier:
            raise UserError(
                f"{directory} holds an earlier run's checkpoints (up to {earlier[-1]}); continue that run with "
                f"{arg('resume')}, or start over with {arg('overwrite')} or another output."
            )

    def refuse_other_process_count(self, checkpoint: Path) -> None:
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

    def restore(
        self,
        task: Task,
        model: nn.Module,
        optimizer: Any,
        scheduler: Any,
        clock: Any,
        resume_from: Path | None,
    ) -> tuple[FitState, Iterator[Any], dict[str, Any]]:
        """The run's counters, its batches from the step it starts at, and the log window a checkpoint kept."""
        run = FitState()
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

    def save(self, task: Task, plain: nn.Module, optimizer: Any, scheduler: Any, run: FitState) -> None:
        """A checkpoint at `run.step` of `plain` (the model without Accelerate's or torch.compile's wrapper)."""
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
            self.directory,
            run.step,
            plain,
            optimizer,
            scheduler,
            trainer_state,
            rank=acc.process_index,
            is_main=acc.is_main_process,
            barrier=acc.wait_for_everyone,
            keep=self.args.keep_checkpoints,
        )

    def keep_best(self, model: nn.Module) -> None:
        """The best weights: in memory, and beside the checkpoints so a resumed run can still restore them."""
        self._best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        if self.saves and self.accelerator.is_main_process:
            save_tensors_atomically(self._best_state, self.directory / BEST_WEIGHTS)

    def restore_best(self, model: nn.Module) -> None:
        state = self._best_state
        if state is None and self.directory is not None:
            path = self.directory / BEST_WEIGHTS
            state = load_file(str(path)) if path.is_file() else None
        if state is not None:
            model.load_state_dict(state, strict=False)
