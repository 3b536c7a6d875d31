"""Training checkpoints without pickles: safetensors for tensors, JSON for everything else, renamed into place.

A checkpoint is a directory `checkpoints/step-XXXXXXX/`. It is written under a temporary name and renamed only
when complete, and `checkpoints/latest` (a one-line file, replaced atomically) names the newest, so a kill at any
moment leaves the previous checkpoint intact and findable. Every file's SHA-256 is stored beside it
(`checksums.json`); a resume verifies them and falls back to the newest intact checkpoint, saying so. Free space is
checked before a write, and a failed write cleans up after itself. Loading never unpickles, so a checkpoint from
elsewhere cannot run code.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from electra.core.errors import ElectraWarning, UserError
from electra.core.files import file_sha256, fsync_file, write_text_atomically
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled

LATEST = "latest"
CHECKSUMS = "checksums.json"


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def checkpoint_step(checkpoint: Path) -> int:
    """The optimizer step a checkpoint was taken at."""
    return int(json.loads((checkpoint / "trainer_state.json").read_text())["step"])


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The checkpoint `latest` names, or, when that pointer is gone or names a checkpoint that is gone (deleted by
    hand, a copy of the folder without it), the newest complete one there: checkpoints are renamed into place only
    when complete. Treating such a folder as holding none would have `--resume` refuse it and a run without
    `--resume` delete its checkpoints as a run's leftovers."""
    pointed, _ = _pointed_checkpoint(checkpoints_dir)
    if pointed is not None:
        return pointed
    if not checkpoints_dir.is_dir():
        return None
    complete = [p for p in checkpoints_dir.glob("step-*") if (p / "trainer_state.json").is_file()]
    return max(complete, key=lambda p: p.name, default=None)


def _pointed_checkpoint(checkpoints_dir: Path) -> tuple[Path | None, str | None]:
    """(the complete checkpoint `latest` names, None), or (None, what is wrong with that pointer), or (None, None)
    when there is no pointer."""
    pointer = checkpoints_dir / LATEST
    if not pointer.is_file():
        return None, None
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None, f"{pointer} is unreadable"
    path = checkpoints_dir / name
    if name and path.name and (path / "trainer_state.json").is_file():
        return path, None
    if not name:
        return None, f"{pointer} is empty"
    state = "incomplete (no trainer_state.json)" if path.is_dir() else "missing"
    return None, f"{pointer} names {name}, which is {state}"


