"""`electra compare`: the ELECTRA paper's central experiment (score against pretraining FLOPs) on one machine.

Every objective is pretrained on the same corpus, with the same WordPiece vocabulary (trained once, saved to
OUT/tokenizer/) and the same cached examples, to the same budget of training FLOPs as `electra.objectives.flop_report`
counts them (generator included). Each run's learning-rate schedule spans its own budget (max_steps = the steps
the budget buys), and a checkpoint is exported at each of `--checkpoints` evenly spaced fractions of the budget:
the training loop is driven once per fraction with `flops_budget = fraction x budget` and resumed from its own
checkpoint for the next, so all fractions come from one uninterrupted-equivalent run. Every checkpoint is then
fine-tuned on each GLUE task with every seed (`electra.glue.finetune.run_glue`), and the per-task median and the paper's
average are tabulated (OUT/results.{md,json}) and plotted against training FLOPs (OUT/curve.png, one line per
objective, like the paper's Figure 5.1).

An arm is an objective plus config fields (`electra+embedding_sharing=gdes`, `fast:electra+generator_from=DIR`,
`compare_settings.parse_arm`), so generator and sharing variants are compared like objectives. Next to GLUE (or
instead of it: `--glue-tasks none`), `--probes` fits linear probes on every checkpoint's frozen features and on a
randomly initialised encoder (`electra.probes.run`): at CPU budgets, where a 1,000-example fine-tune is mostly noise, the
probes' seed spread is small and the gap to the random encoder shows what pretraining added.

Resumable at cell granularity: a pretraining fraction is done once its export (OUT/checkpoints/OBJ/KofN/cell.json)
exists, a fine-tuning cell once OUT/glue/OBJ/KofN/TASK.json does; both are written by rename, so a killed run
loses at most the cell in progress (and pretraining resumes from its latest checkpoint, saved twice per fraction).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from safetensors.torch import load_model

from electra.app.compare_settings import (
    COMPARE_CONTROLS,
    CPU_SIZE_GLUE_LEARNING_RATE,
    PRETRAINING_KEYS,
    Arm,
    CompareSettings,
    parse_arm,
)
from electra.core.config import with_frozen_generator
from electra.core.errors import UserError
from electra.core.files import (
    read_json_record,
    save_figure_atomically,
    write_json_atomically,
    write_text_atomically,
)
from electra.core.output_lock import output_lock
from electra.core.overwrite import refuse_file_as_directory
from electra.data.corpus import read_documents
from electra.data.tokenization import load_or_train_tokenizer, load_saved_tokenizer
from electra.export.checkpoint import latest_checkpoint
from electra.export.layout import finetune_dir, masked_lm_dir, read_export
from electra.glue.finetune import (
    FinetuneSettings,
    check_files,
    check_run_inputs,
    check_task_data,
    check_task_rows,
    glue_average,
    run_glue,
    task_data_fingerprints,
)
from electra.glue.report import json_safe
from electra.glue.tasks import get_task
from electra.objectives import build_config, flop_report, get_objective, objective_names
from electra.probes.run import (
    check_probe_inputs,
    data_sha256,
    get_probe,
    random_encoder_dir,
    run_probe,
    training_samples,
)
from electra.training.model import build_pretraining_model
from electra.training.pretraining import RunInputs, pretrain, size_to_budget


# ------------------------------------------------------------------------------------------------- pretraining
def objective_config(settings: CompareSettings, arm: Arm | str, vocab_size: int):
    """The arm's PretrainConfig with its schedule fitted to the budget (same batch for every arm)."""
    arm = parse_arm(arm) if isinstance(arm, str) else arm
    config = _arm_fields(settings, arm)
    config.vocab_size = vocab_size
    keep_warmup = "warmup_steps" in settings.overrides or "warmup_steps" in dict(arm.overrides)
    steps = size_to_budget(config, settings.budget, keep_warmup=keep_warmup)
    per_step = _per_step(config)
    # Whole steps: each fraction must buy one. Counting the step that overshoots (as `steps` does, at least 1)
    # accepted a budget of 1 FLOP with one checkpoint: every arm ran one step, its row billions of times over
    # the budget, arms at unequal FLOPs, and --plan put the checkpoint at step 0.
    bought = math.floor(settings.budget / per_step + 1e-9)
    if bought < settings.checkpoints:
        raise UserError(
            f"--flops-budget {settings.budget:.3g} buys only {bought} step(s) of {arm.label} ({per_step:.3g} FLOPs "
            f"each); give at least {settings.checkpoints * per_step:.3g} for {settings.checkpoints} checkpoints."
        )
    config.save_every = max(1, math.ceil(steps / (2 * settings.checkpoints)))
    config.keep_checkpoints = 1_000_000  # pruned here, once a fraction is exported
    return config.validate()


def _arm_fields(settings: CompareSettings, arm: Arm):
    """The arm's config before compare fits it to the budget and the vocabulary: --set, then the arm's fields."""
    overrides = {**settings.overrides, **dict(arm.overrides), "objective": arm.objective}
    return build_config(settings.size, None, with_frozen_generator(overrides))


