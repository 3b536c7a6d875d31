"""`electra plot RUN`: the training curves of a run as one PNG, for people who would rather look than read.

Every panel has a labelled y axis; held-out evaluation (`eval/...`) is drawn dashed beside the training curve of the
same metric. The discriminator-accuracy panel shows the always-"original" baseline it must beat and spans at least
five points of accuracy, so the noise of a run still at the baseline does not look like swings. Electric's NCE
accuracy and energies get panels of their own.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import save_figure_atomically
from electra.core.overwrite import refuse_to_replace, refuse_unwritable_directory
from electra.training.run_log import read_metrics as read_rows

# (title, y-axis label, metrics, log scale)
PANELS = (
    (
        "loss",
        "loss (log scale)",
        ("loss", "generator_loss", "discriminator_loss", "mlm_loss", "all_tokens_loss"),
        True,
    ),
    ("generator", "fraction of tokens", ("generator_accuracy", "mlm_accuracy", "replaced_fraction"), False),
    ("discriminator accuracy", "accuracy", ("discriminator_accuracy", "nce_accuracy"), False),
    (
        "replaced tokens",
        "precision / recall / AUC",
        ("replaced_precision", "replaced_recall", "discriminator_auc"),
        False,
    ),
    ("Electric energies", "mean energy E(x)_t", ("mean_energy_kept", "mean_energy_replaced"), False),
    ("learning rate", "learning rate", ("learning_rate",), False),
)
MIN_ACCURACY_SPAN = 0.05


def read_metrics(run_dir: Path, namespace: str = "train") -> dict[str, list[float]]:
    """One namespace's columns of RUN/metrics.csv (prefix stripped), one list per metric, aligned with `step`."""
    path = run_dir / "metrics.csv"
    if run_dir.is_file():  # `electra plot RUN/metrics.csv`: not read as RUN/metrics.csv/metrics.csv
        raise UserError(
            f"{run_dir} is a file; give the run directory that holds metrics.csv: {run_dir.parent}."
        )
    if not path.is_file():
        raise UserError(f"{path} does not exist; is {run_dir} a pretraining run directory?")
    try:
        rows = read_rows(run_dir, namespace)
    except csv.Error as exc:
        raise UserError(
            f"{path} is not a text CSV ({exc}); is {run_dir} a pretraining run directory?"
        ) from None
    except KeyError:  # a row without `step`
        raise UserError(f"{path} has no 'step' column; is {run_dir} a pretraining run directory?") from None
    if not rows and namespace == "train":
        if read_rows(run_dir, "eval"):  # not "no rows yet", of a file full of them
            raise UserError(
                f"{path} holds held-out (eval/) rows only, no training (train/) ones to draw them beside; is "
                f"{run_dir} a pretraining run directory?"
            )
        raise UserError(f"{path} has no rows yet.")
    # Every column any row holds, NaN (a gap in the curve) where a row lacks it: a half-written last row, of a
    # run in progress or one a kill cut short, must not take a whole curve out of the picture.
    keys = list(dict.fromkeys(key for row in rows for key in row))
    return {key: [row.get(key, math.nan) for row in rows] for key in keys}


