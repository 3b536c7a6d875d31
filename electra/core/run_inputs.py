"""What a pretraining run reads and writes (`RunInputs`), declared once, and the check of those inputs that needs no
model (`check_run_request`): the command line runs it before it imports anything heavy, the Python API runs the
same function, and each names the setting its own way (`--resume` on the command line, `resume=True` in Python),
from the declaration (`electra.core.settings.spelled`).

A light module on purpose: `electra pretrain` with a mistyped corpus answers in a fraction of a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.settings import COUNT, setting, spelled


@dataclass
class RunInputs:
    """Where a pretraining run reads from and writes to (the config says how it trains)."""

    corpus: str = setting(
        None,
        "text file, directory, .jsonl or saved dataset; default: the embedded State of the Union corpus",
        flags=("--corpus",),
    )
    # the command line adds it with its aliases (`electra.core.flags.add_output_option`)
    output_dir: Path = setting(None, "run directory (default: runs/<size>-<objective>)", flags=("--output",))
    vocab: str | None = setting(
        None,
        "BERT-style vocab.txt (or a tokenizer directory); default: train WordPiece on the corpus",
        flags=("--vocab",),
    )
    cache_dir: str | None = setting(
        None,
        "where tokenizers and packed examples are cached (default ~/.cache/electra)",
        flags=("--cache-dir",),
    )
    num_proc: int | None = setting(
        None,
        "processes that pack the examples (default: one per core this machine has)",
        within=COUNT,
        flags=("--num-proc",),
    )
    resume: bool = setting(
        False, "continue the run in --output from its latest checkpoint", flags=("--resume",)
    )
    overwrite: bool = setting(
        False,
        "start over in an --output that holds an earlier run (that run's files are deleted, nothing else), or "
        "write beside the files of a non-empty folder (never over them)",
        flags=("--overwrite",),
    )
    # Size max_steps (and warmup, unless `keep_warmup`) to config.flops_budget once the vocabulary is known, so
    # the schedule decays over the budget and the progress bar counts the steps it buys (the CLI's --flops-budget).
    size_to_budget: bool = False
    keep_warmup: bool = False
    doc_boundary: str = setting(
        "auto", "what separates documents", choices=("auto", "file", "blank"), flags=("--doc-boundary",)
    )
    strict_utf8: bool = setting(
        False, "reject non-UTF-8 files instead of reading them as Latin-1", flags=("--strict-utf8",)
    )
    text_field: str = setting(
        "text",
        "the field holding the text in JSON lines, Parquet and saved datasets",
        flags=("--text-field",),
        metavar="NAME",
    )
    elastic: bool = setting(
        False,
        "with --resume: continue on another number of processes than the run had, keeping its global batch and "
        "the order of its examples (not bit for bit: each process draws new random streams)",
        flags=("--elastic",),
    )

    def __post_init__(self) -> None:
        if self.output_dir is not None:
            self.output_dir = Path(self.output_dir)


def check_run_request(
    *,
    corpus: str | Path | None,
    vocab: str | Path | None = None,
    num_proc: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    elastic: bool = False,
    init_from: str | Path | None = None,
    generator_from: str | Path | None = None,
) -> None:
    """The mistakes in a run's inputs that need no model to spot: switches that contradict each other, a count
    below 1, and a corpus, vocabulary or checkpoint that is not there (`corpus` None: the embedded one). One line
    each, naming the setting as the caller spells it."""
    name = lambda field: spelled(RunInputs, field)  # noqa: E731
    if resume and overwrite:
        raise UserError(
            f"{name('resume')} continues the run in {name('output_dir')} and {name('overwrite')} deletes it; give "
            "one of them."
        )
    if elastic and not resume:
        raise UserError(
            f"{name('elastic')} continues a run on other processes: give it with {name('resume')}."
        )
    if num_proc is not None and num_proc < 1:
        raise UserError(f"{name('num_proc')} must be at least 1.")
    if corpus is not None and not Path(corpus).exists():
        raise UserError(
            f"corpus {corpus} does not exist; pass a text file, a directory, a .jsonl file or a saved dataset."
        )
    if vocab is not None and not Path(vocab).exists():
        raise UserError(
            f"vocabulary {vocab} does not exist; pass a BERT-style vocab.txt or omit {name('vocab')}."
        )
    if init_from is not None and not Path(init_from).is_dir():
        raise UserError(
            f"{spelled(PretrainConfig, 'init_from')} {init_from}: not a directory; give a run of this library "
            "or a transformers ELECTRA or BERT directory."
        )
    if generator_from is not None and not Path(generator_from).is_dir():
        raise UserError(
            f"{spelled(PretrainConfig, 'generator_from')} {generator_from}: not a directory; give a run "
            "of this library or a transformers ...ForMaskedLM directory."
        )