def prepare_tokenizer(
    settings: CompareSettings, config, check: Callable[[int], Any] | None = None, replace: bool = False
) -> Path:
    """Train (or reuse) the vocabulary once; every arm then loads it from OUT/tokenizer. `--vocab` wins, then a
    frozen generator's vocabulary (its token ids must mean what they meant when it was trained). A new vocabulary
    (or, with `replace`, one that takes the place of OUT/tokenizer) is given to `check` (its size) before
    OUT/tokenizer is written: a refusal there leaves only the tokenizer cache, keyed by the corpus."""
    directory = settings.out / "tokenizer"
    if replace or not (directory / "tokenizer.json").is_file():
        tokenizer = _given_tokenizer(settings, config) or load_or_train_tokenizer(
            None,
            settings.corpus,
            config.tokenizer_vocab_size,
            config.lowercase,
            _tokenizer_cache(settings),
            text_form=config.text_form,
        )
        if check is not None:
            check(len(tokenizer))
        staging = settings.out / ".tokenizer.partial"
        shutil.rmtree(staging, ignore_errors=True)
        tokenizer.save_pretrained(str(staging))
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(staging, directory)
    return directory


def _given_tokenizer(settings: CompareSettings, config):
    """The vocabulary every arm must use when one is given (`--vocab`, else a frozen generator's), loaded (cheap,
    writes nothing); None when it is to be trained on the corpus."""
    frozen = [
        dict(arm.overrides)["generator_from"]
        for arm in settings.arms
        if "generator_from" in dict(arm.overrides)
    ]
    vocab = settings.vocab or (str(masked_lm_dir(frozen[0])) if frozen else None)
    if vocab is None:
        return None
    return load_or_train_tokenizer(
        vocab, None, config.tokenizer_vocab_size, config.lowercase, text_form=config.text_form
    )


def pretrain_objective(settings: CompareSettings, arm: Arm | str, tokenizer_dir: Path) -> list[dict]:
    """Pretrain one arm through every budget fraction; returns one cell record per fraction."""
    arm = parse_arm(arm) if isinstance(arm, str) else arm
    tokenizer = load_saved_tokenizer(tokenizer_dir)
    config = objective_config(settings, arm, len(tokenizer))
    run_dir = settings.out / "pretrain" / arm.slug
    checkpoints_dir = run_dir / "checkpoints"
    recipe = {"objective": arm.objective, "overrides": dict(arm.overrides)}
    cells = []
    for index in range(1, settings.checkpoints + 1):
        dest = settings.out / "checkpoints" / arm.slug / _fraction_name(index, settings.checkpoints)
        # an unreadable cell.json, or an export that lost a part, is exported again below (its checkpoint left)
        cell = read_json_record(dest / "cell.json")
        if cell is not None and cell.get("arm", recipe) != recipe:
            raise UserError(
                f"{dest / 'cell.json'}: the arm {arm.label!r} was trained with other settings "
                f"({cell['arm']}); give this arm another label or choose another --out."
            )
        if cell is not None and _export_intact(dest):
            cells.append(cell)
            continue
        target = settings.budget * index / settings.checkpoints
        checkpoint = checkpoint_reaching(checkpoints_dir, target)
        if checkpoint is not None and _past(checkpoint, target, _per_step(config)):
            raise UserError(
                f"{dest}: this export is missing or damaged, and the checkpoint it was made from is gone (the "
                f"earliest left, {checkpoint}, is past {target:.3g} FLOPs); restore {dest}, or delete {run_dir} "
                f"and {dest.parent} to pretrain {arm.label} again."
            )
        if checkpoint is None:
            segment = copy.deepcopy(config)
            segment.flops_budget = target
            inputs = RunInputs(
                corpus=settings.corpus,
                output_dir=run_dir,
                vocab=str(tokenizer_dir),
                cache_dir=_cache(settings),
                resume=latest_checkpoint(checkpoints_dir) is not None,
            )
            print(f"compare: pretraining {arm.label} to {target:.3g} FLOPs ({index}/{settings.checkpoints})")
            pretrain(segment, inputs)
            checkpoint = checkpoint_reaching(checkpoints_dir, target)
            if checkpoint is None:
                raise RuntimeError(f"{run_dir}: training stopped before {target:.3g} FLOPs")
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        export_checkpoint(checkpoint, config, tokenizer, dest)
        cell = {
            "objective": arm.label,
            "slug": arm.slug,
            "arm": recipe,
            "index": index,
            "fraction": index / settings.checkpoints,
            "step": state["step"],
            "train_flops": state["flops_spent"],
            "target_flops": target,
            "train_flops_per_step": _per_step(config),
            "max_steps": config.max_steps,
        }
        _write_json(dest / "cell.json", cell)
        _prune_before(checkpoints_dir, state["step"])
        cells.append(cell)
    return cells


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


def _past(checkpoint: Path, flops: float, per_step: float) -> bool:
    """Whether `checkpoint` lies a step or more beyond the one that reached `flops`: the earliest left once that
    step's checkpoint was pruned (after its export, which is then lost). Exported as the fraction, it would put a
    later step's weights, step and FLOPs in its row, and the fine-tuning scores of the real export beside them."""
    spent = json.loads((checkpoint / "trainer_state.json").read_text())["flops_spent"]
    return spent - per_step >= flops * (1 + 1e-9)


def export_checkpoint(checkpoint: Path, config, tokenizer, dest: Path) -> Path:
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


def _export_intact(dest: Path) -> bool:
    """Whether the fraction's export still has every part it names: one lost since would otherwise surface only
    when fine-tuning, as a --model error that says nothing of compare."""
    try:
        export = read_export(dest)
    except UserError:  # an export.json cut short
        return False
    return export is not None and bool(export.parts) and not export.damaged_parts()


def _prune_before(checkpoints_dir: Path, step: int) -> None:
    for path in checkpoints_dir.glob("step-*"):
        if path.is_dir() and int(path.name.split("-")[1]) < step:
            shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------------------------------------- fine-tuning
def glue_settings(settings: CompareSettings, config):
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


