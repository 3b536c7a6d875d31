"""A run's logs, written through Accelerate's tracker API: `metrics.csv` (one row per logged step, namespaced
columns), TensorBoard event files, and Weights & Biases where it is installed and asked for.

Columns and tags are namespaced, `train/loss`, `eval/accuracy`, so training and evaluation curves never collide.
TensorBoard and W&B are Accelerate's own trackers; the CSV is a `GeneralTracker` of ours. They are attached to the
run's `Accelerator` with `init_trackers` and written with `accelerator.log`, so a tracker a user adds to that
accelerator receives the same scalars, and Accelerate keeps the writing on the main process.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import math
from pathlib import Path

from accelerate import Accelerator
from accelerate.tracking import GeneralTracker, TensorBoardTracker, WandBTracker

from electra.core.files import write_text_atomically
from electra.training.run_log import CSV_NAME, DEFAULT_REPORT_TO, read_csv


class CSVTracker(GeneralTracker):
    """metrics.csv as an Accelerate tracker: one row per logged step, append-only across resumes (rows after the
    resumed step are dropped at start), rewritten once with a wider header when a new column appears."""

    name = "csv"
    requires_logging_directory = False

    def __init__(self, directory: Path, resume_step: int = 0):
        super().__init__()
        self.path = Path(directory) / CSV_NAME
        self.resume_step = resume_step
        self.fields: list[str] = []
        self.started = False

    @property
    def tracker(self) -> Path:
        return self.path

    def start(self) -> None:
        """Reads the existing file's columns and drops rows after the resumed step. Accelerate calls this from
        `init_trackers` since 1.8; `log` calls it too, so older releases cannot append to an untrimmed file."""
        if self.started:
            return
        self.started = True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            with self.path.open(newline="") as handle:
                self.fields = list(csv.DictReader(handle).fieldnames or [])
            rows = read_csv(self.path)
            kept = [row for row in rows if row.get("step", math.inf) <= self.resume_step]
            if len(kept) < len(rows):  # a finished run resumed with nothing to do keeps its file untouched
                self._rewrite(kept)

    def store_init_configuration(self, values: dict) -> None:
        pass  # the run's config.json holds it

    def log(self, values: dict, step: int | None = None, **kwargs) -> None:
        self.start()
        row = {"step": step, **values}
        new = [name for name in row if name not in self.fields]
        if new:
            rows = read_csv(self.path) if self.path.exists() else []
            self.fields += new
            self._rewrite(rows)
        with self.path.open("a", newline="") as handle:
            csv.DictWriter(handle, fieldnames=self.fields).writerow(row)

    def _rewrite(self, rows: list[dict[str, float]]) -> None:
        """The whole file again, published by one rename: rewritten in place, a kill or a full disk in the middle
        (at a resume, or when a new column appears) would leave the run's earlier rows cut off."""
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.fields)
        writer.writeheader()
        # read back as floats: a step goes out as the integer every appended row writes
        writer.writerows({**row, "step": int(row["step"])} if "step" in row else row for row in rows)
        write_text_atomically(self.path, text.getvalue())

    def finish(self) -> None:
        pass


class RunLog:
    """The trackers `report_to` names, attached to `accelerator` for one training run and detached by `close`."""

    def __init__(
        self,
        directory: Path,
        enabled: bool,
        accelerator: Accelerator,
        resume_step: int = 0,
        report_to: tuple[str, ...] = DEFAULT_REPORT_TO,
        run_name: str = "electra",
    ):
        self.enabled = enabled and bool(report_to)
        self.accelerator = accelerator
        self.trackers: list[GeneralTracker] = []
        if not self.enabled:
            return
        directory.mkdir(parents=True, exist_ok=True)
        if "csv" in report_to:
            self.trackers.append(CSVTracker(directory, resume_step))
        if (
            "tensorboard" in report_to and _tensorboard_installed()
        ):  # optional at run time: the CSV always exists
            self.trackers.append(TensorBoardTracker("logs", directory, purge_step=resume_step or None))
        if "wandb" in report_to:  # installed: `electra.training.run_log.parse_report_to` checked it, once
            self.trackers.append(WandBTracker("electra", name=run_name, dir=str(directory), resume="allow"))
        # init_trackers starts what `log_with` lists and appends it to accelerator.trackers; the accelerator's own
        # list is put back so that a later run on the same accelerator (GLUE's seeds) does not start these again.
        own, accelerator.log_with = accelerator.log_with, self.trackers
        try:
            accelerator.init_trackers("electra")
        finally:
            accelerator.log_with = own

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """One row: `scalars` maps namespaced names (`train/loss`) to numbers."""
        if self.enabled:
            self.accelerator.log(dict(scalars), step=step)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.finish()
            if tracker in self.accelerator.trackers:
                self.accelerator.trackers.remove(tracker)
        self.trackers = []


def _tensorboard_installed() -> bool:
    return (
        importlib.util.find_spec("tensorboard") is not None
        or importlib.util.find_spec("tensorboardX") is not None
    )
