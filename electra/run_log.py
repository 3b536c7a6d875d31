"""A run's logs: `metrics.csv` (one row per logged step, namespaced columns), TensorBoard event files, and
Weights & Biases where it is installed and asked for.

Columns and tags are namespaced, `train/loss`, `eval/accuracy`, so training and evaluation curves never collide.
Where they go is `report_to` (Trainer's `--report_to`: csv, tensorboard, wandb, none; default csv and tensorboard;
`electra ... --report-to` sets it for a command). The CSV is append-only across resumes: rows after the resumed
step are dropped first, and when a new column appears (the first evaluation, say) the file is rewritten once with
the wider header.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

from electra.errors import UserError

CSV_NAME = "metrics.csv"
REPORTERS = ("csv", "tensorboard", "wandb")
DEFAULT_REPORT_TO = ("csv", "tensorboard")


def parse_report_to(value: str | None) -> tuple[str, ...]:
    """`csv,tensorboard` -> ("csv", "tensorboard"); "none" -> (); None -> the default. Unknown names are refused."""
    if value is None:
        return DEFAULT_REPORT_TO
    names = tuple(dict.fromkeys(part.strip().lower() for part in value.split(",") if part.strip()))
    if names == ("none",):
        return ()
    unknown = [name for name in names if name not in REPORTERS]
    if unknown:
        raise UserError(
            f"--report-to {value!r}: {unknown[0]!r} is not one of {', '.join(REPORTERS)} or none."
        )
    return names


def progress_off() -> bool:
    """True when the command was given --no-progress (the CLI leaves TQDM_DISABLE set): bars that choose their
    own `disable` must honour it too."""
    return bool(os.environ.get("TQDM_DISABLE"))


def default_report_to() -> tuple[str, ...]:
    """What a command's --report-to chose (the CLI leaves it in ELECTRA_REPORT_TO), else csv and TensorBoard."""
    return parse_report_to(os.environ.get("ELECTRA_REPORT_TO"))


class RunLog:
    def __init__(
        self,
        directory: Path,
        enabled: bool,
        resume_step: int = 0,
        report_to: tuple[str, ...] = DEFAULT_REPORT_TO,
        run_name: str = "electra",
    ):
        self.enabled = enabled and bool(report_to)
        self.csv = "csv" in report_to
        self.path = directory / CSV_NAME
        self.fields: list[str] = []
        self.writer = None
        self.wandb = None
        if not self.enabled:
            return
        directory.mkdir(parents=True, exist_ok=True)
        if self.csv and self.path.exists():
            with self.path.open(newline="") as handle:
                self.fields = list(csv.DictReader(handle).fieldnames or [])
            kept = [row for row in read_csv(self.path) if row.get("step", math.inf) <= resume_step]
            self._rewrite(kept)
        if "tensorboard" in report_to:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(directory / "logs"), purge_step=resume_step or None)
            except ImportError:  # tensorboard is optional at run time; the CSV always exists
                self.writer = None
        if "wandb" in report_to:
            try:
                import wandb
            except ImportError:
                raise UserError(
                    "--report-to wandb: Weights & Biases is not installed (pip install wandb)."
                ) from None
            self.wandb = wandb.init(project="electra", name=run_name, dir=str(directory), resume="allow")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """One row: `scalars` maps namespaced names (`train/loss`) to numbers."""
        if not self.enabled:
            return
        if self.csv:
            row = {"step": step, **scalars}
            new = [name for name in row if name not in self.fields]
            if new:
                rows = read_csv(self.path) if self.path.exists() else []
                self.fields += new
                self._rewrite(rows)
            with self.path.open("a", newline="") as handle:
                csv.DictWriter(handle, fieldnames=self.fields).writerow(row)
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)
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
        if self.wandb is not None:
            self.wandb.finish()


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