def finetune_cell(settings: CompareSettings, cell: dict, task: str, finetune) -> dict:
    """One (objective, fraction, task) cell: every seed, median per dev set. Skipped when already on disk."""
    name = _fraction_name(cell["index"], settings.checkpoints)
    path = _glue_cell(settings, _slug(cell), name, task)
    done = _current_cell(path, settings, finetune, task)
    if done is not None:
        return done
    _notice_unreadable(path)
    model_dir = finetune_dir(settings.out / "checkpoints" / _slug(cell) / name)
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
    _write_json(path, done)
    return done


def _seed_runs(cell_dir: Path, task: str, finetune, model_dir: Path, glue_data: Path) -> Path:
    """Where glue keeps a cell's finished seeds, one folder per fine-tuning setting: a rerun with more seeds
    (`--seeds 5` after 3, with --overwrite) or one killed inside a cell reuses the seeds already run under these
    settings; it had fine-tuned every seed again. Folders of the task's other settings are stale and removed, and
    so is this one when glue would refuse to resume it (`_resumable_seeds`)."""
    folder = _seed_folder(cell_dir, task, finetune)
    if folder.is_dir() and not _resumable_seeds(folder, task, model_dir, glue_data):
        shutil.rmtree(folder)
    if folder.parent.is_dir():
        for other in folder.parent.iterdir():
            if other != folder and other.name.rsplit("-", 1)[0] == task:
                shutil.rmtree(other)
    return folder


def _seed_folder(cell_dir: Path, task: str, finetune) -> Path:
    key = json.dumps(asdict(finetune), sort_keys=True, default=str)
    return cell_dir / "seed-runs" / f"{task}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def _resumable_seeds(folder: Path, task: str, model_dir: Path, glue_data: Path) -> bool:
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


def _seeds_on_disk(settings: CompareSettings, slug: str, fraction: str, task: str, finetune) -> int:
    """The seeds of an unfinished cell that a run would reuse rather than fine-tune (`_seed_runs`)."""
    cell_dir = _glue_cell(settings, slug, fraction, task).parent
    folder = _seed_folder(cell_dir, task, finetune)
    model_dir = finetune_dir(settings.out / "checkpoints" / slug / fraction)
    if not folder.is_dir() or not _resumable_seeds(folder, task, model_dir, settings.glue_data):
        return 0
    runs = folder / "runs" / task
    return sum(read_json_record(runs / f"seed-{seed}" / "result.json") is not None for seed in settings.seeds)


def probe_cell(settings: CompareSettings, cell: dict | None, probe: str) -> dict:
    """One (arm, fraction, probe) cell, or with `cell=None` the random-encoder reference (a randomly initialised
    copy of the first arm's encoder): every seed. Skipped when already on disk with the same settings."""
    if cell is None:
        path = _probe_folder(settings) / f"{probe}.json"
    else:
        name = _fraction_name(cell["index"], settings.checkpoints)
        path = _probe_folder(settings, _slug(cell), name) / f"{probe}.json"
    key = _probe_key(settings, probe)
    done = _probe_current(path, key)
    if done is not None:
        return done
    _notice_unreadable(path)
    if cell is None:
        first = settings.arms[0].slug
        source = (
            settings.out / "checkpoints" / first / _fraction_name(settings.checkpoints, settings.checkpoints)
        )
        model_dir = random_encoder_dir(source, path.parent / "model")
        print(f"compare: probing a randomly initialised encoder on {probe}")
    else:
        model_dir = settings.out / "checkpoints" / _slug(cell) / name
        print(f"compare: probing {cell['objective']} {name} on {probe} (seeds {settings.seeds})")
    result = run_probe(
        model_dir, probe, settings.probe_data, settings.seeds, settings.probe_max_train, PROBE_MAX_LENGTH
    )
    done = dict(
        key, **{k: result[k] for k in ("median", "min", "max", "accuracy", "majority", "n_train", "n_dev")}
    )
    _write_json(path, done)
    return done


PROBE_MAX_LENGTH = 128  # the pieces a probe reads of each sentence (`electra probe --max-length`'s default)


def _probe_key(settings: CompareSettings, probe: str) -> dict:
    """What a finished probe cell must share with the run that reuses it: seeds, sample size, and the SHA-256 of
    each file the probe reads (a corrected SST-2 dev file had left the old accuracies in the report)."""
    data = data_sha256(get_probe(probe), settings.probe_data)
    return {"seeds": settings.seeds, "max_train": settings.probe_max_train, "data": data}


def _slug(cell: dict) -> str:
    return cell.get("slug") or cell["objective"]


def _cell_key(settings: CompareSettings, finetune) -> dict:
    """What a finished cell must share with the run that reuses it, besides its task's files (`_task_data`)."""
    return {"seeds": settings.seeds, "settings": asdict(finetune)}


def _task_data(settings: CompareSettings, task: str) -> dict[str, str]:
    """The SHA-256 of each GLUE file a cell of `task` reads, kept in the cell: a corrected dev file had left the
    old scores in the report."""
    return task_data_fingerprints(get_task(task), settings.glue_data)


def _current_cell(path: Path, settings: CompareSettings, finetune, task: str) -> dict | None:
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


