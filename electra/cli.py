"""The `electra` console script: one subcommand per job, each owned by the package that does the job.

Every package's `cli.py` exposes `register(subparsers)`, which adds its parser and sets `func`. Those modules import
only argparse-level code at the top and do their heavy imports inside `func`, so `electra --help` and a bad flag
answer at once. A `UserError` anywhere becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from electra import __version__, compare_cli, plot, pretrain_cli
from electra.errors import UserError
from electra.run_log import parse_report_to
from electra.siblings import bind_siblings
from flops import cli as flops_cli
from glue import cli as glue_cli
from pll import cli as pll_cli
from probes import cli as probes_cli
from squad import cli as squad_cli
from tlm import cli as tlm_cli
from tlm import tartan_cli

# In the order `electra --help` lists them.
SUBCOMMANDS = (
    pretrain_cli,
    plot,
    flops_cli,
    glue_cli,
    squad_cli,
    pll_cli,
    tlm_cli,
    tartan_cli,
    probes_cli,
    compare_cli,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="electra", description="Pretrain, count, fine-tune and score ELECTRA / Electric models."
    )
    parser.add_argument("--version", action="version", version=f"electra {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    for command in _leaf_parsers(subparsers):
        add_common_flags(command)
    return parser


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """Flags every command takes, with one spelling everywhere (as Trainer's --report_to and tqdm's switch)."""
    taken = {option for action in parser._actions for option in action.option_strings}
    if "--no-progress" not in taken:
        parser.add_argument("--no-progress", action="store_true", help="no progress bars (logs only)")
    parser.add_argument(
        "--report-to",
        default=None,
        metavar="WHERE",
        help="where training logs go: comma list of csv, tensorboard, wandb (if installed), or none "
        "(default csv,tensorboard)",
    )


def _leaf_parsers(subparsers) -> list[argparse.ArgumentParser]:
    found = []
    for parser in dict.fromkeys(subparsers.choices.values()):
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        found += _leaf_parsers(nested[0]) if nested else [parser]
    return found


def _progress_bars_off() -> list:
    """Silence every bar: tqdm's switch for ours, and the switches of datasets and transformers (they pass
    `disable=` themselves, which TQDM_DISABLE does not override: saving a model draws "Writing model shards").
    Returns the enable functions of the bars that were on, to give them back after."""
    os.environ["TQDM_DISABLE"] = "1"
    import datasets  # only when a command runs with --no-progress: --help and bad flags stay instant
    from transformers.utils import logging as transformers_logging

    restore = []
    if datasets.is_progress_bar_enabled():
        datasets.disable_progress_bars()
        restore.append(datasets.enable_progress_bars)
    if transformers_logging.is_progress_bar_enabled():
        transformers_logging.disable_progress_bar()
        restore.append(transformers_logging.enable_progress_bar)
    return restore


def main(argv: list[str] | None = None) -> int:
    try:
        bind_siblings(strict=True)
    except UserError as exc:
        print(f"electra: error: {exc}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    saved = {name: os.environ.get(name) for name in ("TQDM_DISABLE", "ELECTRA_REPORT_TO")}
    bars_to_restore: list = []
    try:
        if getattr(args, "no_progress", False):
            bars_to_restore = _progress_bars_off()
        if getattr(args, "report_to", None) is not None:
            parse_report_to(args.report_to)  # refuse an unknown name now, in one line
            os.environ["ELECTRA_REPORT_TO"] = args.report_to
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"electra {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"electra {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:  # the command's settings end with it (main() may be called again in the same process)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for enable in bars_to_restore:
            enable()


if __name__ == "__main__":
    sys.exit(main())
