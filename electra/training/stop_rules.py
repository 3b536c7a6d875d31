"""When a training run stops: its last step, its FLOP budget, its time budget on either schedule clock, or a
scheduler's signal (`electra.training.preemption`: every process stops after the same update).

The fit loop asks `StopRules` twice per update: `after_update` (every update; cheap, no device work on one process)
and `at_log` (at log steps, where several processes also agree on the time budget). Early stopping is the
engine's evaluation's call and sets `reason` itself.

The time budget is the hard one. One process reads its own clock after every update. Several processes must stop
at the same update, so they agree on a step: at each log step, from the last window's pace (the steps clock), and
before their first log step after updates 1, 2, 4, 8, ... from the pace since update 1 (a handful of waits per
run); between agreements each stops at the agreed step without talking. On the time clock the budget is the whole
run's (resumptions included) and the learning-rate decay ends there (`TimeBudgetClock`); on the steps clock it is
this invocation's.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.distributed as dist

from electra.training import preemption
from electra.training.optim import TimeBudgetClock


class StopRules:
    """The stop reason of a run in progress: "max_steps" while it goes on, else the rule that ended it."""

    def __init__(
        self,
        args: Any,
        accelerator: Any,
        clock: TimeBudgetClock | None,
        start_step: int,
        elapsed_before: float,
    ) -> None:
        self.args, self.accelerator, self.clock = args, accelerator, clock
        self.reason = "max_steps"
        self.start_step, self.elapsed_before = start_step, elapsed_before
        self.first_log = (start_step // args.log_every + 1) * args.log_every
        self.deadline: int | None = None  # the step the processes agreed the budget runs out at
        self.run_start = time.perf_counter()
        self.first_step_end: float | None = None
        self.flag_group: Any = None  # where several processes sum their preemption flags (`_preempted`)

    @property
    def stopped(self) -> bool:
        return self.reason != "max_steps"

    @property
    def preempted(self) -> bool:
        return self.reason == "preempted"

    @property
    def spent_before(self) -> float:
        """What earlier invocations spent of the budget: the time clock's is the whole run's."""
        return 0.0 if self.clock is None else self.elapsed_before

    def seconds(self) -> float:
        """Training seconds of the whole run so far, resumptions included."""
        return self.elapsed_before + time.perf_counter() - self.run_start

    def check_resumed(self, flops_spent: float) -> None:
        """A checkpoint whose budget is already spent trains no further step (and is not exported again)."""
        if self.args.flops_budget is not None and flops_spent >= self.args.flops_budget:
            self.reason = "flops_budget"
        elif self.clock is not None and self.args.time_budget is not None:
            if self.elapsed_before >= self.args.time_budget:
                self.reason = "time_budget"

    def after_update(self, step: int, flops_spent: float) -> bool:
        """Whether update `step` is the run's last (its log, evaluation and checkpoint follow)."""
        if self._preempted():  # first: every process takes part in the agreement at every update
            self.reason = "preempted"
            return True
        if self.args.flops_budget is not None and flops_spent >= self.args.flops_budget:
            self.reason = "flops_budget"
            return True
        if step == self.args.max_steps:
            return True
        if self.clock is not None and self.clock.finished(step):  # the decay has reached zero
            self.reason = "time_budget"
            return True
        if self.first_step_end is None:
            self.first_step_end = time.perf_counter()
        if step < self.first_log and _is_power_of_two(step - self.start_step):
            out_of_time, self.deadline = self._probe_budget(step)
            if out_of_time:
                self.reason = "time_budget"
                return True
        if self._past_deadline(step):
            self.reason = "time_budget"
            return True
        return False

    def _preempted(self) -> bool:
        """Whether a scheduler's signal reached any process (`electra.training.preemption`): one process reads its
        own flag; several sum theirs, one number an update, so that all stop after the same update."""
        mine = preemption.requested() is not None
        if self.accelerator.num_processes == 1:
            return mine
        if self.flag_group is None:  # made on the first update, by every process at once
            # The flag travels on the CPU (gloo): read back from a GPU, it would wait for the step every update.
            on_cpu = self.accelerator.device.type == "cpu"
            self.flag_group = dist.group.WORLD if on_cpu else dist.new_group(backend="gloo")
        flags = torch.tensor([int(mine)])
        dist.all_reduce(flags, group=self.flag_group)
        return bool(flags.item())

    def at_log(self, step: int, step_seconds: float) -> bool:
        """At a log step that did not end the run: whether the time budget is spent, decided alike on every
        process, and on the steps clock the step it runs out at, agreed as the earliest any process projects
        from its own pace (`step_seconds` an update). On the time clock the agreed time re-anchors the clock."""
        budget = self.args.time_budget
        if budget is None:
            return False
        here = time.perf_counter() - self.run_start
        if self.clock is None:
            out_of_time, self.deadline = self._agreed_end(here, step, step_seconds)
        else:
            seconds = torch.tensor(
                [self.elapsed_before + here], dtype=torch.float64, device=self.accelerator.device
            )
            agreed = float(self.accelerator.gather(seconds).max())  # the slowest process's time
            self.clock.observe(step, agreed)
            out_of_time = agreed >= budget
        if out_of_time:
            self.reason = "time_budget"
        return out_of_time

    def _agreed_end(self, spent: float, step: int, step_seconds: float | None) -> tuple[bool, int | None]:
        """Whether any process has spent the time budget (`spent` seconds of it here), and the earliest step at
        which one projects it spent from its own pace (`step_seconds` an update; None before it has one)."""
        budget = self.args.time_budget
        ends = math.inf
        if step_seconds is not None:
            ends = step + max(1, math.ceil(max(budget - spent, 0.0) / max(step_seconds, 1e-9)))
        mine = torch.tensor([spent, float(ends)], dtype=torch.float64, device=self.accelerator.device)
        every = self.accelerator.gather(mine).reshape(-1, 2)
        soonest = float(every[:, 1].min())
        return bool(every[:, 0].max() >= budget), None if math.isinf(soonest) else int(soonest)

    def _probe_budget(self, step: int) -> tuple[bool, int | None]:
        """Before the first log step, several processes agree on the time budget after updates 1, 2, 4, ...:
        whether it is spent and (from update 2 on) the step it runs out at, projected from the pace since the
        first update (which carries start-up and compilation)."""
        if self.args.time_budget is None or self.accelerator.num_processes == 1:
            return False, None
        updates = step - self.start_step
        now = time.perf_counter()
        pace = (now - self.first_step_end) / (updates - 1) if updates > 1 else None
        return self._agreed_end(self.spent_before + now - self.run_start, step, pace)

    def _past_deadline(self, step: int) -> bool:
        """Between log steps, whether the time budget is spent: one process reads its own clock (no device work);
        several stop at the step they last agreed on."""
        if self.args.time_budget is None:
            return False
        if self.accelerator.num_processes == 1:
            return self.spent_before + time.perf_counter() - self.run_start >= self.args.time_budget
        return self.deadline is not None and step >= self.deadline


def _is_power_of_two(count: int) -> bool:
    return count > 0 and count & (count - 1) == 0