# ------------------------------------------------------------------------------------------------------ report
def collect_results(settings: CompareSettings, cells: dict[str, list[dict]], finetune) -> dict:
    """The comparison so far, from whatever cells are on disk (missing scores are None)."""
    objectives = {}
    for objective, records in cells.items():
        rows_out = []
        for cell in records:
            folder = cell.get("slug") or parse_arm(objective).slug
            rows: dict[str, dict] = {}
            name = _fraction_name(cell["index"], settings.checkpoints)
            missing = 0
            for task in settings.tasks:
                done = _current_cell(_glue_cell(settings, folder, name, task), settings, finetune, task)
                if done is not None:
                    rows.update(done["rows"])
                missing += done is None
            for row in rows.values():  # JSON stores an undefined metric (NaN) as null
                row["median"] = math.nan if row["median"] is None else row["median"]
            # The average of a fraction whose tasks are not all fine-tuned yet (a run killed inside the fraction,
            # a task added) is no GLUE average: it had been the mean of the tasks done, a point on the curve
            # beside other fractions' means over every task.
            average = glue_average(rows)[0] if not missing else math.nan
            rows_out.append(
                {
                    **{k: cell[k] for k in ("fraction", "step", "train_flops")},
                    "scores": {k: None if math.isnan(r["median"]) else r["median"] for k, r in rows.items()},
                    "average": None if math.isnan(average) else average,
                    "average_by_seed": seed_averages(rows) if not missing else [],
                    "probes": _probes_on_disk(settings, _probe_folder(settings, folder, name)),
                }
            )
        objectives[objective] = {
            "train_flops_per_step": records[0]["train_flops_per_step"] if records else None,
            "max_steps": records[0]["max_steps"] if records else None,
            "cells": rows_out,
        }
    return {
        "corpus": settings.corpus,
        "size": settings.size,
        "budget": settings.budget,
        "checkpoints": settings.checkpoints,
        "overrides": settings.overrides,
        **_evaluation(settings, finetune),
        "random_encoder": _probes_on_disk(settings, _probe_folder(settings)),
        "objectives": objectives,
    }


def _evaluation(settings: CompareSettings, finetune) -> dict:
    """How the checkpoints are evaluated, as results.json records it."""
    return {
        "tasks": settings.tasks,
        "seeds": settings.seeds,
        "finetune_settings": asdict(finetune) if finetune is not None else None,
        "probes": list(settings.probes),
        "probe_max_train": settings.probe_max_train,
    }


def _check_report(settings: CompareSettings, finetune) -> None:
    """A rerun into the same --out resumes the comparison its results.json reports. One with other evaluation
    settings would replace that report (and redo its cells), and one without an arm the report holds would drop
    it, so these need --overwrite, as glue, tlm, score and rescore do to replace their results; the check comes
    before any work. Arms may be added: the report then grows."""
    path = settings.out / "results.json"
    if settings.overwrite or not path.is_file():
        return
    saved = read_json_record(path)
    if saved is None:
        raise UserError(
            f"{path}: unreadable (cut short by a full disk or a crash?); delete it and rerun: the report is rebuilt "
            "from the cells on disk."
        )
    current = json.loads(json.dumps(json_safe(_evaluation(settings, finetune)), default=str))
    changed = _changed_settings(saved, current)
    arms = {arm.label for arm in settings.arms}
    dropped = [label for label in saved.get("objectives") or {} if label not in arms]
    if dropped:  # an added arm extends the report; a dropped one would vanish from it
        changed.append(f"--objectives (this run leaves out {', '.join(dropped)})")
    if changed:
        raise UserError(
            f"{path} reports a comparison made with other {'; '.join(changed)}; rerun with those settings to "
            "resume it, pass --overwrite to evaluate with these (results.json, results.md and curve.png are "
            "replaced), or choose another --out."
        )


# Lists of what is evaluated, not in which order: `--glue-tasks mrpc,rte` fine-tunes the same cells as `rte,mrpc`.
_UNORDERED = ("tasks", "probes")


def _changed_settings(saved: dict, current: dict) -> list[str]:
    """Each evaluation setting that differs, with its saved and new value (of a dict, the entries that differ), so
    that the refusal says what to pass to resume instead of only naming the setting. A fine-tuning setting only
    one side has (a report from before the setting existed) is not compared, as `refuse_changed_settings` does."""

    def shown(value) -> str:
        return json.dumps(value, default=str)

    changed = []
    for key, value in current.items():
        old = saved.get(key)
        if key in _UNORDERED and isinstance(old, list) and isinstance(value, list):
            old, value = sorted(map(str, old)), sorted(map(str, value))
        if old == value:
            continue
        if isinstance(old, dict) and isinstance(value, dict):
            parts = [
                f"{key}.{name} (saved {shown(old.get(name))}, now {shown(value.get(name))})"
                for name in sorted(set(old) & set(value))
                if old[name] != value[name]
            ]
            changed.extend(parts)
        else:
            changed.append(f"{key} (saved {shown(old)}, now {shown(value)})")
    return changed


def _probes_on_disk(settings: CompareSettings, folder: Path) -> dict[str, dict]:
    """Probe results in `folder` made with the current seeds and sizes (others are stale and left out)."""
    found = {}
    for probe in settings.probes:
        path = folder / f"{probe}.json"
        done = _probe_current(path, _probe_key(settings, probe))
        if done is not None:
            found[probe] = {k: done[k] for k in ("median", "min", "max", "accuracy", "majority")}
    return found


def seed_averages(rows: dict[str, dict]) -> list[float]:
    """The paper's average computed per fine-tuning seed (seed i of every task together): its spread over seeds is
    the noise a difference between objectives must exceed."""
    per_task = [row["seeds"] for row in rows.values() if row.get("seeds")]
    if not per_task or len({len(seeds) for seeds in per_task}) != 1:
        return []
    averages = []
    for i in range(len(per_task[0])):
        values = [seeds[i] for seeds in per_task if seeds[i] is not None and not math.isnan(seeds[i])]
        averages.append(sum(values) / len(values) if len(values) == len(per_task) else math.nan)
    return [a for a in averages if not math.isnan(a)]


