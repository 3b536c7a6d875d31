"""The text-scoring commands, in the order `electra --help` lists them: `score` (score_cli), `rescore`
(rescore_cli), `ngram` (ngram_cli) and `nbest` (nbest_cli). Each module owns its parser and its command; this one
registers them together for the `electra` console script.
"""

from __future__ import annotations

import argparse

from electra.pll import nbest_cli, ngram_cli, rescore_cli, score_cli


def register(subparsers: argparse._SubParsersAction) -> None:
    for command in (score_cli, rescore_cli, ngram_cli, nbest_cli):
        command.register(subparsers)
