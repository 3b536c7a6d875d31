"""A run's logs: `metrics.csv` (one row per logged step, namespaced columns) and TensorBoard event files.

Columns and TensorBoard tags are namespaced, `train/loss`, `eval/accuracy`, so training and evaluation curves never
collide. The CSV is append-only across resumes: rows after the resumed step are dropped first, and when a new
column appears (the first evaluation, say) the file is rewritten once with the wider header.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

CSV_NAME = "metrics.csv"


class RunLog:
    def __init__(self, directory: Path, enabled: bool, resume_step: int = 0, tensorboard: bool = True):
        self.enabled = enabled
        self.path = directory / CSV_NAME
        self.fields: list[str] = []
        self.writer = None
        if not enabled:
            return
        directory.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            with self.path.open(newline="") as handle:
                self.fields = list(csv.DictReader(handle).fieldnames or [])
            kept = [row for row in read_csv(self.path) if row.get("step", math.inf) <= resume_step]
            self._rewrite(kept)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(directory / "logs"), purge_step=resume_step or None)
            except ImportError:  # tensorboard is optional at run time; the CSV always exists
                self.writer = None

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """One row: `scalars` maps namespaced names (`train/loss`) to numbers."""
        if not self.enabled:
            return
        row = {"step": step, **scalars}
        new = [name for name in row if name not in self.fields]
        if new:
            rows = read_csv(self.path) if self.path.exists() else []
            self.fields += new
            self._rewrite(rows)
        with self.path.open("a", newline="") as handle:
            csv.DictWriter(handle, fieldnames=self.fields).writerow(row)
        if self.writer is not None:
            for name, value in scalars.items():
                self.writer.add_scalar(name, value, step)

    def _rewrite(self, rows: list[dict[str, float]]) -> None:
        with self.path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.fields)
            writer.writeheader()
            writer.writerows(rows)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_csv(path: str | Path) -> list[dict[str, float]]:
    """The rows of a metrics.csv as numbers (cells a row left empty are absent from its dict)."""
    with open(path, newline="") as handle:
        return [
            {k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(handle)
        ]


def read_metrics(run_dir: str | Path, namespace: str = "train") -> list[dict[str, float]]:
    """The rows of RUN/metrics.csv that carry `namespace` scalars, with the namespace stripped from the names."""
    prefix = f"{namespace}/"
    out = []
    for row in read_csv(Path(run_dir) / CSV_NAME):
        values = {k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix)}
        if values:
            out.append({"step": row["step"], **values})
    return out
