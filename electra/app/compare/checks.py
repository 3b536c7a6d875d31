"""Every refusal of an `electra compare` run that needs no vocabulary, made before anything is written.

A run and `--plan` both start here, so a plan refuses what its run would. Reading every input up front keeps a bad
file from stopping the run at its first cell, after every arm has pretrained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from electra.app.compare.arms import check_arms
from electra.app.compare.glue import glue_settings
from electra.app.compare.layout import cache_dir
from electra.app.compare.probes import check_probe_data
from electra.app.compare.rerun import check_manifest, check_report, refuse_foreign_out
from electra.app.compare.settings import CompareSettings
from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.overwrite import refuse_file_as_directory
from electra.data.corpus import read_documents
from electra.glue.inputs import check_files, check_run_inputs, check_task_rows
from electra.glue.settings import FinetuneSettings
from electra.glue.tasks import get_task
from electra.objectives import build_config


def check_inputs(settings: CompareSettings) -> tuple[PretrainConfig, FinetuneSettings, dict[str, Any], bool]:
    """The arms, the corpus, --out and --cache-dir, the GLUE files and the probes' data (every row read), the
    report and the manifest in --out. Returns the base config, the fine-tuning settings, the manifest to record,
    and whether it replaces a stale one (`check_manifest`). The steps each budget buys are checked once the
    vocabulary's size is known (`run_compare`, `describe_plan`)."""
    check_arms(settings)
    _check_corpus(settings)
    refuse_file_as_directory(
        cache_dir(settings), "--cache-dir" if settings.cache_dir else "--cache-dir (default)"
    )
    specs = [get_task(task) for task in settings.tasks]
    check_files(specs, settings.glue_data, predict_test=False)
    base = build_config(settings.size, None, dict(settings.overrides))
    finetune = glue_settings(settings, base)
    check_run_inputs(specs, finetune, settings.seeds)
    refuse_foreign_out(settings.out)
    check_report(settings, finetune)
    manifest, restart = check_manifest(settings)
    # Every file fine-tuning and the probes read, read now (last: it takes seconds): a malformed row, a missing
    # probe file or a probe sample of one class would otherwise stop the run at its first cell.
    check_task_rows(specs, settings.glue_data, predict_test=False, skip_malformed=finetune.skip_malformed)
    check_probe_data(settings)
    return base, finetune, manifest, restart


def _check_corpus(settings: CompareSettings) -> None:
    """A corpus that exists and holds text, with neither --out nor --cache-dir inside it."""
    if not Path(settings.corpus).exists():
        raise UserError(f"{settings.corpus}: corpus not found; give --corpus a text file or directory.")
    if next(read_documents(settings.corpus), None) is None:
        raise UserError(
            f"corpus {settings.corpus} is empty: it holds no text; give a corpus with text in it."
        )
    _refuse_outputs_in_the_corpus(settings)


def _refuse_outputs_in_the_corpus(settings: CompareSettings) -> None:
    """--out (or --cache-dir) inside a --corpus folder: every arm would read the comparison's own files (its
    tokenizer, cache, report) as corpus text, and a rerun would find another corpus than the one it pretrained on."""
    corpus = Path(settings.corpus).resolve()
    if not corpus.is_dir():
        return
    for option, path in (("--out", settings.out), ("--cache-dir", settings.cache_dir)):
        if path is not None and (corpus == Path(path).resolve() or corpus in Path(path).resolve().parents):
            raise UserError(
                f"{option} {path} is inside --corpus {settings.corpus}, whose files every arm reads as text; "
                f"give {option} a folder outside it."
            )
