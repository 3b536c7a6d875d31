"""`electra plot RUN`: the training curves of a run as one PNG, for people who would rather look than read."""

from __future__ import annotations

import argparse
from pathlib import Path

from electra.errors import UserError
from electra.run_log import read_metrics as read_rows

PANELS = (
    ("loss", ("loss", "generator_loss", "discriminator_loss", "mlm_loss")),
    ("generator", ("generator_accuracy", "mlm_accuracy", "replaced_fraction")),
    ("discriminator accuracy", ("discriminator_accuracy",)),
    ("replaced tokens", ("replaced_precision", "replaced_recall", "discriminator_auc")),
    ("learning rate", ("learning_rate",)),
)


def read_metrics(run_dir: Path) -> dict[str, list[float]]:
    """The training columns of RUN/metrics.csv (`train/` stripped), one list per metric, aligned with `step`."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise UserError(f"{path} does not exist; is {run_dir} a pretraining run directory?")
    rows = read_rows(run_dir, "train")
    if not rows:
        raise UserError(f"{path} has no rows yet.")
    keys = [k for k in rows[0] if all(k in row for row in rows)]
    return {key: [row[key] for row in rows] for key in keys}


def plot_run(run_dir: str | Path, output: str | Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    columns = read_metrics(run_dir)
    steps = columns["step"]
    panels = [(title, [k for k in keys if k in columns]) for title, keys in PANELS]
    panels = [(title, keys) for title, keys in panels if keys]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for axis, (title, keys) in zip(axes[0], panels):
        for key in keys:
            axis.plot(steps, columns[key], label=key.replace("_", " "))
        axis.set_title(title)
        axis.set_xlabel("step")
        if title == "loss":
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    titles = [title for title, _ in panels]
    if "discriminator accuracy" in titles and "replaced_fraction" in columns:
        # The baseline a discriminator must beat: answering "original" everywhere. Same axis, zoomed to both.
        axis = axes[0][titles.index("discriminator accuracy")]
        axis.plot(
            steps,
            [1.0 - f for f in columns["replaced_fraction"]],
            "--",
            color="grey",
            label='always "original"',
        )
        axis.legend(fontsize=7)
    figure.suptitle(run_dir.name)
    figure.tight_layout()
    output = Path(output) if output else run_dir / "curves.png"
    figure.savefig(output, dpi=110)
    plt.close(figure)
    return output


def run(args: argparse.Namespace) -> int:
    path = plot_run(args.run, args.output)
    print(path)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("plot", help="write a PNG of a pretraining run's curves")
    parser.add_argument("run", help="a pretraining run directory (holds metrics.csv)")
    parser.add_argument("--output", help="PNG path (default RUN/curves.png)")
    parser.set_defaults(func=run)
