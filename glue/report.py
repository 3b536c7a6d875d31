"""The results table (stdout and Markdown), results.json, and the TSV files the GLUE server accepts."""

from __future__ import annotations

import json
import math
from pathlib import Path

from electra.finetune.results import json_safe

METRIC_NAMES = {"mcc": "MCC", "accuracy": "acc", "spearman": "Spearman", "pearson": "Pearson", "f1": "F1"}


def _pct(value: float) -> str:
    return "nan" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def table_rows(results: dict) -> list[list[str]]:
    rows = [["task", "metric", "median", "seeds", "other metrics (median)"]]
    for name, row in results["results"].items():
        others = ", ".join(
            f"{METRIC_NAMES.get(m, m)} {_pct(v)}" for m, v in row["medians"].items() if m != row["metric"]
        )
        seeds = " ".join(_pct(v) for v in row["seeds"])
        rows.append(
            [name, METRIC_NAMES.get(row["metric"], row["metric"]), _pct(row["median"]), seeds, others]
        )
    if results["average_over"]:
        count = len(results["average_over"])
        rows.append(["average", f"{count} task{'s' if count != 1 else ''}", _pct(results["average"]), "", ""])
    return rows


def format_table(results: dict) -> str:
    """Aligned plain text for the terminal: scores are percentages as the paper prints them."""
    rows = table_rows(results)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    flops = results.get("finetune_flops")
    if flops:
        lines.append(f"fine-tuning FLOPs: {flops:.3g} ({results.get('finetune_flops_method')})")
    return "\n".join(lines)


def format_markdown(results: dict) -> str:
    rows = table_rows(results)
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    settings = results["settings"]
    lines += [
        "",
        f"Model `{results['model']}` ({settings['size']} settings: lr {settings['learning_rate']:g}, layer decay "
        f"{settings['layer_decay']:g}, batch {settings['batch_size']}), seeds {results['seeds']}. Scores x100, "
        "median over seeds.",
        f"Average: {results['average_convention']}.",
    ]
    if results.get("carried_over"):
        lines.append(
            f"Kept from an earlier run in this folder (same model and settings; seeds as in their rows' "
            f"results.json entries): {', '.join(results['carried_over'])}."
        )
    if results.get("finetune_flops"):
        lines.append(
            f"Fine-tuning FLOPs: {results['finetune_flops']:.3g} ({results['finetune_flops_method']})."
        )
    return "\n".join(lines) + "\n"


def write_test_predictions(predictions: dict[str, list[tuple[str, str]]], directory: Path) -> list[Path]:
    """One `<TASK>.tsv` per GLUE-server task (index<TAB>prediction); zip the folder to submit."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, rows in predictions.items():
        path = directory / f"{stem}.tsv"
        path.write_text(
            "index\tprediction\n" + "".join(f"{i}\t{label}\n" for i, label in rows), encoding="utf-8"
        )
        written.append(path)
    return written


def write_outputs(results: dict, output_dir: Path, test_predictions: dict | None = None) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(json_safe(results), indent=2, default=str, allow_nan=False)
    (output_dir / "results.json").write_text(text + "\n", encoding="utf-8")
    (output_dir / "results.md").write_text(format_markdown(results), encoding="utf-8")
    if test_predictions:
        write_test_predictions(test_predictions, output_dir / "glue_test")
