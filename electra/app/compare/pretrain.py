"""Pretraining the arms of a comparison, one budget fraction at a time, and exporting each fraction.

The training loop is driven once per fraction with `flops_budget = fraction x budget` and resumed from its own
checkpoint for the next, so every fraction comes from one uninterrupted-equivalent run (OUT/pretrain/ARM). Each
fraction's checkpoint is exported to OUT/checkpoints/ARM/KofN with a cell.json record; the export is published by
rename, so a fraction is done once its cell.json exists beside an intact export, and a killed run loses at most
the fraction in progress (pretraining resumes from its latest checkpoint, saved twice per fraction).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import load_model

from electra.app.compare.arms import objective_config, per_step
from electra.app.compare.layout import cache_dir, export_dir, fraction_name, write_json
from electra.app.compare.settings import Arm, CompareSettings, parse_arm
from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.data.tokenization import load_saved_tokenizer
from electra.export.checkpoint import latest_checkpoint
from electra.export.layout import read_export
from electra.training.model import build_pretraining_model
from electra.training.pretraining import RunInputs, pretrain


def pretrain_objective(settings: CompareSettings, arm: Arm | str, tokenizer_dir: Path) -> list[dict]:
    """Pretrain one arm through every budget fraction; returns one cell record per fraction. A fraction already
    exported (by this arm's recipe) is reused as it is."""
    arm = parse_arm(arm) if isinstance(arm, str) else arm
    tokenizer = load_saved_tokenizer(tokenizer_dir)
    config = objective_config(settings, arm, len(tokenizer))
    cells = []
    for index in range(1, settings.checkpoints + 1):
        dest = export_dir(settings, arm.slug, fraction_name(index, settings.checkpoints))
        cell = _exported_cell(dest, arm)
        if cell is None:
            checkpoint = _checkpoint_for(settings, arm, config, tokenizer_dir, index, dest)
            cell = _export_fraction(settings, arm, config, tokenizer, checkpoint, index, dest)
        cells.append(cell)
    return cells


def _recipe(arm: Arm) -> dict[str, Any]:
    """What a fraction's cell.json records of the arm that trained it."""
    return {"objective": arm.objective, "overrides": dict(arm.overrides)}


def _run_dir(settings: CompareSettings, arm: Arm) -> Path:
    return settings.out / "pretrain" / arm.slug


def _exported_cell(dest: Path, arm: Arm) -> dict | None:
    """The fraction's cell record when its export is whole; None when it is to be exported (again). A cell trained
    by another recipe under this arm's label is refused: its scores would be reported as this arm's."""
    cell = read_json_record(dest / "cell.json")
    recipe = _recipe(arm)
    if cell is not None and cell.get("arm", recipe) != recipe:
        raise UserError(
            f"{dest / 'cell.json'}: the arm {arm.label!r} was trained with other settings "
            f"({cell['arm']}); give this arm another label or choose another --out."
        )
    # an unreadable cell.json, or an export that lost a part, is exported again (from its checkpoint, still kept)
    return cell if cell is not None and export_intact(dest) else None


def _checkpoint_for(
    settings: CompareSettings,
    arm: Arm,
    config: PretrainConfig,
    tokenizer_dir: Path,
    index: int,
    dest: Path,
) -> Path:
    """The checkpoint where fraction `index` of the budget ran out, pretraining (resumed) up to it when it is not
    saved yet."""
    run_dir = _run_dir(settings, arm)
    checkpoints_dir = run_dir / "checkpoints"
    target = settings.budget * index / settings.checkpoints
    checkpoint = checkpoint_reaching(checkpoints_dir, target)
    if checkpoint is not None and _past(checkpoint, target, per_step(config)):
        raise UserError(
            f"{dest}: this export is missing or damaged, and the checkpoint it was made from is gone (the "
            f"earliest left, {checkpoint}, is past {target:.3g} FLOPs); restore {dest}, or delete {run_dir} "
            f"and {dest.parent} to pretrain {arm.label} again."
        )
    if checkpoint is not None:
        return checkpoint
    segment = copy.deepcopy(config)
    segment.flops_budget = target
    inputs = RunInputs(
        corpus=settings.corpus,
        output_dir=run_dir,
        vocab=str(tokenizer_dir),
        cache_dir=cache_dir(settings),
        resume=latest_checkpoint(checkpoints_dir) is not None,
    )
    print(f"compare: pretraining {arm.label} to {target:.3g} FLOPs ({index}/{settings.checkpoints})")
    pretrain(segment, inputs)
    checkpoint = checkpoint_reaching(checkpoints_dir, target)
    if checkpoint is None:
        raise RuntimeError(f"{run_dir}: training stopped before {target:.3g} FLOPs")
    return checkpoint


def _export_fraction(
    settings: CompareSettings,
    arm: Arm,
    config: PretrainConfig,
    tokenizer: Any,
    checkpoint: Path,
    index: int,
    dest: Path,
) -> dict:
    """Export fraction `index` from its checkpoint, record its cell.json, and prune the checkpoints before it
    (resuming needs only the latest)."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    export_checkpoint(checkpoint, config, tokenizer, dest)
    cell = {
        "objective": arm.label,
        "slug": arm.slug,
        "arm": _recipe(arm),
        "index": index,
        "fraction": index / settings.checkpoints,
        "step": state["step"],
        "train_flops": state["flops_spent"],
        "target_flops": settings.budget * index / settings.checkpoints,
        "train_flops_per_step": per_step(config),
        "max_steps": config.max_steps,
    }
    write_json(dest / "cell.json", cell)
    _prune_before(_run_dir(settings, arm) / "checkpoints", state["step"])
    return cell


def checkpoint_reaching(checkpoints_dir: Path, flops: float) -> Path | None:
    """The earliest saved checkpoint whose spent FLOPs reach `flops` (the step where the budget ran out, unless
    that one was pruned: `_past`). One whose trainer_state.json cannot be read is no checkpoint to export (resuming
    goes back to the newest intact one, `latest_intact_checkpoint`)."""
    found = []
    for path in checkpoints_dir.glob("step-*"):
        state = read_json_record(path / "trainer_state.json") if path.is_dir() else None
        if state is not None and state.get("flops_spent", 0.0) >= flops * (1 - 1e-12):
            found.append((state["step"], path))
    return min(found)[1] if found else None


def _past(checkpoint: Path, flops: float, step_flops: float) -> bool:
    """Whether `checkpoint` lies a step or more beyond the one that reached `flops`: the earliest left once that
    step's checkpoint was pruned (after its export, which is then lost). Exported as the fraction, it would put a
    later step's weights, step and FLOPs in its row, and the fine-tuning scores of the real export beside them."""
    spent = json.loads((checkpoint / "trainer_state.json").read_text())["flops_spent"]
    return spent - step_flops >= flops * (1 + 1e-9)


def export_checkpoint(checkpoint: Path, config: PretrainConfig, tokenizer: Any, dest: Path) -> Path:
    """Hugging Face exports (as the training loop writes them) of one saved checkpoint, published by rename."""
    model = build_pretraining_model(copy.deepcopy(config), tokenizer)
    _, unexpected = load_model(model, str(checkpoint / "model.safetensors"), strict=False)
    if unexpected:
        raise UserError(
            f"{checkpoint}: weights do not match the {config.objective} model ({unexpected[:3]})."
        )
    staging = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.export(staging, tokenizer)
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, dest)
    return dest


def export_intact(dest: Path) -> bool:
    """Whether the fraction's export still has every part it names: a lost part would otherwise surface only when
    fine-tuning, as a --model error that says nothing of compare."""
    try:
        export = read_export(dest)
    except UserError:  # an export.json cut short
        return False
    return export is not None and bool(export.parts) and not export.damaged_parts()


def exported_fractions(settings: CompareSettings, arm: Arm) -> int:
    """How many of the arm's budget fractions are exported whole (`pretrain_objective` reuses those)."""
    folder = settings.out / "checkpoints" / arm.slug
    fractions = (folder / fraction_name(i, settings.checkpoints) for i in range(1, settings.checkpoints + 1))
    return sum(read_json_record(f / "cell.json") is not None and export_intact(f) for f in fractions)


def _prune_before(checkpoints_dir: Path, step: int) -> None:
    for path in checkpoints_dir.glob("step-*"):
        if path.is_dir() and int(path.name.split("-")[1]) < step:
            shutil.rmtree(path, ignore_errors=True)
