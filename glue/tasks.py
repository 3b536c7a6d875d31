"""The ten GLUE tasks as the original TSV files lay them out: where each task's splits are, their columns and
labels, and the metric the paper reports. The files are read by the fine-tuning floor's strict reader
(`electra.finetune.text_tasks`).
"""

from __future__ import annotations

import os
from pathlib import Path

from electra.core.errors import UserError
from electra.core.settings import spelled
from electra.finetune.text_tasks import (  # noqa: F401 (GLUE's files, read through one reader)
    Example,
    TaskSpec,
    read_examples,
    swap_pairs,
    task_file,
)
from electra.glue.settings import GlueInputs

_NLI3 = ("contradiction", "entailment", "neutral")
_NLI2 = ("entailment", "not_entailment")

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "cola",
            "CoLA",
            ("0", "1"),
            "sentence",
            None,
            "label",
            "mcc",
            {"cola": "dev.tsv"},
            {"CoLA": "test.tsv"},
            headerless_columns={"source": 0, "label": 1, "original_label": 2, "sentence": 3},
        ),
        TaskSpec(
            "sst2",
            "SST-2",
            ("0", "1"),
            "sentence",
            None,
            "label",
            "accuracy",
            {"sst2": "dev.tsv"},
            {"SST-2": "test.tsv"},
        ),
        TaskSpec(
            "mrpc",
            "MRPC",
            ("0", "1"),
            "#1 String",
            "#2 String",
            "Quality",
            "accuracy",
            {"mrpc": "dev.tsv"},
            {"MRPC": "test.tsv"},
            symmetric=True,
        ),
        TaskSpec(
            "stsb",
            "STS-B",
            None,
            "sentence1",
            "sentence2",
            "score",
            "spearman",
            {"stsb": "dev.tsv"},
            {"STS-B": "test.tsv"},
            symmetric=True,
        ),
        TaskSpec(
            "qqp",
            "QQP",
            ("0", "1"),
            "question1",
            "question2",
            "is_duplicate",
            "accuracy",
            {"qqp": "dev.tsv"},
            {"QQP": "test.tsv"},
            test_id_column="id",
        ),
        TaskSpec(
            "mnli",
            "MNLI",
            _NLI3,
            "sentence1",
            "sentence2",
            "gold_label",
            "accuracy",
            {"mnli": "dev_matched.tsv", "mnli-mm": "dev_mismatched.tsv"},
            {
                "MNLI-m": "test_matched.tsv",
                "MNLI-mm": "test_mismatched.tsv",
                "AX": "../diagnostic/diagnostic.tsv",
            },
        ),
        TaskSpec(
            "qnli",
            "QNLI",
            _NLI2,
            "question",
            "sentence",
            "label",
            "accuracy",
            {"qnli": "dev.tsv"},
            {"QNLI": "test.tsv"},
        ),
        TaskSpec(
            "rte",
            "RTE",
            _NLI2,
            "sentence1",
            "sentence2",
            "label",
            "accuracy",
            {"rte": "dev.tsv"},
            {"RTE": "test.tsv"},
        ),
        TaskSpec(
            "wnli",
            "WNLI",
            ("0", "1"),
            "sentence1",
            "sentence2",
            "label",
            "accuracy",
            {"wnli": "dev.tsv"},
            {"WNLI": "test.tsv"},
        ),
    )
}

ALIASES = {"sst-2": "sst2", "sst": "sst2", "sts-b": "stsb", "sts": "stsb", "mnli-m": "mnli"}

# The tasks the ELECTRA paper averages (its GLUE dev score leaves WNLI out); MNLI counts once, matched.
PAPER_AVERAGE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")


def get_task(name: str) -> TaskSpec:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in TASKS:
        raise UserError(f"unknown GLUE task '{name}'; choose from {', '.join(TASKS)} or 'all'.")
    return TASKS[key]


def parse_task_list(value: str) -> list[TaskSpec]:
    """'all', one task, or a comma-separated list (order kept, duplicates dropped)."""
    if value.strip().lower() == "all":
        return list(TASKS.values())
    specs: list[TaskSpec] = []
    for part in value.split(","):
        if part.strip():
            spec = get_task(part.strip())
            if spec not in specs:
                specs.append(spec)
    if not specs:
        raise UserError(f"{spelled(GlueInputs, 'tasks')} is empty; name a GLUE task (e.g. rte) or 'all'.")
    return specs


def resolve_data_dir(data_dir: str | os.PathLike | None, option: str | None = None) -> Path:
    """--data-dir, else $GLUE_DIR: the folder holding CoLA/, SST-2/, ... as download_glue_data.py makes them.
    `option` is the command's flag for it (default: GlueInputs' data_dir, as the caller spells it; compare's is
    --glue-data)."""
    option = option or spelled(GlueInputs, "data_dir")
    value = data_dir or os.environ.get("GLUE_DIR")
    if not value:
        raise UserError(
            f"no GLUE data: pass {option} DIR or set GLUE_DIR (a folder with CoLA/, SST-2/, ...)."
        )
    path = Path(value)
    if not path.is_dir():
        raise UserError(
            f"{path}: GLUE data directory not found; pass {option} DIR with CoLA/, SST-2/, ... in it."
        )
    return path
