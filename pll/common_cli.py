"""What `electra score` and `electra rescore` share on the command line: the flags that choose and run a scorer,
and the scorer those flags load.

The scorer's module brings torch and transformers, so it is imported inside the functions that load one: the
parsers (and `electra --help`) never pay for it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from electra.core.flags import add_setting_flags
from electra.pll.methods import ScorerChoice

if TYPE_CHECKING:
    from electra.pll.scoring import Scorer


def add_scoring_options(parser: argparse.ArgumentParser) -> None:
    """--method, --batch-size, --within-word and --device, spelled and defaulted alike in every command that
    scores text."""
    add_setting_flags(parser, ScorerChoice, declared_defaults=True)


def add_overwrite_and_resume(parser: argparse.ArgumentParser, resume_help: str) -> None:
    """--overwrite and --resume, the pair every command that saves scores as it goes takes."""
    parser.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    parser.add_argument("--resume", action="store_true", help=resume_help)


def load_scorer_from_args(
    args: argparse.Namespace, model: str | None = None, identity: str | None = None
) -> Scorer:
    """The scorer the scoring flags describe, for `model` (default: --model); the method it resolved to (`auto`
    becomes a real one) is said on standard error, since it decides what the numbers mean."""
    from electra.pll.scoring import load_scorer

    model = model or args.model
    scorer = load_scorer(model, args.method, args.device, args.batch_size, args.within_word, identity)
    print(f"scoring with --method {scorer.method}", file=sys.stderr)
    return scorer


def check_device(name: str) -> None:
    """Refuse a --device this machine lacks before any input is read or model loaded (`load_scorer` checks it
    the same way)."""
    from electra.pll.model_dirs import check_device as check

    check(name)
