"""The report of a comparison: results.json, results.md and curve.png in OUT, rebuilt from the cells on disk.

Each fraction's row holds the per-task median over seeds (the paper's metric per task), the paper's GLUE average
(the mean of the task medians) with its per-seed spread, and the probes' accuracies; a score not yet on disk, or
stale, is None.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict
from pathlib import Path

from electra.app.compare.glue import current_cell
from electra.app.compare.layout import fraction_name, glue_cell, probe_folder, write_json
from electra.app.compare.plot import plot_curve
from electra.app.compare.probes import probes_on_disk
from electra.app.compare.settings import CompareSettings, parse_arm
from electra.core.files import write_text_atomically
from electra.glue.finetune import glue_average
from electra.glue.settings import FinetuneSettings


def collect_results(
    settings: CompareSettings, cells: dict[str, list[dict]], finetune: FinetuneSettings | None
) -> dict:
    """The comparison so far, from whatever cells are on disk (missing scores are None)."""
    objectives = {}
    for objective, records in cells.items():
        objectives[objective] = {
            "train_flops_per_step": records[0]["train_flops_per_step"] if records else None,
            "max_steps": records[0]["max_steps"] if records else None,
            "cells": [_result_row(settings, objective, cell, finetune) for cell in records],
        }
    return {
        "corpus": settings.corpus,
        "size": settings.size,
        "budget": settings.budget,
        "checkpoints": settings.checkpoints,
        "overrides": settings.overrides,
        **evaluation_settings(settings, finetune),
        "random_encoder": probes_on_disk(settings, probe_folder(settings)),
        "objectives": objectives,
    }


def _result_row(
    settings: CompareSettings, objective: str, cell: dict, finetune: FinetuneSettings | None
) -> dict:
    """One fraction's row: its scores per task, the GLUE average once every task is fine-tuned, its probes."""
    folder = cell.get("slug") or parse_arm(objective).slug
    rows: dict[str, dict] = {}
    name = fraction_name(cell["index"], settings.checkpoints)
    missing = 0
    for task in settings.tasks:
        done = current_cell(glue_cell(settings, folder, name, task), settings, finetune, task)
        if done is not None:
            rows.update(done["rows"])
        missing += done is None
    for row in rows.values():  # JSON stores an undefined metric (NaN) as null
        row["median"] = math.nan if row["median"] is None else row["median"]
    # A fraction whose tasks are not all fine-tuned yet (a run killed inside the fraction, a task added) has no
    # GLUE average: the mean of the tasks done would sit on the curve beside other fractions' means over all tasks.
    average = glue_average(rows)[0] if not missing else math.nan
    return {
        **{k: cell[k] for k in ("fraction", "step", "train_flops")},
        "scores": {k: None if math.isnan(r["median"]) else r["median"] for k, r in rows.items()},
        "average": None if math.isnan(average) else average,
        "average_by_seed": seed_averages(rows) if not missing else [],
        "probes": probes_on_disk(settings, probe_folder(settings, folder, name)),
    }


def evaluation_settings(settings: CompareSettings, finetune: FinetuneSettings | None) -> dict:
    """How the checkpoints are evaluated, as results.json records it (a rerun must agree: `rerun`)."""
    return {
        "tasks": settings.tasks,
        "seeds": settings.seeds,
        "finetune_settings": asdict(finetune) if finetune is not None else None,
        "probes": list(settings.probes),
        "probe_max_train": settings.probe_max_train,
    }


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
    lines += ["", _table_note(results, bool(glue), probes)]
    return "\n".join(lines) + "\n"


def _table_note(results: dict, glue: bool, probes: list[str]) -> str:
    """The sentence under the table: the budget, the size, the corpus and how each column was computed."""
    seeds = results.get("seeds") or []
    note = (
        f"Budget {results['budget']:.3g} training FLOPs, size {results['size']}, corpus {results['corpus']}; "
        f"median over {len(seeds)} seed(s)"
    )
    if glue:
        note += "; average = mean of the task medians (the paper's GLUE average)"
    if probes:
        note += (
            "; probes: dev accuracy of a linear probe on frozen features (median [min-max] over seeds, "
            f"{probe_sample(results.get('probe_max_train'))} training sentences per seed)"
        )
    return note + "."


def _score(value: float | None) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def probe_sample(max_train: int | None) -> str:
    """The training sentences per probe seed, in words."""
    return str(max_train) if max_train else "each probe's default number of"


def _probe_score(entry: dict | None) -> str:
    if not entry:
        return "–"
    return f"{100 * entry['median']:.1f} [{100 * entry['min']:.1f}-{100 * entry['max']:.1f}]"


def write_report(results: dict, out: Path) -> dict[str, Path]:
    """results.json, results.md and curve.png in `out` (each replaced atomically)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "curve.png"}
    write_json(paths["json"], results)
    write_text_atomically(paths["markdown"], format_markdown(results))
    staging = out / ".curve.partial.png"
    plot_curve(results, staging)
    os.replace(staging, paths["plot"])
    return paths
