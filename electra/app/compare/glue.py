"""The fine-tuning cells of a comparison: one (arm, fraction, task) cell fine-tunes a fraction's export on one GLUE
task with every seed (`electra.glue.finetune.run_glue`) and keeps the median per dev set.

A cell is done once OUT/glue/ARM/KofN/TASK.json exists (written by rename) and was made with the current seeds,
fine-tuning settings and task files; any other is stale, redone, and left out of the report meanwhile. Inside an
unfinished cell, the seeds already run under the same settings are reused.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict
from pathlib import Path

from electra.app.compare.layout import (
    cell_slug,
    export_dir,
    fraction_name,
    glue_cell,
    notice_unreadable,
    write_json,
)
from electra.app.compare.settings import CPU_SIZE_GLUE_LEARNING_RATE, CompareSettings
from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.export.layout import finetune_dir
from electra.glue.finetune import run_glue
from electra.glue.inputs import check_task_data, task_data_fingerprints
from electra.glue.settings import FinetuneSettings
from electra.glue.tasks import get_task


def glue_settings(settings: CompareSettings, config: PretrainConfig) -> FinetuneSettings:
    """The fine-tuning settings every cell uses; the CPU sizes (tiny, mini) get their own learning rate unless
    --glue-learning-rate is given."""
    return FinetuneSettings(
        epochs=settings.glue_epochs,
        max_steps=settings.glue_max_steps,
        batch_size=settings.glue_batch_size,
        max_seq_length=min(128, config.max_position_embeddings),
        max_train_examples=settings.glue_max_train_examples,
        learning_rate=settings.glue_learning_rate
        if settings.glue_learning_rate is not None
        else (CPU_SIZE_GLUE_LEARNING_RATE if settings.size in ("tiny", "mini") else None),
    )


def finetune_cell(settings: CompareSettings, cell: dict, task: str, finetune: FinetuneSettings) -> dict:
    """One (objective, fraction, task) cell: every seed, median per dev set. Skipped when already on disk."""
    name = fraction_name(cell["index"], settings.checkpoints)
    path = glue_cell(settings, cell_slug(cell), name, task)
    done = current_cell(path, settings, finetune, task)
    if done is not None:
        return done
    notice_unreadable(path)
    model_dir = finetune_dir(export_dir(settings, cell_slug(cell), name))
    print(f"compare: fine-tuning {cell['objective']} {name} on {task} (seeds {settings.seeds})")
    results = run_glue(
        model_dir,
        [get_task(task)],
        settings.glue_data,
        finetune,
        settings.seeds,
        output_dir=_seed_runs(path.parent, task, finetune, model_dir, settings.glue_data),
        resume=True,
    )
    done = dict(
        _cell_key(settings, finetune),
        data=_task_data(settings, task),
        task=task,
        rows=results["results"],
        finetune_flops=results["finetune_flops"],
    )
    write_json(path, done)
    return done


def _seed_runs(
    cell_dir: Path, task: str, finetune: FinetuneSettings, model_dir: Path, glue_data: Path | None
) -> Path:
    """Where glue keeps a cell's finished seeds, one folder per fine-tuning setting: a rerun with more seeds
    (`--seeds 5` after 3, with --overwrite) or one killed inside a cell reuses the seeds already run under these
    settings. Folders of the task's other settings are stale and removed, and so is this one when glue would
    refuse to resume it (`_resumable_seeds`)."""
    folder = seed_folder(cell_dir, task, finetune)
    if folder.is_dir() and not _resumable_seeds(folder, task, model_dir, glue_data):
        shutil.rmtree(folder)
    if folder.parent.is_dir():
        for other in folder.parent.iterdir():
            if other != folder and other.name.rsplit("-", 1)[0] == task:
                shutil.rmtree(other)
    return folder


def seed_folder(cell_dir: Path, task: str, finetune: FinetuneSettings) -> Path:
    """CELL/seed-runs/TASK-HASH: the seeds of one task run under one set of fine-tuning settings."""
    key = json.dumps(asdict(finetune), sort_keys=True, default=str)
    return cell_dir / "seed-runs" / f"{task}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def _resumable_seeds(folder: Path, task: str, model_dir: Path, glue_data: Path | None) -> bool:
    """Whether glue would resume the seeds in `folder` (reads only): not when its record names the model at
    another path (OUT was moved), or the task's files have changed since its seeds ran."""
    record = read_json_record(folder / "run.json")
    if record is not None and record.get("model") != str(model_dir.resolve()):
        return False
    try:
        check_task_data(folder, [get_task(task)], glue_data, predict_test=False, resume=True)
    except UserError:  # another GLUE file than the seeds there read
        return False
    return True


def seeds_on_disk(
    settings: CompareSettings, slug: str, fraction: str, task: str, finetune: FinetuneSettings
) -> int:
    """The seeds of an unfinished cell that a run would reuse rather than fine-tune (`_seed_runs`)."""
    cell_dir = glue_cell(settings, slug, fraction, task).parent
    folder = seed_folder(cell_dir, task, finetune)
    model_dir = finetune_dir(export_dir(settings, slug, fraction))
    if not folder.is_dir() or not _resumable_seeds(folder, task, model_dir, settings.glue_data):
        return 0
    runs = folder / "runs" / task
    return sum(read_json_record(runs / f"seed-{seed}" / "result.json") is not None for seed in settings.seeds)


def _cell_key(settings: CompareSettings, finetune: FinetuneSettings) -> dict:
    """What a finished cell must share with the run that reuses it, besides its task's files (`_task_data`)."""
    return {"seeds": settings.seeds, "settings": asdict(finetune)}


def _task_data(settings: CompareSettings, task: str) -> dict[str, str]:
    """The SHA-256 of each GLUE file a cell of `task` reads, kept in the cell, so that a corrected dev file makes
    the cell stale instead of leaving its old scores in the report."""
    return task_data_fingerprints(get_task(task), settings.glue_data)


def current_cell(
    path: Path, settings: CompareSettings, finetune: FinetuneSettings | None, task: str
) -> dict | None:
    """A fine-tuning cell on disk, unless it was made with other seeds, settings or task files (then it is stale:
    redone, and left out of the report meanwhile). `finetune=None` accepts any cell."""
    done = read_json_record(path)
    if done is None:
        return None
    if finetune is None:
        return done
    wanted = _cell_key(settings, finetune)
    if {k: done.get(k) for k in wanted} != wanted:
        return None
    return done if done.get("data") == _task_data(settings, task) else None  # the files hashed last
