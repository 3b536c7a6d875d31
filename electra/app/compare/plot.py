"""The comparison's curve: score against pretraining FLOPs, one line per arm (the paper's Figure 5.1, left).

matplotlib is imported when a figure is drawn, not with the module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from electra.core.files import save_figure_atomically

# (train FLOPs, median, min over seeds, max over seeds) of one fraction, or None where it has no score yet
Point = tuple[float, float, float, float]
MARKERS = "osD^vP*X"


def curve_figure(results: dict) -> Any:
    """Average score against training FLOPs (log axis), one line per objective with the spread of its per-seed
    averages as a bar (the paper's Figure 5.1, left). Objectives are drawn with their own marker and a slight
    horizontal offset, so a line that coincides with another still shows. One panel for the GLUE average (when
    tasks were run) and one per probe, with the random encoder as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(results)
    figure, axes = plt.subplots(
        1, max(1, len(panels)), figsize=(6.0 * max(1, len(panels)), 4.2), squeeze=False
    )
    for axis, (title, ylabel, points, reference) in zip(axes[0], panels):
        _draw_lines(axis, results, points)
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


def _panels(results: dict) -> list[tuple[str, str, Callable[[dict], Point | None], dict | None]]:
    """(title, y label, the point of a cell, the random encoder's entry) per panel: the GLUE average when tasks
    were run (or nothing else was), then one per probe."""
    panels: list[tuple[str, str, Callable[[dict], Point | None], dict | None]] = []
    if results.get("tasks") or not results.get("probes"):
        panels.append(("GLUE average", "average dev score", _glue_points, None))
    for probe in results.get("probes") or []:
        reference = (results.get("random_encoder") or {}).get(probe)
        panels.append((f"probe: {probe}", "dev accuracy", _probe_points(probe), reference))
    return panels


def _draw_lines(axis: Any, results: dict, points: Callable[[dict], Point | None]) -> None:
    """One line per objective, each point the median over seeds with its min-max as a bar."""
    objectives = list(results["objectives"].items())
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
            xs, ys, yerr=[below, above], marker=MARKERS[index % len(MARKERS)], capsize=3, label=objective
        )


def _glue_points(cell: dict) -> Point | None:
    if cell["average"] is None:
        return None
    spread = cell.get("average_by_seed") or [cell["average"]]
    return cell["train_flops"], cell["average"], min(spread), max(spread)


def _probe_points(probe: str) -> Callable[[dict], Point | None]:
    def points(cell: dict) -> Point | None:
        entry = (cell.get("probes") or {}).get(probe)
        return None if entry is None else (cell["train_flops"], entry["median"], entry["min"], entry["max"])

    return points


def plot_curve(results: dict, path: Path) -> Path:
    """Draw `curve_figure` and save it to `path` atomically."""
    import matplotlib.pyplot as plt

    figure = curve_figure(results)
    try:
        save_figure_atomically(figure, path, dpi=120)
    finally:
        plt.close(figure)
    return path
