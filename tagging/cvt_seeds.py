"""The seeds of a CVT run (`electra tag-bilstm`, `electra parse-bilstm`): each seed trained by
`electra.tagging.cvt_train.train_one` in its own folder, through the fine-tuning floor's seed loop
(`electra.finetune.seeds`), and summarized as each score's median, min and max over the seeds."""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from electra.core.files import read_json_record, write_json_atomically
from electra.finetune.seeds import SeedJob, run_seeds
from electra.tagging.cvt_data import TaggingData
from electra.tagging.cvt_settings import CvtTrainingSettings
from electra.tagging.cvt_train import RESULTS_FILE, SCORES, train_one


@dataclass
class CvtSeeds(SeedJob[dict]):
    """The seeds of `train_seeds`, for `electra.finetune.seeds.run_seeds`: each run's record is its result (no model
    is kept beyond each seed's own folder)."""

    settings: CvtTrainingSettings
    data: TaggingData
    output: Path | None
    log: Callable[[str], None]
    resume: bool

    def folder(self, seed: int) -> Path | None:
        return None if self.output is None else self.output / f"seed-{seed}"

    def finished(self, seed: int) -> dict | None:
        folder = self.folder(seed)
        finished = None if folder is None or not self.resume else read_json_record(folder / RESULTS_FILE)
        if finished is not None and finished.get("best", {}).get("step") is not None:
            self.log(f"seed {seed}: finished earlier, reusing {folder / RESULTS_FILE}")
            return finished
        return None

    def train(self, seed: int, first: bool) -> tuple[dict, None]:
        kind = "CVT" if self.settings.cvt else "supervised"
        self.log(f"seed {seed}: {kind}, {len(self.data.train)} labeled sentences")
        return train_one(self.settings, self.data, seed, self.folder(seed), self.log, self.resume), None

    def score(self, run: dict) -> float:
        return run["best"].get(f"dev_{self.data.task.metric}", math.nan)


def train_seeds(
    settings: CvtTrainingSettings,
    data: TaggingData,
    output: Path | None = None,
    log: Callable[[str], None] = print,
    resume: bool = False,
) -> dict:
    """`settings.seeds` runs (seed, seed+1, ...), each saved under `output`/seed-N; the summary has each metric's
    median, min and max over the seeds (test scores at each seed's best dev evaluation). With `resume`, a seed
    that finished earlier is read back and one that was cut short goes on from its checkpoint."""
    seeds = range(settings.seed, settings.seed + settings.seeds)
    runs, _ = run_seeds(CvtSeeds(settings, data, output, log, resume), seeds)
    summary: dict = {
        "cvt": settings.cvt,
        "labeled_sentences": len(data.train),
        "unlabeled_sentences": len(data.unlabeled),
        "metric": data.task.metric,
    }
    for name in (f"{split}_{score}" for split in ("dev", "test") for score in SCORES):
        values = [run["best"][name] for run in runs if name in run["best"]]
        if values:
            summary[name] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "values": values,
            }
    summary["seconds"] = sum(run["seconds"] for run in runs)
    summary["runs"] = [{k: v for k, v in run.items() if k != "history"} for run in runs]
    if output is not None:
        write_json_atomically(output / "summary.json", summary | {"settings": asdict(settings)}, indent=2)
    return summary


def log_to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