def build_figure(train: dict[str, list[float]], held_out: dict[str, list[float]], title: str):
    """The figure of a run's columns (training, and held-out where there is any); returned, not saved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(t, label, [k for k in keys if k in train], log) for t, label, keys, log in PANELS]
    panels = [panel for panel in panels if panel[2]]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for axis, (name, label, keys, log) in zip(axes[0], panels):
        for key in keys:
            (line,) = axis.plot(train["step"], train[key], label=key.replace("_", " "))
            if key in held_out:
                axis.plot(
                    held_out["step"],
                    held_out[key],
                    "--",
                    marker=".",
                    color=line.get_color(),
                    label=f"{key.replace('_', ' ')} (held out)",
                )
        if name == "discriminator accuracy" and "replaced_fraction" in train:
            baseline = [1.0 - f for f in train["replaced_fraction"]]
            axis.plot(train["step"], baseline, ":", color="grey", label='always "original"')
            low, high = axis.get_ylim()
            middle = (low + high) / 2
            if high - low < MIN_ACCURACY_SPAN:
                axis.set_ylim(middle - MIN_ACCURACY_SPAN / 2, middle + MIN_ACCURACY_SPAN / 2)
        axis.set_title(name)
        axis.set_xlabel("step")
        axis.set_ylabel(label)
        if log:
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def plot_run(run_dir: str | Path, output: str | Path | None = None, overwrite: bool = False) -> Path:
    """Draw RUN/metrics.csv to `output` (default RUN/curves.png) and return the path written.

    `output` is checked before anything is read or drawn (`curves_path`); `pretrain` calls this with no `output`
    at the end of every run, so the run's own curves.png is always redrawn in place."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    target = curves_path(run_dir, output, overwrite)
    train = read_metrics(run_dir)
    if not any(key in train for _, _, keys, _ in PANELS for key in keys):  # matplotlib cannot draw no panels
        drawn = ", ".join(dict.fromkeys(key for _, _, keys, _ in PANELS for key in keys))
        raise UserError(
            f"{run_dir / 'metrics.csv'} holds none of the metrics electra plot draws (train/ columns: {drawn}); "
            "is it a pretraining or fine-tuning run's?"
        )
    figure = build_figure(train, read_metrics(run_dir, "eval"), run_dir.name)
    try:
        save_figure_atomically(figure, target, dpi=110)
    finally:
        plt.close(figure)
    return target


def curves_path(run_dir: Path, output: str | Path | None, overwrite: bool) -> Path:
    """Where `electra plot RUN --output OUTPUT` writes, or a one-line refusal; nothing is written here.

    - No OUTPUT: RUN/curves.png, the run's own picture, which every re-plot replaces without asking.
    - An existing directory (or a path ending in '/'): curves.png inside it. Naming a folder says where the
      picture goes, as `cp FILE DIR/` does, and curves.png is the name the run itself uses; refusing would only
      make the user type it. matplotlib, given a folder's name, would write FOLDER.png beside it instead.
    - Otherwise the suffix picks the format, and must be one that matplotlib's savefig writes: a name without a
      suffix is refused (matplotlib would quietly add .png, a file the user did not name), as is .md or .txt.
    - An existing file is replaced only with `overwrite`, unless it is RUN/curves.png itself: what the user made
      is not overwritten unasked, as `score` and `rescore` refuse an existing output.
    """
    own = run_dir / "curves.png"
    if output is None:
        return own
    raw = str(output)
    path = Path(output)
    if path.is_dir() or raw.endswith(("/", os.sep)):
        path = path / "curves.png"
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"--output {raw}: {parent} is a file, so nothing can be written under it.")
    formats = _image_formats()
    suffix = path.suffix.lower().removeprefix(".")
    if suffix not in formats:
        known = ", ".join(f".{name}" for name in formats)
        what = f"matplotlib cannot write .{suffix} files" if suffix else "the name has no image suffix"
        raise UserError(
            f"--output {raw}: {what}; end it with one of {known} (or name a directory to write curves.png in)."
        )
    if path.is_dir():
        raise UserError(f"--output {raw}: {path} is a directory; name the image file to write.")
    if path.exists() and path.resolve() != own.resolve():
        refuse_to_replace([path], overwrite)
    # a folder that cannot be made or written (/proc, a read-only mount, a dangling link) is refused before
    # the drawing, not met after it as a misleading "could not write .png" or a FileExistsError traceback
    refuse_unwritable_directory(path.parent, option=f"--output {raw}: its folder")
    return path


def _image_formats() -> list[str]:
    """The file suffixes matplotlib's savefig writes (png, pdf, svg, ...), png first."""
    from matplotlib.backend_bases import FigureCanvasBase

    names = sorted(FigureCanvasBase.get_supported_filetypes())
    return ["png", *(name for name in names if name != "png")]


def run(args: argparse.Namespace) -> int:
    path = plot_run(args.run, args.output, args.overwrite)
    print(path)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("plot", help="write a PNG of a pretraining run's curves")
    parser.add_argument("run", help="a pretraining run directory (holds metrics.csv)")
    parser.add_argument(
        "--output",
        help="image to write, its format from the suffix (.png, .pdf, .svg, ...); a directory gets curves.png "
        "inside it (default RUN/curves.png)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output file (RUN/curves.png always is)",
    )
    parser.set_defaults(func=run)
