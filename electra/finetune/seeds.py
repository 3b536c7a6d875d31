"""The seed loop every fine-tuning command runs: each seed trained (or, on a resume, its finished result reused),
the best seed by its dev score, that seed's model kept, and the median over seeds.

The paper reports the median over several fine-tuning runs because a single run's dev score varies by a point or
more on the small GLUE tasks. A command plugs in what a seed is (`SeedJob`); the loop decides which seed is best and
when its model must be trained again to be saved (a resume that reuses a best seed whose model was never kept).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

Run = TypeVar("Run")


class SeedJob(Generic[Run]):
    """One command's seeds: how a seed is trained, scored, reported and kept. A command defines `finished`, `train`
    and `score`; the rest default to a job that keeps no model and says nothing."""

    saves: bool = False  # whether the best seed's model is kept (and so trained again when a resume lacks it)

    def finished(self, seed: int) -> Run | None:
        """A resume's finished result of `seed`, or None when it must be trained (or trained on)."""
        raise NotImplementedError

    def train(self, seed: int, first: bool) -> tuple[Run, Any]:
        """One seed's run and its model, recorded in the seed's folder; `first` shows the parameter groups."""
        raise NotImplementedError

    def score(self, run: Run) -> float:
        """The dev score the best seed is chosen by (NaN never wins)."""
        raise NotImplementedError

    def keep(self, seed: int, model: Any) -> None:
        """Keep `seed`'s model: it is the best so far (only called when `saves`)."""

    def saved_seed(self) -> int | None:
        """The seed whose model is kept (None: none)."""
        return None

    def save_again(self, seed: int) -> None:
        """Train `seed` again from its last checkpoint (the same seed gives the same run) and keep its model."""

    def report(self, seed: int, run: Run) -> None:
        """Say how the seed went, once it is done."""

    def release(self) -> None:
        """Free what a finished seed held."""

    def finish(self) -> None:
        """After the last seed: wait until every process is there (the kept model is read back next)."""


def run_seeds(job: SeedJob[Run], seeds: Sequence[int]) -> tuple[list[Run], int]:
    """Every seed in order; returns the runs and the best seed (the first seed wins ties and NaN scores), whose
    model the job keeps when it saves models."""
    runs: list[Run] = []
    best_seed, best_score = seeds[0], -math.inf
    for index, seed in enumerate(seeds):
        run, model = job.finished(seed), None
        if run is None:
            run, model = job.train(seed, index == 0)
        score = job.score(run)
        if index == 0 or (not math.isnan(score) and score > best_score):
            best_seed, best_score = seed, -math.inf if math.isnan(score) else score
            if model is not None and job.saves:
                job.keep(seed, model)
        runs.append(run)
        job.report(seed, run)
        del model
        job.release()
    job.finish()
    if job.saves and job.saved_seed() != best_seed:
        job.save_again(best_seed)
    return runs, best_seed


def median(values: Sequence[float]) -> float:
    """The median of the defined values (NaN: an undefined correlation is not a score); NaN when there is none."""
    finite = [value for value in values if value is not None and not math.isnan(value)]
    return statistics.median(finite) if finite else math.nan


def spread(values: Sequence[float]) -> float:
    """Max - min of the defined values; NaN when there is none."""
    finite = [value for value in values if value is not None and not math.isnan(value)]
    return max(finite) - min(finite) if finite else math.nan
