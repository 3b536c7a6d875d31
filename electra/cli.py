"""The `electra` console script: one subcommand per job, each owned by the package that does the job.

Every package exposes `register(subparsers)` in its `cli.py`, which adds its parser and sets `func`; heavy imports
happen inside `func`, so `electra --help` stays fast. A `UserError` anywhere becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from electra.errors import UserError

# (module, note) in the order `electra --help` lists them. A module that is missing is skipped silently, so a
# partial install (or a package still being written) never breaks the others.
SUBCOMMAND_MODULES = (
    "electra.pretrain_cli",
    "electra.plot",
    "flops.cli",
    "glue.cli",
    "squad.cli",
    "pll.cli",
    "tlm.cli",
    "electra.compare",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="electra", description="Pretrain, count, fine-tune and score ELECTRA / Electric models."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue
            raise
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
