"""What the fit loop measures between log steps: the metric window, and MFU against the device's matmul peak.

Metrics stay on the device until a log step (an update never waits for the device); tokens are counted on the
host. At a log step the window's means are reduced over processes and the window starts again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

# How often a run reads the matmul peak again: a neighbour's burst can only lower a reading, so the run keeps the
# highest one, and a start-up reading taken in a burst would otherwise inflate every MFU of the run. The second
# reading comes after FIRST_PEAK_REREAD_SECONDS, later ones every PEAK_REREAD_SECONDS, and the last log of a run
# takes one more where the latest is older than FIRST_PEAK_REREAD_SECONDS (so the model card's MFU of a run of a
# few minutes rests on more than its start-up reading; runs shorter than that pay for none).
FIRST_PEAK_REREAD_SECONDS = 60.0
PEAK_REREAD_SECONDS = 600.0
# An MFU above 1 can only mean the reading was taken in a burst: the peak is read again at once, at most
# IMPOSSIBLE_MFU_REREADS times a run and this many seconds apart (a host that stays busy would otherwise pay a
# reading, up to ~2.5 s on a CPU, at every log).
IMPOSSIBLE_MFU_REREAD_SECONDS = 5.0
IMPOSSIBLE_MFU_REREADS = 3


class LogWindow:
    """The updates since the last log step: metric sums (on the device), tokens (counted on the host), time.

    A resumed run continues the window its checkpoint was taken in (`saved`, from `state`), so the first row
    after a resume averages as many updates as the uninterrupted run's."""

    def __init__(self, device: torch.device, saved: dict[str, Any] | None = None) -> None:
        saved = saved or {}
        self.device = device
        self.sums: dict[str, Any] = {
            k: torch.tensor(v, device=device) for k, v in saved.get("sums", {}).items()
        }
        self.steps = saved.get("steps", 0)
        self.tokens = 0
        self.start = time.perf_counter()

    def add(self, metrics: dict[str, torch.Tensor], accumulation: int) -> None:
        """One micro-batch's metrics, as its share of an update of `accumulation` micro-batches."""
        for name, value in metrics.items():
            self.sums[name] = self.sums.get(name, 0.0) + value / accumulation

    def close(self, accelerator: Any) -> tuple[dict[str, float], float, float]:
        """(metric means over the window and the processes, tokens per second of all processes, seconds an
        update); the window is not reset (`reset`, once the log step's own work is done)."""
        seconds = time.perf_counter() - self.start
        means = {k: v / self.steps for k, v in self.sums.items()}
        reduced = (
            accelerator.reduce(torch.stack(list(means.values())).float(), reduction="mean") if means else None
        )
        tokens = accelerator.reduce(torch.tensor(float(self.tokens), device=self.device), reduction="sum")
        metrics = {k: float(v) for k, v in zip(means, reduced.tolist() if means else [])}
        return metrics, float(tokens) / max(seconds, 1e-9), seconds / max(self.steps, 1)

    def reset(self) -> None:
        self.sums, self.steps, self.tokens, self.start = {}, 0, 0, time.perf_counter()

    def state(self, accelerator: Any) -> dict[str, Any]:
        """The open window for a checkpoint: its update count and metric sums, the mean over processes (every
        process resumes with that mean, and the logged mean of means is unchanged)."""
        if not self.sums:
            return {"steps": self.steps, "sums": {}}
        names = list(self.sums)
        sums = torch.stack([torch.as_tensor(self.sums[name], device=self.device).float() for name in names])
        sums = accelerator.reduce(sums, reduction="mean")
        return {"steps": self.steps, "sums": dict(zip(names, sums.tolist()))}


class MfuMeter:
    """Model FLOPs utilisation: tokens/s × the FLOPs a token executes ÷ (the matmul peak × processes).

    `read_peak(fresh)` gives the device's peak in the run's precision (None where the task measured no
    FLOPs per token or this process does not log); the meter keeps the highest reading and reads again on the
    schedule above."""

    def __init__(self, read_peak: Callable[[bool], float | None], processes: int) -> None:
        self.read_peak, self.processes = read_peak, processes
        self.peak = read_peak(False)
        self.read_at, self.readings, self.impossible_rereads = time.perf_counter(), 1, 0

    def __call__(self, tokens_per_second: float, flops_per_token: float, last_log: bool) -> float | None:
        if not self.peak:
            return None
        if time.perf_counter() - self.read_at >= self._reread_interval(last_log):
            self._read_again()
        mfu = self._mfu(tokens_per_second, flops_per_token)
        if (
            mfu > 1.0
            and self.impossible_rereads < IMPOSSIBLE_MFU_REREADS
            and time.perf_counter() - self.read_at >= IMPOSSIBLE_MFU_REREAD_SECONDS
        ):
            self._read_again()
            self.impossible_rereads += 1
            mfu = self._mfu(tokens_per_second, flops_per_token)
        return mfu

    def _mfu(self, tokens_per_second: float, flops_per_token: float) -> float:
        return tokens_per_second * flops_per_token / (self.peak * self.processes)

    def _read_again(self) -> None:
        self.peak = max(self.peak, self.read_peak(True) or 0.0)
        self.read_at, self.readings = time.perf_counter(), self.readings + 1

    def _reread_interval(self, last_log: bool) -> float:
        interval = FIRST_PEAK_REREAD_SECONDS if self.readings == 1 else PEAK_REREAD_SECONDS
        return min(interval, FIRST_PEAK_REREAD_SECONDS) if last_log else interval
