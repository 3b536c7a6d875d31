"""The `electra` console script: one subcommand per job, each owned by the package that does the job.

Every package's `cli.py` exposes `register(subparsers)`, which adds its parser and sets `func`. Those modules import
only argparse-level code at the top and do their heavy imports inside `func`, so `electra --help` and a bad flag
answer at once. A `UserError` anywhere becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys

from electra import compare_cli, plot, pretrain_cli
from electra.errors import UserError
from flops import cli as flops_cli
from glue import cli as glue_cli
from pll import cli as pll_cli
from squad import cli as squad_cli
from tlm import cli as tlm_cli

# In the order `electra --help` lists them.
SUBCOMMANDS = (pretrain_cli, plot, flops_cli, glue_cli, squad_cli, pll_cli, tlm_cli, compare_cli)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="electra", description="Pretrain, count, fine-tune and score ELECTRA / Electric models."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"electra {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"electra {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
