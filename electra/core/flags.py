"""Command-line options that mean the same in every command, spelled once (argparse only: no heavy imports)."""

from __future__ import annotations

import argparse
from typing import Any

from electra.core.config import CPU_DROPOUT
from electra.core.errors import UserError
from electra.core.overwrite import refuse_unusable_output


def add_output_option(
    parser: argparse.ArgumentParser, dest: str, help: str, directory: bool = True, **kwargs: Any
) -> None:
    """`--output`, with the spellings users bring from other tools (`--output-dir`, Trainer's; `--out`) as
    aliases for a folder; a command that writes one file takes `--output` alone, as `score` and `plot` do (an
    `--output-dir` naming a file reads as a mistake); `kwargs` are argparse's (default, required).

    A `directory` output that names an existing file is refused while the flags are read, before any work: the
    one check every command that writes a folder shares (`electra.core.overwrite.refuse_unusable_output`)."""
    if not directory:
        parser.add_argument("--output", dest=dest, help=help, **kwargs)
        return
    kwargs.setdefault("type", _output_directory)
    parser.add_argument("--output", "--output-dir", "--out", dest=dest, help=help, **kwargs)


def _output_directory(value: str) -> str:
    try:
        refuse_unusable_output(value, option=None)  # argparse names the option itself
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def require_counts(
    args: argparse.Namespace, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> None:
    """Count options must be at least 1 (`optional` ones only when given, or when the command has them): one line
    naming the flag otherwise."""
    for name in required + optional:
        value = getattr(args, name, None)
        if (value is not None or name in required) and (value is None or value < 1):
            raise UserError(f"--{name.replace('_', '-')} must be at least 1.")


def add_cpu_dropout_option(parser: argparse.ArgumentParser) -> None:
    """`--cpu-dropout`: the training engine's dropout masks on a CPU (`electra/nn/dropout.py`); other devices always
    use torch's own."""
    parser.add_argument(
        "--cpu-dropout",
        choices=CPU_DROPOUT,
        default="lanes",
        help="dropout on a CPU: lanes (cheap 16-bit masks; 1.1-1.2x faster steps where measured, README "
        "Speed) or torch's own",
    )


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: …)" only where there is a value to show: not after a flag whose default is None (its
    help says what happens without it) or after a switch that takes no value ("--no-x (default: True)" reads as
    if the switch were on)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.nargs == 0:
            return action.help
        return super()._get_help_string(action)
