"""The public Python API: what `import electra` offers (see README, "From Python").

    import electra

    config = electra.build_config("tiny", overrides={"max_steps": 200})
    run = electra.pretrain(config, output_dir="runs/tiny")            # embedded corpus unless corpus=...
    glue = electra.finetune_glue("runs/tiny", tasks=["sst2"], data_dir="glue_data")
    scorer = electra.load_scorer("runs/tiny")                         # the method its objective declares
    print(scorer.sentence_plls(["A sentence to score."]))

New objectives subclass `electra.Objective` and register with `@electra.register_objective`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from electra.embedded_corpus import ensure_embedded_corpus
from electra.errors import UserError
from electra.export import Export, finetune_dir, read_export
from electra.model import PretrainingModel, build_pretraining_model
from electra.objectives import (
    Objective,
    build_config,
    flop_report,
    get_objective,
    objective_names,
    register_objective,
)
from electra.pretraining import PretrainResult, RunInputs
from electra.pretraining import pretrain as _pretrain
from glue.finetune import FinetuneSettings, run_glue
from glue.tasks import get_task
from pll.scoring import Scorer, load_scorer
from squad.train import SquadSettings
from squad.train import finetune as _finetune_squad

__all__ = [
    "Export",
    "Objective",
    "PretrainingModel",
    "PretrainResult",
    "Scorer",
    "build_config",
    "build_pretraining_model",
    "finetune_dir",
    "finetune_glue",
    "finetune_squad",
    "flop_report",
    "get_objective",
    "load_scorer",
    "objective_names",
    "pretrain",
    "read_export",
    "register_objective",
]


def pretrain(
    config, output_dir: str | Path, corpus: str | Path | None = None, **inputs: Any
) -> PretrainResult:
    """Pretrain `config` into `output_dir` (a new directory, or an interrupted run with `resume=True`).

    `corpus` is a text file, a directory, JSONL or a saved dataset; None trains on the embedded corpus. Other
    keywords are `electra.pretraining.RunInputs` fields (vocab, cache_dir, resume, num_proc, ...).
    """
    source = str(corpus) if corpus is not None else str(ensure_embedded_corpus())
    try:
        return _pretrain(config, RunInputs(corpus=source, output_dir=Path(output_dir), **inputs))
    except UserError as exc:  # the messages are written for the command line
        raise UserError(_in_python_terms(str(exc))) from None


# How the command line's flags are spelled as this function's arguments.
_PYTHON_SPELLINGS = (
    ("--resume", "resume=True"),
    ("--overwrite", "overwrite=True"),
    ("--output", "output_dir"),
)


def _in_python_terms(message: str) -> str:
    """A refusal told to a Python caller names its arguments ("pass resume=True"), not flags it never typed."""
    for flag, argument in _PYTHON_SPELLINGS:
        message = re.sub(rf"{flag}(?![\w-])", argument, message)
    return message


def finetune_glue(
    model: str | Path,
    tasks: Sequence[str],
    data_dir: str | Path,
    seeds: Sequence[int] = (1,),
    output_dir: str | Path | None = None,
    **settings: Any,
) -> dict:
    """Fine-tune an export (or any local ELECTRA/BERT checkpoint) on GLUE tasks; `settings` are
    `glue.finetune.FinetuneSettings` fields (learning_rate, epochs, max_steps, ...). Returns the results dict."""
    return run_glue(
        model,
        [get_task(task) for task in tasks],
        Path(data_dir),
        FinetuneSettings(**settings),
        list(seeds),
        output_dir=Path(output_dir) if output_dir is not None else None,
    )


def finetune_squad(model: str | Path, output_dir: str | Path, **settings: Any) -> dict:
    """Fine-tune on SQuAD and/or evaluate (`train=`, `eval=` file paths, `version="1.1"|"2.0"`, and any other
    `squad.train.SquadSettings` field); returns the evaluation results."""
    return _finetune_squad(SquadSettings(model=str(finetune_dir(model)), output=str(output_dir), **settings))
