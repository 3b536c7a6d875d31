"""Running stage 1 (the joint task + LM training of `electra.tlm.joint.JointTask`) on the library's engine: its
length (steps, or a FLOP budget), its schedule and stops, and continuing it after an interruption."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from safetensors.torch import load_model

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.files import write_json_atomically
from electra.tlm.joint import JointTask
from electra.tlm.model import FlopCounter, TLMModel
from electra.tlm.settings import TLMSettings
from electra.tlm.tartan import write_weight_history
from electra.tlm.task_data import batches_forever, mean_padded_tokens
from electra.training.engine import Engine
from electra.training.pretraining import train_args
from electra.training.run_checkpoints import BEST_WEIGHTS
from electra.training.task import EarlyStopping, TrainArgs

logger = logging.getLogger(__name__)

STAGE1_DONE = "result.json"  # in OUT/stage1 once stage 1 has ended: its steps, FLOPs, stop and best state
STAGE1_NAMES = {"tlm": "TLM stage 1", "uniform": "MT-TARTAN", "meta": "META-TARTAN"}


def budget_steps(
    flops_budget: float,
    counter: FlopCounter,
    plan: dict[str, Any],
    rows: dict[str, list[dict]],
    external_rows: Any,
) -> int:
    """The stage-1 steps `flops_budget` buys, at the FLOPs of a step measured on sample batches of this run's
    data (task batch, ρ1 external batches, and META-TARTAN's dev batch) over all processes."""
    batch_size, seed, world, rho1 = plan["batch_size"], plan["seed"], plan["world"], plan["rho1"]
    probe_int = batches_forever(rows["train"], batch_size, seed + 7, plan["collate"])
    int_tokens = mean_padded_tokens(probe_int) * world
    ext_tokens = 0.0
    if rho1 > 0:
        probe_ext = batches_forever(external_rows, batch_size, seed + 7, plan["external_collate"])
        ext_tokens = mean_padded_tokens(probe_ext) * world * rho1
    per_step = counter.step(int(int_tokens), int(ext_tokens), plan["rho2"] > 0)
    if plan["weighting"] == "meta":  # one dev batch per step through the body
        per_step += counter.task_rate * mean_padded_tokens(
            batches_forever(rows["dev"], batch_size, 7, plan["collate"])
        )
    steps = max(1, math.ceil(flops_budget / per_step))
    logger.info("FLOP budget %.3g at ~%.3g FLOPs/step: %d stage-1 steps", flops_budget, per_step, steps)
    return steps


def stage1_args(settings: TLMSettings, config: PretrainConfig, output_dir: Path, steps: int) -> TrainArgs:
    """The config's optimizer settings, with TLM's own schedule, length and stops (early stopping on the dev
    metric with `eval_every`, from the starting weights' score when the run starts from a checkpoint)."""
    return replace(
        train_args(config, output_dir),
        max_steps=steps,
        warmup_steps=min(config.warmup_steps, steps // 10),
        schedule="reference",
        save_every=settings.save_every,
        flops_budget=settings.flops_budget,
        progress=settings.progress,
        description=f"{STAGE1_NAMES[settings.weighting]} ({settings.objective})",
        eval_every=settings.eval_every,
        early_stopping=(
            EarlyStopping(
                settings.metric, "max", settings.patience, evaluate_at_start=settings.init_from is not None
            )
            if settings.eval_every
            else None
        ),
    )


def run_stage1(
    settings: TLMSettings, config: PretrainConfig, output_dir: Path, joint: JointTask, steps: int
) -> tuple[int, float]:
    """Stage 1 trained (or continued, with `resume`) to its end in `output_dir`: (steps, FLOPs). A resume that
    finds it ended takes the weights it ended with and trains nothing; the main process records the end in
    STAGE1_DONE, and META-TARTAN's weights over the steps."""
    accelerator = joint.plan["accelerator"]
    stage1 = Engine(stage1_args(settings, config, output_dir, steps), accelerator)
    finished = finished_stage(output_dir) if settings.resume else None
    final_checkpoint = stage1.latest_checkpoint()
    if finished is not None and final_checkpoint is not None:  # stage 1 ended before the interruption
        load_model(joint.model, str(final_checkpoint / "model.safetensors"), strict=False)
        restore_best_state(stage1, joint.model, finished)
        return finished["step"], finished["flops"]
    resume_from = stage1.resume_checkpoint(settings.resume, "stage 1", finished=finished is not None)
    result = stage1.fit(joint, resume_from)
    if accelerator.is_main_process:
        best = result.best and {"step": result.best["step"], **result.best["metrics"]}
        done = {"step": result.step, "flops": result.flops, "stop": result.stop_reason, "best": best}
        write_json_atomically(output_dir / STAGE1_DONE, done)
        if joint.meta is not None:
            write_weight_history(joint.meta.history, joint.terms, output_dir)
    return result.step, result.flops


def restore_best_state(stage1: Engine, model: TLMModel, finished: dict[str, Any]) -> None:
    """Load the weights stage 1 ended with into `model`, on a resume that finds stage 1 finished: its best dev
    state when it kept one (`eval_every`), which is not its last checkpoint's. Stage 2 and the test start from
    the same weights as in an uninterrupted run, so results.json does not depend on where a run was stopped."""
    if not finished.get("best") or stage1.checkpoints.directory is None:
        return
    best = stage1.checkpoints.directory / BEST_WEIGHTS
    if not best.is_file():
        raise UserError(
            f"--resume: {best} is missing, so stage 1's best dev state cannot be restored; start over with "
            "--overwrite."
        )
    load_model(model, str(best), strict=False)


def finished_stage(stage_dir: Path) -> dict[str, Any] | None:
    """What STAGE1_DONE in `stage_dir` records, or None while stage 1 has not ended."""
    path = stage_dir / STAGE1_DONE
    return json.loads(path.read_text()) if path.is_file() else None