def _score(value) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def format_markdown(results: dict) -> str:
    """Objective x budget fraction -> per-task median (x100, the paper's metric per task) and the average."""
    keys: list[str] = []
    for entry in results["objectives"].values():
        for cell in entry["cells"]:
            keys += [k for k in cell["scores"] if k not in keys]
    probes = results.get("probes") or []
    glue = [*keys, "average"] if results.get("tasks") else []
    header = ["objective", "fraction", "step", "train FLOPs", *glue, *[f"probe {p}" for p in probes]]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * 4 + ["---:"] * (len(header) - 4)) + "|",
    ]
    for objective, entry in results["objectives"].items():
        for cell in entry["cells"]:
            scores = [_score(cell["scores"].get(k)) for k in keys] + [_score(cell["average"])] if glue else []
            scores += [_probe_score(cell.get("probes", {}).get(p)) for p in probes]
            row = [objective, f"{cell['fraction']:.2f}", str(cell["step"]), f"{cell['train_flops']:.3g}"]
            lines.append("| " + " | ".join(row + scores) + " |")
    random_row = results.get("random_encoder") or {}
    if probes and random_row:
        blanks = ["–"] * len(glue)
        lines.append(
            "| random encoder | – | 0 | 0 | "
            + " | ".join(blanks + [_probe_score(random_row.get(p)) for p in probes])
            + " |"
        )
    seeds = results.get("seeds") or []
    lines.append("")
    note = (
        f"Budget {results['budget']:.3g} training FLOPs, size {results['size']}, corpus {results['corpus']}; "
        f"median over {len(seeds)} seed(s)"
    )
    if glue:
        note += "; average = mean of the task medians (the paper's GLUE average)"
    if probes:
        note += (
            "; probes: dev accuracy of a linear probe on frozen features (median [min-max] over seeds, "
            f"{_probe_sample(results.get('probe_max_train'))} training sentences per seed)"
        )
    lines.append(note + ".")
    return "\n".join(lines) + "\n"


def _probe_sample(max_train: int | None) -> str:
    return str(max_train) if max_train else "each probe's default number of"


def _probe_score(entry: dict | None) -> str:
    if not entry:
        return "–"
    return f"{100 * entry['median']:.1f} [{100 * entry['min']:.1f}-{100 * entry['max']:.1f}]"


def curve_figure(results: dict):
    """Average score against training FLOPs (log axis), one line per objective with the spread of its per-seed
    averages as a bar (the paper's Figure 5.1, left). Objectives are drawn with their own marker and a slight
    horizontal offset, so a line that coincides with another still shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One panel for the GLUE average (when tasks were run) and one per probe; each point is the median over seeds
    # with its min-max as a bar.
    panels = []
    if results.get("tasks") or not results.get("probes"):
        panels.append(("GLUE average", "average dev score", _glue_points, None))
    for probe in results.get("probes") or []:
        reference = (results.get("random_encoder") or {}).get(probe)
        panels.append((f"probe: {probe}", "dev accuracy", _probe_points(probe), reference))
    figure, axes = plt.subplots(
        1, max(1, len(panels)), figsize=(6.0 * max(1, len(panels)), 4.2), squeeze=False
    )
    markers = "osD^vP*X"
    objectives = list(results["objectives"].items())
    for axis, (title, ylabel, points, reference) in zip(axes[0], panels):
        for index, (objective, entry) in enumerate(objectives):
            found = [p for p in (points(c) for c in entry["cells"]) if p is not None]
            if not found:
                continue
            offset = 1.0 + 0.03 * (index - (len(objectives) - 1) / 2)
            xs = [x * offset for x, _, _, _ in found]
            ys = [100 * y for _, y, _, _ in found]
            below = [y - 100 * low for (_, _, low, _), y in zip(found, ys)]
            above = [100 * high - y for (_, _, _, high), y in zip(found, ys)]
            axis.errorbar(
                xs, ys, yerr=[below, above], marker=markers[index % len(markers)], capsize=3, label=objective
            )
        if reference:
            axis.axhline(100 * reference["median"], color="grey", linestyle="--", label="random encoder")
        axis.set_xscale("log")
        axis.set_xlabel("pretraining FLOPs (log scale)")
        axis.set_ylabel(f"{ylabel} (bars: min-max over seeds)")
        axis.set_title(f"{results['size']}: {title}")
        axis.grid(alpha=0.3, which="both")
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _glue_points(cell: dict) -> tuple[float, float, float, float] | None:
    if cell["average"] is None:
        return None
    spread = cell.get("average_by_seed") or [cell["average"]]
    return cell["train_flops"], cell["average"], min(spread), max(spread)


def _probe_points(probe: str):
    def points(cell: dict) -> tuple[float, float, float, float] | None:
        entry = (cell.get("probes") or {}).get(probe)
        return None if entry is None else (cell["train_flops"], entry["median"], entry["min"], entry["max"])

    return points


def plot_curve(results: dict, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure = curve_figure(results)
    try:
        save_figure_atomically(figure, path, dpi=120)
    finally:
        plt.close(figure)
    return path


def write_report(results: dict, out: Path) -> dict[str, Path]:
    """results.json, results.md and curve.png in `out` (each replaced atomically)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "curve.png"}
    _write_json(paths["json"], results)
    write_text_atomically(paths["markdown"], format_markdown(results))
    staging = out / ".curve.partial.png"
    plot_curve(results, staging)
    os.replace(staging, paths["plot"])
    return paths


