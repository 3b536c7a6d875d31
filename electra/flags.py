"""Command-line options that mean the same in every command, spelled once (argparse only: no heavy imports)."""

from __future__ import annotations

import argparse
from typing import Any


def add_output_option(parser: argparse.ArgumentParser, dest: str, help: str, **kwargs: Any) -> None:
    """`--output`, with the spellings users bring from other tools (`--output-dir`, Trainer's; `--out`) as
    aliases; `kwargs` are argparse's (default, required)."""
    parser.add_argument("--output", "--output-dir", "--out", dest=dest, help=help, **kwargs)