def save_checkpoint(
    checkpoints_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    trainer_state: dict[str, Any],
    rank: int = 0,
    is_main: bool = True,
    barrier=lambda: None,
    keep: int = 2,
) -> Path:
    """Every process writes its RNG state; the main process writes the rest and publishes the directory.

    Refuses (one line) when the disk cannot hold one more checkpoint, and turns a failed write into one line after
    removing what it wrote: the previous checkpoints stay as they were.
    """
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoints_dir / checkpoint_name(step)
    staging = checkpoints_dir / f".{checkpoint_name(step)}.partial"
    needed = checkpoint_bytes(model, optimizer)
    free = shutil.disk_usage(checkpoints_dir).free
    if free < needed:  # every process decides alike: no process is left waiting at a barrier
        raise UserError(
            f"{checkpoints_dir}: {_mib(free)} free, a checkpoint needs about {_mib(needed)} (the oldest is removed "
            "only after the new one is complete); free some space, lower keep_checkpoints, or use another "
            f"{spelled(RunInputs, 'output_dir')}."
        )
    try:
        if is_main:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        barrier()
        _save_rng(staging, rank)
        if is_main:
            save_model(model, str(staging / "model.safetensors"))
            _save_optimizer(optimizer, staging)
            state = dict(trainer_state, step=step, scheduler=_jsonable(scheduler.state_dict()))
            (staging / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n")
        barrier()
        if is_main:
            sums = {file.name: file_sha256(file) for file in sorted(staging.iterdir())}
            (staging / CHECKSUMS).write_text(json.dumps(sums, indent=2) + "\n")
            for file in staging.iterdir():
                fsync_file(file)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
            write_text_atomically(checkpoints_dir / LATEST, final.name + "\n", durable=True)
            _prune(checkpoints_dir, keep)
    except OSError as exc:
        if is_main:
            shutil.rmtree(staging, ignore_errors=True)
        raise UserError(
            f"{checkpoints_dir}: could not write the step-{step} checkpoint ({exc.strerror or exc}); it needs about "
            f"{_mib(needed)}. Nothing half-written was left; the previous checkpoints are intact."
        ) from None
    barrier()
    return final


def checkpoint_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """About what a checkpoint of this model and optimizer occupies (weights, optimizer state, some slack)."""
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    state = sum(
        v.numel() * v.element_size()
        for s in optimizer.state.values()
        for v in s.values()
        if torch.is_tensor(v)
    )
    return int((weights + max(state, 2 * weights)) * 1.05) + (1 << 20)


def verify_checkpoint(path: Path) -> str | None:
    """None when every file matches its stored SHA-256 (or the checkpoint predates checksums), else what is wrong."""
    if not (path / "trainer_state.json").is_file():
        return "trainer_state.json is missing"
    sums_file = path / CHECKSUMS
    if not sums_file.is_file():
        return None
    try:
        sums = json.loads(sums_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{CHECKSUMS} is not valid JSON"
    for name, expected in sums.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file_sha256(file) != expected:
            return f"{name} does not match its checksum"
    return None


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


def latest_intact_checkpoint(
    checkpoints_dir: Path, notice: Callable[[str], None] = _to_stderr
) -> Path | None:
    """The newest checkpoint whose files verify; each damaged one on the way is reported in one line (on standard
    error: a command's results go to standard output). A `latest` pointer that names no complete checkpoint is
    said as an `ElectraWarning` with the one used instead."""
    newest = latest_checkpoint(checkpoints_dir)
    _, pointer_problem = _pointed_checkpoint(checkpoints_dir)
    candidates = sorted((p for p in checkpoints_dir.glob("step-*") if p.is_dir()), reverse=True)
    if newest is not None:
        candidates = [newest] + [p for p in candidates if p != newest and p.name < newest.name]
    damaged = []
    for path in candidates:
        problem = verify_checkpoint(path)
        if problem is None:
            if damaged:
                notice(f"resuming from {path.name}: the newer checkpoint(s) {', '.join(damaged)} are damaged")
            if pointer_problem is not None:
                warnings.warn(
                    f"{pointer_problem}; resuming from {path.name}, the newest intact checkpoint there.",
                    ElectraWarning,
                    stacklevel=2,
                )
            return path
        notice(f"checkpoint {path} is damaged ({problem}); trying the one before")
        damaged.append(path.name)
    if damaged:
        raise UserError(
            f"{checkpoints_dir}: every checkpoint is damaged ({', '.join(damaged)}); start a new "
            f"{spelled(RunInputs, 'output_dir')}."
        )
    return None


def checkpoint_processes(path: Path) -> int:
    """How many processes wrote this checkpoint: each one saves its own RNG state in it."""
    return len(list(path.glob("rng-rank*.safetensors")))


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer, scheduler, rank: int | None = 0
) -> dict[str, Any]:
    """Load a checkpoint into `model`, `optimizer` and `scheduler`, and process `rank`'s random streams (None:
    leave them; an elastic resume seeds its own); returns the trainer state."""
    state = json.loads((path / "trainer_state.json").read_text())
    missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
    if unexpected or [m for m in missing if not _is_alias(model, m)]:
        raise UserError(
            f"checkpoint {path} does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})."
        )
    _load_optimizer(optimizer, path)
    scheduler.load_state_dict(state["scheduler"])
    if rank is not None:
        _load_rng(path, rank)
    return state


def _is_alias(model: torch.nn.Module, name: str) -> bool:
    """save_model drops the second name of a shared tensor; such names are fine to be 'missing'."""
    params = dict(model.named_parameters(remove_duplicate=False))
    tensor = params.get(name)
    if tensor is None:
        return False
    return sum(1 for other in params.values() if other is tensor) > 1


def _save_optimizer(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if torch.is_tensor(value):
                tensors[f"{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{key}"] = value
    save_file(tensors, str(directory / "optimizer.safetensors"))
    meta = {"param_groups": state["param_groups"], "scalars": scalars}
    (directory / "optimizer.json").write_text(json.dumps(_jsonable(meta)) + "\n")


def _load_optimizer(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    tensors = load_file(str(directory / "optimizer.safetensors"))
    meta = json.loads((directory / "optimizer.json").read_text())
    state: dict[int, dict[str, Any]] = {}
    for name, value in list(tensors.items()) + list(meta["scalars"].items()):
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def _save_rng(directory: Path, rank: int) -> None:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = cuda_state
    save_file(tensors, str(directory / f"rng-rank{rank}.safetensors"))
    py_version, py_state, py_gauss = random.getstate()
    meta = {"python": [py_version, list(py_state), py_gauss], "numpy": np.random.get_state(legacy=False)}
    (directory / f"rng-rank{rank}.json").write_text(json.dumps(_jsonable(meta)) + "\n")


def _load_rng(directory: Path, rank: int) -> None:
    file = directory / f"rng-rank{rank}.safetensors"
    if not file.is_file():
        raise UserError(
            f"checkpoint {directory} has no RNG state for process {rank}; resume with the same number of processes."
        )
    tensors = load_file(str(file))
    torch.set_rng_state(tensors["torch"])
    if torch.cuda.is_available():
        cuda_states = [tensors[k] for k in sorted(tensors) if k.startswith("cuda")]
        if cuda_states:
            torch.cuda.set_rng_state_all(cuda_states)
    meta = json.loads((directory / f"rng-rank{rank}.json").read_text())
    version, py_state, gauss = meta["python"]
    random.setstate((version, tuple(py_state), gauss))
    np.random.set_state(meta["numpy"])


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if torch.is_tensor(value):
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if callable(value):
        return None
    return value


def save_tensors_atomically(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """A safetensors file replaced in one rename, so a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(temporary))
    fsync_file(temporary)
    os.replace(temporary, path)


def _prune(checkpoints_dir: Path, keep: int) -> None:
    steps = sorted(p for p in checkpoints_dir.glob("step-*") if p.is_dir())
    for old in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