# ------------------------------------------------------------------------------------------------------ driver
def describe_plan(settings: CompareSettings) -> str:
    """What a run will do: steps per objective and fraction, and the number of fine-tuning runs (trains and writes
    nothing). It refuses what a run would refuse (`check_inputs`); the steps a budget buys are counted with the
    vocabulary the run would use, or, before one is trained, with tokenizer_vocab_size pieces (an upper bound: a
    trained vocabulary is at most that big, and a smaller one makes every step cheaper)."""
    base, finetune, _, restart = check_inputs(settings)
    estimated = False
    if (settings.out / "tokenizer" / "tokenizer.json").is_file() and not restart:
        vocab, source = len(load_saved_tokenizer(settings.out / "tokenizer")), "OUT/tokenizer"
    elif (given := _given_tokenizer(settings, base)) is not None:
        vocab, source = len(given), settings.vocab or "the frozen generator"
    else:
        vocab, source, estimated = (
            base.tokenizer_vocab_size,
            "tokenizer_vocab_size (the trained vocabulary may be a little smaller)",
            True,
        )
    lines = [f"budget {settings.budget:.3g} training FLOPs per objective; vocabulary {vocab} from {source}"]
    if restart:
        lines.append(
            f"{settings.out / 'compare.json'} records other pretraining settings, but no arm was pretrained under "
            "them: --overwrite starts the comparison over with these"
        )
    for arm in settings.arms:
        try:
            config = objective_config(settings, arm, vocab)
        except UserError as exc:
            if not estimated:
                raise
            raise UserError(
                f"{exc} (Counted with {vocab} pieces, tokenizer_vocab_size: the vocabulary is not trained yet.)"
            ) from None
        per_step = _per_step(config)
        steps = [
            math.ceil(settings.budget * k / settings.checkpoints / per_step - 1e-9)
            for k in range(1, settings.checkpoints + 1)
        ]
        lines.append(
            f"{arm.label}: {per_step:.4g} FLOPs/step (batch {config.train_batch_size} x {config.max_seq_length}), "
            f"{config.max_steps} steps, warmup {config.warmup_steps}, checkpoints at steps {steps}"
            + _done_of(_exported(settings, arm), settings.checkpoints, "exported")
        )
    done = _cells_done(settings, restart, finetune)
    runs = len(settings.objectives) * settings.checkpoints * len(settings.tasks) * len(settings.seeds)
    lines.append(
        f"fine-tuning: {runs} runs ({len(settings.objectives)} objectives x {settings.checkpoints} checkpoints x "
        f"{len(settings.tasks)} tasks x {len(settings.seeds)} seeds)" + _done_of(done["glue"], runs, "done")
    )
    if settings.probes:
        cells = len(settings.objectives) * settings.checkpoints + 1
        lines.append(
            f"probes: {', '.join(settings.probes)} on {cells} encoders (every checkpoint and a random one), "
            f"{len(settings.seeds)} seeds, {_probe_sample(settings.probe_max_train)} training sentences each"
            + _done_of(done["probes"], cells * len(settings.probes), "(encoder, probe) cells done")
        )
    return "\n".join(lines)


def _done_of(done: int, total: int, what: str) -> str:
    """The part of a plan a rerun finds already on disk: the plan of a resumed comparison had counted every run
    as still to do."""
    return f"; {done} of {total} {what}, {total - done} left" if done else ""


def _exported(settings: CompareSettings, arm: Arm) -> int:
    """How many of the arm's budget fractions are exported whole (`pretrain_objective` reuses those)."""
    folder = settings.out / "checkpoints" / arm.slug
    fractions = (folder / _fraction_name(i, settings.checkpoints) for i in range(1, settings.checkpoints + 1))
    return sum(read_json_record(f / "cell.json") is not None and _export_intact(f) for f in fractions)


def _cells_done(settings: CompareSettings, restart: bool, finetune) -> dict[str, int]:
    """The fine-tuning runs (seeds) and probe cells on disk that a run would keep (made with the current seeds and
    settings); none when the run starts over. The seeds of an unfinished cell count too: a rerun with more
    --seeds, or one killed inside a cell, fine-tunes only the others (the plan had counted them all as left)."""
    if restart:
        return {"glue": 0, "probes": 0}
    glue = probes = 0
    for arm in settings.arms:
        for i in range(1, settings.checkpoints + 1):
            name = _fraction_name(i, settings.checkpoints)
            for task in settings.tasks:
                cell = _glue_cell(settings, arm.slug, name, task)
                if _current_cell(cell, settings, finetune, task) is not None:
                    glue += len(settings.seeds)
                else:
                    glue += _seeds_on_disk(settings, arm.slug, name, task, finetune)
            probes += len(_probes_on_disk(settings, _probe_folder(settings, arm.slug, name)))
    return {"glue": glue, "probes": probes + len(_probes_on_disk(settings, _probe_folder(settings)))}


def _glue_cell(settings: CompareSettings, slug: str, fraction: str, task: str) -> Path:
    """OUT/glue/ARM/FRACTION/TASK.json: one fine-tuning cell's record (its seeds run beside it, `_seed_runs`)."""
    return settings.out / "glue" / slug / fraction / f"{task}.json"


def _probe_folder(settings: CompareSettings, slug: str | None = None, fraction: str = "") -> Path:
    """OUT/probes/ARM/FRACTION/ holding PROBE.json per probe, or with no arm the random encoder's folder."""
    return settings.out / "probes" / (slug or "random-encoder") / fraction


def _probe_current(path: Path, key: dict) -> dict | None:
    """A probe cell on disk made with the current seeds and sizes; None when missing, unreadable or stale."""
    done = read_json_record(path)
    return done if done is not None and {k: done.get(k) for k in key} == key else None


# Settings that shape the shared vocabulary: an arm may not override them, or its ids would mean other pieces.
VOCABULARY_KEYS = ("text_form", "lowercase", "tokenizer_vocab_size")


