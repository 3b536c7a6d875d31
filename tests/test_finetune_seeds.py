"""The one seed loop (`electra.finetune.seeds.run_seeds`) on a job whose seeds are plain numbers: which seed is best,
when its model is kept, and when a resume must train the best seed again to keep it."""

from __future__ import annotations

import math

from electra.finetune.seeds import SeedJob, median, run_seeds, spread


class Seeds(SeedJob[dict]):
    """Seed s scores `scores[s]`; `done` holds the seeds a resume finds finished; `kept` the seed whose model is
    saved (as a fine-tuning output's model folder would say)."""

    saves = True

    def __init__(self, scores: dict[int, float], done: tuple[int, ...] = (), kept: int | None = None) -> None:
        self.scores, self.done, self.kept = scores, done, kept
        self.trained: list[int] = []
        self.saved: list[int] = []
        self.again: list[int] = []

    def finished(self, seed: int) -> dict | None:
        return {"seed": seed} if seed in self.done else None

    def train(self, seed: int, first: bool) -> tuple[dict, str]:
        self.trained.append(seed)
        return {"seed": seed}, f"model of seed {seed}"

    def score(self, run: dict) -> float:
        return self.scores[run["seed"]]

    def keep(self, seed: int, model: str) -> None:
        assert model == f"model of seed {seed}"
        self.saved.append(seed)
        self.kept = seed

    def saved_seed(self) -> int | None:
        return self.kept

    def save_again(self, seed: int) -> None:
        self.again.append(seed)
        self.kept = seed


def test_the_best_seed_is_kept_as_the_seeds_run():
    job = Seeds({1: 0.5, 2: 0.7, 3: 0.6})
    runs, best = run_seeds(job, [1, 2, 3])
    assert best == 2 and [run["seed"] for run in runs] == [1, 2, 3]
    assert job.trained == [1, 2, 3] and job.saved == [1, 2] and job.again == []


def test_a_nan_score_never_wins_and_the_first_seed_wins_ties():
    job = Seeds({1: math.nan, 2: 0.4, 3: 0.4})
    _, best = run_seeds(job, [1, 2, 3])
    assert best == 2 and job.saved == [1, 2]  # the first seed is kept until a defined score beats it


def test_a_resume_trains_only_the_unfinished_seeds_and_again_a_best_seed_it_did_not_keep():
    """Seeds 1 and 2 finished in an earlier run that kept seed 1's model; seed 2 is best, so it is trained again (from
    its checkpoint) to keep its model; seed 3 is trained for the first time."""
    job = Seeds({1: 0.5, 2: 0.9, 3: 0.6}, done=(1, 2), kept=1)
    _, best = run_seeds(job, [1, 2, 3])
    assert best == 2 and job.trained == [3] and job.saved == [] and job.again == [2]


def test_a_resume_whose_best_seed_is_kept_trains_nothing_again():
    job = Seeds({1: 0.5, 2: 0.9}, done=(1, 2), kept=2)
    _, best = run_seeds(job, [1, 2])
    assert best == 2 and job.trained == [] and job.again == []


def test_median_and_spread_leave_undefined_scores_out():
    assert median([0.2, math.nan, 0.6, 0.4]) == 0.4 and spread([0.2, math.nan, 0.6]) == 0.6 - 0.2
    assert math.isnan(median([math.nan])) and math.isnan(spread([]))
