"""What a multi-task run reports: the results of every seed and task (results.json's layout, the paper's average),
and the model card of the student it keeps.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from electra.export.model_card import CARD, CardFacts, render_card
from electra.glue.finetune import AVERAGE_CONVENTION, glue_average, summarise
from electra.glue.seed_run import SeedRun
from electra.glue.tasks import PAPER_AVERAGE_TASKS, TaskSpec, get_task

MODEL_NAME = "multitask"  # OUTPUT/runs/multitask/seed-N, OUTPUT/checkpoints/multitask


def multitask_results(
    model_dir: Path,
    init_from: Path | None,
    specs: list[TaskSpec],
    resolved: dict[str, Any],
    seeds: list[int],
    runs: list[SeedRun],
) -> dict[str, Any]:
    """results.json of a multi-task run: `run_glue`'s layout (per-task rows, the average), plus each seed's
    average and the multi-task settings."""
    rows: dict[str, dict] = {}
    for spec in specs:
        rows.update(summarise(spec, runs))
    average, averaged = glue_average(rows)
    return {
        "model": str(model_dir),
        "init_from": str(init_from) if init_from else None,
        "multitask": True,
        "tasks": [spec.name for spec in specs],
        "carried_over": [],
        "settings": resolved,
        "seeds": seeds,
        "results": rows,
        "average": average,
        "average_over": averaged,
        "seed_averages": {str(run.seed): seed_average(run) for run in runs},
        "average_convention": AVERAGE_CONVENTION,
        "finetune_flops": sum(run.flops for run in runs),
        "finetune_flops_method": runs[0].flops_method,
        "runs": {MODEL_NAME: [asdict(run) | {"test_predictions": None} for run in runs]},
    }


def seed_average(run: SeedRun) -> float:
    """One seed's GLUE average (the paper's metric of every averaged task it ran; NaN where none)."""
    values = []
    for name in PAPER_AVERAGE_TASKS:
        if name in run.metrics:
            value = run.metrics[name].get(get_task(name).primary_metric, math.nan)
            if value is not None and not math.isnan(value):
                values.append(value)
    return float(np.mean(values)) if values else math.nan


def write_multitask_card(directory: Path, model_dir: Path, results: dict, seed: int) -> None:
    """The saved student's README.md: what it was trained from and on, its dev scores, and how to load it."""
    settings = results["settings"]
    multi = settings["multitask"]
    taught = (
        "born-again distillation from single-task teachers" if settings["teachers"] else "gold labels only"
    )
    schedule = (
        f"fixed λ {multi['fixed_lambda']}"
        if multi["fixed_lambda"] is not None
        else "teacher annealing λ = step/total"
    )
    sampling = (
        f"|D|^{multi['task_exponent']:g}" if multi["task_sampling"] else "all examples shuffled together"
    )
    rows = [
        ("base model", f"`{model_dir}`"),
        ("tasks", ", ".join(results["tasks"])),
        ("training", f"{taught}; {schedule if settings['teachers'] else 'λ = 1'}"),
        ("task sampling", sampling),
        (
            "recipe",
            f"{settings['epochs']:g} epochs, batch {settings['batch_size']}, learning rate "
            f"{settings['learning_rate']:g}, layer-wise decay {settings['layer_decay']:g}, max length "
            f"{settings['max_seq_length']}, seed {seed} (the best of {results['seeds']})",
        ),
    ]
    metrics = {
        name: row["per_seed"][row["metric"]][row["seed_ids"].index(seed)]
        for name, row in results["results"].items()
    }
    first = get_task(results["tasks"][0])
    pair = ', ["its second sentence"]' if first.text_b else ""
    code = (
        "from transformers import AutoTokenizer\n"
        "from electra.glue.model import MultiTaskModel  # installed with electra\n\n"
        f'tokenizer = AutoTokenizer.from_pretrained("{directory}")\n'
        f'model = MultiTaskModel.from_pretrained("{directory}")  # shared encoder + one head per task\n'
        f'print(model.predict("{first.name}", tokenizer, ["a first example"]{pair}))'
    )
    facts = CardFacts(
        title=f"{directory.parent.parent.name}: multi-task GLUE",
        summary="One model for several GLUE tasks, trained by `electra glue --multitask` (BAM, Clark's dissertation "
        "ch. 3): a shared encoder and one linear head per task. `AutoModel` loads the encoder; `MultiTaskModel` "
        "the heads too (STS-B's head predicts the score / 5).",
        facts=rows,
        metrics={f"dev {name}": float(value) for name, value in metrics.items() if value is not None},
        tags=("text-classification", "glue", "multi-task"),
    )
    (directory / CARD).write_text(render_card(facts, [("How to load", code)]), encoding="utf-8")