def check_arms(settings: CompareSettings) -> None:
    """Every arm names a registered objective that has an encoder to evaluate, its fields are config fields with
    valid values, no two arms are the same model, and two arms never share a folder."""
    slugs: dict[str, str] = {}
    recipes: dict[str, str] = {}
    for arm in settings.arms:
        if arm.objective not in objective_names():
            raise UserError(f"--objectives: {arm.objective!r} is not one of {', '.join(objective_names())}.")
        if get_objective(arm.objective).finetune_part is None and (settings.tasks or settings.probes):
            raise UserError(
                f"--objectives: {arm.objective!r} trains a scorer with no encoder to fine-tune or probe; "
                "compare it with `electra rescore`, or drop the arm."
            )
        controlled = [key for key, _ in arm.overrides if key in COMPARE_CONTROLS]
        if controlled:
            raise UserError(
                f"--objectives: the arm {arm.label!r} sets {controlled[0]}, which compare controls "
                f"({COMPARE_CONTROLS[controlled[0]]}); drop it from the arm."
            )
        shaping = [key for key, _ in arm.overrides if key in VOCABULARY_KEYS]
        if shaping:
            raise UserError(
                f"--objectives: the arm {arm.label!r} sets {', '.join(shaping)}, but every arm reads one shared "
                f"vocabulary (OUT/tokenizer); give it to all arms with --set {shaping[0]}=..."
            )
        # An unknown field or a bad value is refused here, before the vocabulary is trained (it had been refused
        # only after, and --plan blamed it on the vocabulary's size); an arm that repeats another (another label or
        # spelling, or a field at its default) pretrained and fine-tuned the same model twice.
        recipe = json.dumps(asdict(_arm_fields(settings, arm)), sort_keys=True, default=str)
        if recipe in recipes:
            raise UserError(
                f"--objectives: {recipes[recipe]!r} and {arm.label!r} are the same arm (objective and config "
                "fields), so both would train the same model; drop one, or make them differ (e.g. +seed=2)."
            )
        recipes[recipe] = arm.label
        if arm.slug in slugs:
            raise UserError(
                f"--objectives: {slugs[arm.slug]!r} and {arm.label!r} would share a folder; label one."
            )
        slugs[arm.slug] = arm.label


def check_inputs(settings: CompareSettings) -> tuple[Any, FinetuneSettings, dict[str, Any], bool]:
    """Every refusal that needs no vocabulary, before anything is written (a run and `--plan` both start here):
    the arms, the corpus, --out and --cache-dir, the GLUE files and the probes' data (every row read), the report
    and the manifest in --out. Returns the base config, the fine-tuning settings, the manifest to record, and
    whether it replaces a stale one (`_check_manifest`). The steps each budget buys are checked once the
    vocabulary's size is known (`run_compare`, `describe_plan`)."""
    check_arms(settings)
    if not Path(settings.corpus).exists():
        raise UserError(f"{settings.corpus}: corpus not found; give --corpus a text file or directory.")
    if next(read_documents(settings.corpus), None) is None:
        raise UserError(
            f"corpus {settings.corpus} is empty: it holds no text; give a corpus with text in it."
        )
    _refuse_outputs_in_the_corpus(settings)
    refuse_file_as_directory(
        _cache(settings), "--cache-dir" if settings.cache_dir else "--cache-dir (default)"
    )
    specs = [get_task(task) for task in settings.tasks]
    check_files(specs, settings.glue_data, predict_test=False)
    base = build_config(settings.size, None, dict(settings.overrides))
    finetune = glue_settings(settings, base)
    check_run_inputs(specs, finetune, settings.seeds)
    _refuse_foreign_out(settings.out)
    _check_report(settings, finetune)
    manifest, restart = _check_manifest(settings)
    # Every file fine-tuning and the probes read, read now (last: it takes seconds): a malformed row, a missing
    # probe file or a probe sample of one class had stopped the run at its first cell, after every arm pretrained.
    check_task_rows(specs, settings.glue_data, predict_test=False, skip_malformed=finetune.skip_malformed)
    _check_probe_data(settings)
    return base, finetune, manifest, restart


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


def _check_probe_data(settings: CompareSettings) -> None:
    """Each probe's files, read, and each seed's training sample (two classes at least), as `electra probe` checks
    them before its first probe."""
    if not settings.probes:
        return
    specs = [get_probe(name) for name in settings.probes]
    check_probe_inputs(specs, settings.probe_data, PROBE_MAX_LENGTH)
    for spec in specs:
        data = spec.read(Path(settings.probe_data))
        training_samples(spec, data, settings.probe_data, settings.seeds, settings.probe_max_train)


# What a run writes into OUT after compare.json (besides its scratch: cache/, dot-files), each replaced or reused.
OUT_NAMES = (
    "tokenizer",
    "pretrain",
    "checkpoints",
    "glue",
    "probes",
    "results.json",
    "results.md",
    "curve.png",
)


def _refuse_foreign_out(out: Path) -> None:
    """An OUT without compare.json (written before any of OUT_NAMES) is no comparison's folder: its results.md,
    curve.png or tokenizer/ are a user's (or another command's run) that a run would replace or take as its own,
    so they are refused, --overwrite or not (it replaces only a comparison's own report). Other files are left."""
    if not out.is_dir() or (out / "compare.json").is_file():
        return
    clashing = sorted(path.name for path in out.iterdir() if path.name in OUT_NAMES)
    if clashing:
        raise UserError(
            f"{out} holds {', '.join(clashing)} but no compare.json, so it is not a comparison's folder and a run "
            "would write over them; move them out, or choose another --out."
        )


