"""Checkpoints of a CVT run (`electra tag-bilstm` / `parse-bilstm` with `--save-every N`), and resuming from one.

A checkpoint is one safetensors file, `OUTPUT/seed-N/checkpoint.safetensors`, replaced in one rename, so a kill
leaves the previous checkpoint or the new one, never half of each. It holds the model, the weight average, SGD's
momentum buffers, the best average so far, torch's random state (dropout), and, as a UTF-8 JSON tensor, the
counters, the evaluation history and the settings. Nothing is unpickled on reading.

The minibatch order is not stored: it comes from a `random.Random(seed)` that only the batch streams draw from,
so a resume rebuilds the streams and draws the batches already trained on again (cheap: lists of indices). A
resumed run therefore continues exactly as the uninterrupted one would have, as the tests check.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from electra.core.errors import UserError
from electra.core.files import read_safetensors
from electra.export.checkpoint import save_tensors_atomically

CHECKPOINT_FILE = "checkpoint.safetensors"
# Settings that change how a run is watched, saved or how long it goes on, not what one update does: a resume may
# change them (the learning rate depends on the update count only, so a longer --max-steps continues the schedule).
RESUMABLE = frozenset({"save_every", "eval_batch_size", "max_steps", "seeds"})
_STATE = "state_json"


@dataclass
class Progress:
    """The counters and records of a run: updates of both kinds, labeled ones, the running loss sums since the
    last evaluation, each evaluation's row, the best row, and the wall time so far."""

    updates: int = 0
    labeled: int = 0
    sums: dict[str, float] = field(default_factory=lambda: {"labeled": 0.0, "unlabeled": 0.0, "n": 0})
    history: list[dict] = field(default_factory=list)
    best: dict | None = None
    seconds: float = 0.0


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    average: torch.nn.Module,
    average_updates: int,
    optimizer: torch.optim.Optimizer,
    best_state: dict[str, torch.Tensor] | None,
    progress: Progress,
    identity: dict[str, Any],
) -> None:
    """Write the run's state to `path` (see the module's docstring); `identity` (settings, data sizes) is what a
    resume must find the same."""
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors |= {f"average.{k}": v for k, v in average.state_dict().items()}
    tensors |= {f"best.{k}": v for k, v in (best_state or {}).items()}
    for i, parameter in enumerate(p for group in optimizer.param_groups for p in group["params"]):
        buffer = optimizer.state.get(parameter, {}).get("momentum_buffer")
        if buffer is not None:
            tensors[f"momentum.{i}"] = buffer
    tensors["torch_rng"] = torch.get_rng_state()
    record = {"progress": asdict(progress), "average_updates": average_updates, "identity": identity}
    tensors[_STATE] = torch.frombuffer(bytearray(json.dumps(record).encode()), dtype=torch.uint8)
    save_tensors_atomically({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, path)


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    average: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    identity: dict[str, Any],
) -> tuple[Progress, int, dict[str, torch.Tensor] | None]:
    """Restore a run saved by `save_checkpoint` into `model`, `average` and `optimizer` and torch's random state;
    return its progress, the average's update count and the best state. A checkpoint of another run (settings
    other than `RESUMABLE` ones, other data) is one UserError naming the file."""
    tensors = read_safetensors(path)
    record = json.loads(bytes(tensors.pop(_STATE).tolist()).decode())
    saved = record["identity"]
    changed = sorted(
        k for k in set(saved) | set(identity) if k not in RESUMABLE and saved.get(k) != identity.get(k)
    )
    if changed:
        details = ", ".join(f"{k} {saved.get(k)!r} -> {identity.get(k)!r}" for k in changed[:4])
        raise UserError(
            f"{path}: this checkpoint is of another run ({details}); resume with the same settings and data, "
            "or drop --resume and pass --overwrite to start again."
        )
    progress = Progress(**record["progress"])
    if progress.labeled > identity["max_steps"]:
        raise UserError(
            f"{path}: the run is at update {progress.labeled}, past --max-steps {identity['max_steps']}; "
            "pass a larger --max-steps to go on."
        )

    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}

    model.load_state_dict(part("model."))
    average.load_state_dict(part("average."))
    for i, parameter in enumerate(p for group in optimizer.param_groups for p in group["params"]):
        if f"momentum.{i}" in tensors:
            optimizer.state[parameter]["momentum_buffer"] = tensors[f"momentum.{i}"].clone()
    torch.set_rng_state(tensors["torch_rng"])
    best = part("best.") or None
    return progress, record["average_updates"], best
