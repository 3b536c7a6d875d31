"""A run's logs, the light half: where they go (`--report-to`), progress switches, and reading metrics.csv back.

Kept free of torch and accelerate so that the command line and the plots import it at no cost; the trackers that
write the logs are in `electra.training.trackers`.

Columns and tags are namespaced, `train/loss`, `eval/accuracy`, so training and evaluation curves never collide.
Where they go is `report_to` (Trainer's `--report_to`: csv, tensorboard, wandb, none; default csv and tensorboard;
`electra ... --report-to` sets it for a command). The CSV is append-only across resumes: rows after the resumed
step are dropped first, and when a new column appears (the first evaluation, say) the file is rewritten once with
the wider header.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import os
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import decode_user_text

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
    require_installed(names)
    return names


def require_installed(report_to: tuple[str, ...]) -> None:
    """Refuse a logger that is not installed (wandb is optional). The CLI reads --report-to through here before
    the command starts, so the refusal comes before a tokenizer is trained or a file is written; `TrainArgs`
    reads ELECTRA_REPORT_TO through here too, so the trackers trust what they are given."""
    if "wandb" in report_to and importlib.util.find_spec("wandb") is None:
        raise UserError("--report-to wandb: Weights & Biases is not installed (pip install wandb).")


def progress_off() -> bool:
    """True when the command was given --no-progress (the CLI leaves TQDM_DISABLE set): bars that choose their
    own `disable` must honour it too."""
    return bool(os.environ.get("TQDM_DISABLE"))


def default_report_to() -> tuple[str, ...]:
    """What a command's --report-to chose (the CLI leaves it in ELECTRA_REPORT_TO), else csv and TensorBoard."""
    return parse_report_to(os.environ.get("ELECTRA_REPORT_TO"))


def read_csv(path: str | Path) -> list[dict[str, float]]:
    """The rows of a metrics.csv as numbers (cells a row left empty are absent from its dict); a cell that is not a
    number (a file edited by hand, or another program's CSV) is one line naming the file, line and column. Read as
    `decode_user_text` reads: a spreadsheet's byte-order mark is not taken for part of the `step` column's name."""
    rows = []
    text = decode_user_text(Path(path).read_bytes(), str(path), "a metrics.csv of numbers")
    with io.StringIO(text, newline="") as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            parsed = {}
            for name, value in row.items():
                if value in ("", None):
                    continue
                if name is None:  # csv.DictReader's key for cells beyond the header
                    raise UserError(
                        f"{path}:{reader.line_num}: more cells than the header has columns; fix or remove that row."
                    )
                try:
                    parsed[name] = float(value)
                except (TypeError, ValueError):
                    raise UserError(
                        f"{path}:{reader.line_num}: column {name!r} holds {value!r}, not a number; a metrics.csv "
                        "holds only numbers (fix or remove that row)."
                    ) from None
            rows.append(parsed)
    return rows


def read_metrics(run_dir: str | Path, namespace: str = "train") -> list[dict[str, float]]:
    """The rows of RUN/metrics.csv that carry `namespace` scalars, with the namespace stripped from the names."""
    prefix = f"{namespace}/"
    out = []
    for row in read_csv(Path(run_dir) / CSV_NAME):
        values = {k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix)}
        if values:
            out.append({"step": row["step"], **values})
    return out