def _arm_configs(settings: CompareSettings, vocab_size: int) -> dict[str, Any]:
    """Every arm's config for this vocabulary: refuses a budget that buys an arm fewer steps than checkpoints."""
    return {arm.label: objective_config(settings, arm, vocab_size) for arm in settings.arms}


def run_compare(settings: CompareSettings) -> dict:
    base, finetune, manifest, restart = check_inputs(settings)
    # One run per OUT: a second one started beside a live one (a rerun while the first still runs) fine-tuned the
    # same cells again and raced it for OUT/tokenizer; pretraining alone was guarded, by each arm's own lock.
    with output_lock(settings.out):
        return _run_compare(settings, base, finetune, manifest, restart)


def _run_compare(settings: CompareSettings, base, finetune, manifest: dict[str, Any], restart: bool) -> dict:
    # The steps each budget buys depend on the vocabulary, so they are checked once it is trained (or loaded) and
    # before OUT/tokenizer or OUT/compare.json is written: a refused run leaves nothing that binds the next one.
    def check(size: int) -> None:
        _arm_configs(settings, size)
        # A new OUT's manifest comes before OUT/tokenizer: a folder holding one without compare.json is no
        # comparison's (_refuse_foreign_out). A stale manifest is replaced only after it (below): a kill in
        # between must leave the old one, which still asks for --overwrite and so a new vocabulary.
        if not restart:
            _record_manifest(settings, manifest)

    tokenizer_dir = prepare_tokenizer(settings, base, check=check, replace=restart)
    _arm_configs(settings, len(load_saved_tokenizer(tokenizer_dir)))
    _record_manifest(settings, manifest, replace=restart)
    cells = {arm.label: pretrain_objective(settings, arm, tokenizer_dir) for arm in settings.arms}
    results = collect_results(settings, cells, finetune)
    write_report(results, settings.out)
    for probe in settings.probes:
        probe_cell(settings, None, probe)
    for index in range(settings.checkpoints):
        for arm in settings.arms:
            for probe in settings.probes:
                probe_cell(settings, cells[arm.label][index], probe)
            for task in settings.tasks:
                finetune_cell(settings, cells[arm.label][index], task, finetune)
            results = collect_results(settings, cells, finetune)
            write_report(results, settings.out)
    print(format_markdown(results))
    return results


def _check_manifest(settings: CompareSettings) -> tuple[dict[str, Any], bool]:
    """The pretraining settings OUT/compare.json must match for a rerun to resume (the cells were trained under
    them); returned for `_record_manifest`, which writes them once every check has passed, so that an input refused
    before any work leaves nothing to block the corrected rerun. A manifest under which no arm was pretrained (a
    run killed or failed before its first checkpoint, or one an older version refused after recording it) binds
    nothing: with --overwrite it is replaced (the second value is True), and so is OUT/tokenizer."""
    path = settings.out / "compare.json"
    current = {
        "corpus": str(Path(settings.corpus).resolve()),
        "size": settings.size,
        "overrides": settings.overrides,
        "budget": settings.budget,
        "checkpoints": settings.checkpoints,
        # every arm reads OUT/tokenizer, made from it: another --vocab on a rerun would have been ignored
        "vocab": str(Path(settings.vocab).resolve()) if settings.vocab else None,
    }
    if path.is_file():
        saved = read_json_record(path)
        if saved is None:
            raise UserError(
                f"{path}: unreadable (cut short by a full disk or a crash?); it records the pretraining settings of "
                f"the arms in {settings.out}: delete it and rerun with the settings they were pretrained with."
            )
        changed = [
            f"{key} (saved {json.dumps(saved.get(key), default=str)}, now {json.dumps(current[key], default=str)})"
            for key in PRETRAINING_KEYS
            if saved.get(key) != current[key]
        ]
        if changed:
            started = _pretrained_anything(settings)
            if not started and settings.overwrite:
                return current, True
            if started:
                advice = "rerun with the same settings to resume it, or choose another --out" + (
                    " (--overwrite replaces a report, never pretrained arms)" if settings.overwrite else ""
                )
            else:
                advice = "no arm was pretrained under them yet: pass --overwrite to start over with these"
            raise UserError(f"{path}: this comparison was run with other {', '.join(changed)}; {advice}.")
    return current, False


def _pretrained_anything(settings: CompareSettings) -> bool:
    """Whether any arm in --out has pretrained: a checkpoint, an export, a cell evaluated, or a report."""
    out = settings.out
    if (out / "results.json").exists() or any((out / "pretrain").glob("*/checkpoints/step-*")):
        return True
    return any(
        path.is_file() for name in ("checkpoints", "glue", "probes") for path in (out / name).rglob("*")
    )


def _record_manifest(settings: CompareSettings, manifest: dict[str, Any], replace: bool = False) -> None:
    path = settings.out / "compare.json"
    if replace or not path.is_file():
        _write_json(path, manifest)


def _fraction_name(index: int, total: int) -> str:
    return f"{index}of{total}"


def _per_step(config) -> float:
    return float(flop_report(config).train_flops_per_step)


def _cache(settings: CompareSettings) -> str:
    return settings.cache_dir or str(settings.out / "cache")


def _tokenizer_cache(settings: CompareSettings) -> str:
    return str(Path(_cache(settings)) / "tokenizers")


def _notice_unreadable(path: Path) -> None:
    """Say so when a cell is redone because its file is unreadable (not merely missing or made otherwise)."""
    if path.is_file() and read_json_record(path) is None:
        print(f"compare: {path} is unreadable (cut short?); doing this cell again")


def _write_json(path: Path, value: Any) -> None:
    write_json_atomically(path, json_safe(value), allow_nan=False, default=str)
