"""Is one GLUE arm better than another? Seed-level tests on the results.json files `electra glue` writes.

The BAM chapter reports medians over many seeds and tests differences with bootstrap hypothesis tests (Table 3.1)
and Mann-Whitney U tests (Tables 3.3-3.5), Holm-Bonferroni-corrected across tasks. Here each arm is one
results.json (single-task: every task's seeds; multi-task: one model per seed); a seed's GLUE score is the mean of
the paper's metric over the averaged tasks it ran (WNLI left out). For every other arm against the first:

- the median per task and of the seed averages, and their difference;
- Mann-Whitney U, two-sided, exact for small samples (scipy);
- a bootstrap test of the difference of medians: seeds resampled with replacement within each arm, p = twice the
  smaller tail of the resampled differences around 0;
- Holm-Bonferroni over the per-task Mann-Whitney p-values.

With n seeds per arm the smallest two-sided Mann-Whitney p is 2 / C(2n, n): 0.1 for n = 3, 0.029 for n = 4.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from electra.core.errors import UserError
from electra.glue.tasks import PAPER_AVERAGE_TASKS

AVERAGE = "average"
BOOTSTRAP_MIN_SEEDS = (
    5  # below this many seeds per arm, the comparison says the bootstrap p is not to be trusted
)


def read_arm(directory: str | Path) -> dict:
    """An arm's results.json (`electra glue --output DIR`), refused in one line where there is none."""
    path = Path(directory) / "results.json"
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(
            f"{path}: no readable results.json; give an `electra glue --output` folder."
        ) from None
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise UserError(f"{path}: not the results.json `electra glue` writes.")
    return results


def arm_scores(results: Mapping) -> dict[str, dict[int, float]]:
    """{task: {seed: primary metric}} for the averaged tasks, and {AVERAGE: {seed: mean over those tasks}} for the
    seeds every averaged task has."""
    per_task: dict[str, dict[int, float]] = {}
    for name, row in results["results"].items():
        if name not in PAPER_AVERAGE_TASKS:
            continue
        values = {
            int(s): v for s, v in zip(row["seed_ids"], row["seeds"]) if v is not None and not math.isnan(v)
        }
        if values:
            per_task[name] = values
    if per_task:
        common = set.intersection(*(set(values) for values in per_task.values()))
        per_task[AVERAGE] = {s: float(np.mean([v[s] for v in per_task.values()])) for s in sorted(common)}
    return per_task


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value (NaN with fewer than one value on a side)."""
    from scipy.stats import mannwhitneyu

    if not a or not b:
        return math.nan
    if len(set(a) | set(b)) == 1:
        return 1.0
    return float(mannwhitneyu(b, a, alternative="two-sided").pvalue)


def min_mann_whitney_p(n: int) -> float:
    """The smallest two-sided Mann-Whitney p two arms of `n` seeds each can reach: 2 / C(2n, n)."""
    return 2.0 / math.comb(2 * n, n) if n else math.nan


def bootstrap_p(a: Sequence[float], b: Sequence[float], samples: int = 10_000, seed: int = 0) -> float:
    """Two-sided bootstrap p-value of median(b) − median(a) ≠ 0, seeds resampled within each arm."""
    if not a or not b:
        return math.nan
    rng = np.random.default_rng(seed)
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diffs = np.median(rng.choice(y, (samples, len(y))), axis=1) - np.median(
        rng.choice(x, (samples, len(x))), axis=1
    )
    tail = min(np.mean(diffs <= 0), np.mean(diffs >= 0))
    return float(min(1.0, 2 * tail))


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm-Bonferroni-adjusted p-values (monotone, capped at 1); NaN stays NaN."""
    finite = sorted((p, name) for name, p in pvalues.items() if not math.isnan(p))
    adjusted, running = {}, 0.0
    for rank, (p, name) in enumerate(finite):
        running = max(running, min(1.0, (len(finite) - rank) * p))
        adjusted[name] = running
    return {name: adjusted.get(name, math.nan) for name in pvalues}


def compare_arms(arms: Mapping[str, Mapping]) -> dict:
    """Every arm against the first: medians, differences, Mann-Whitney and bootstrap p-values per task and for the
    seed averages, and the per-seed values compared. `arms` holds at least two (`electra glue-compare` refuses
    fewer with its arguments, before any results file is read)."""
    scores = {name: arm_scores(results) for name, results in arms.items()}
    reference, *others = list(arms)
    comparisons = []
    for other in others:
        rows = {}
        for task in [t for t in scores[reference] if t in scores[other]]:
            a, b = list(scores[reference][task].values()), list(scores[other][task].values())
            rows[task] = {
                "median_reference": float(np.median(a)),
                "median": float(np.median(b)),
                "difference": float(np.median(b) - np.median(a)),
                "mann_whitney_p": mann_whitney(a, b),
                "bootstrap_p": bootstrap_p(a, b),
            }
        adjusted = holm({t: row["mann_whitney_p"] for t, row in rows.items() if t != AVERAGE})
        for task, p in adjusted.items():
            rows[task]["mann_whitney_p_holm"] = p
        comparisons.append({"reference": reference, "arm": other, "tasks": rows})
    return {
        "arms": {
            name: {task: {str(s): v for s, v in values.items()} for task, values in arm.items()}
            for name, arm in scores.items()
        },
        "comparisons": comparisons,
    }


def _pct(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def _p(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.3f}"


def format_comparison(report: Mapping) -> str:
    """Markdown: each arm's per-seed values and median per task, then each comparison with its p-values."""
    arms = report["arms"]
    tasks = [t for t in [*PAPER_AVERAGE_TASKS, AVERAGE] if any(t in arm for arm in arms.values())]
    lines = ["| arm | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for name, arm in arms.items():
        cells = []
        for task in tasks:
            values = list(arm.get(task, {}).values())
            if not values:
                cells.append("–")
                continue
            seeds = " ".join(_pct(v) for v in values)
            cells.append(f"**{_pct(float(np.median(values)))}** ({seeds})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Median over seeds in bold, every seed in brackets (seed order), scores × 100; `average` is each seed's mean "
        "over the tasks, so its median can differ from results.md's mean of per-task medians.",
        "",
    ]
    fewest = min((len(v) for arm in arms.values() for v in arm.values()), default=0)
    if fewest < BOOTSTRAP_MIN_SEEDS:
        lines += [
            f"With {fewest} seed(s) in an arm the bootstrap p is anti-conservative (a resample can only reuse those "
            "few values: arms that do not overlap give p = 0); read the Mann-Whitney p, whose floor at this size (exact, no ties) is "
            f"{min_mann_whitney_p(fewest):.3f}.",
            "",
        ]
    for comparison in report["comparisons"]:
        lines += [
            f"**{comparison['arm']} vs {comparison['reference']}**",
            "",
            "| task | difference | Mann-Whitney p | Holm | bootstrap p |",
            "|---|---|---|---|---|",
        ]
        for task, row in comparison["tasks"].items():
            lines.append(
                f"| {task} | {100 * row['difference']:+.1f} | {_p(row['mann_whitney_p'])} | "
                f"{_p(row.get('mann_whitney_p_holm', math.nan))} | {_p(row['bootstrap_p'])} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot_arms(report: Mapping, path: Path) -> None:
    """Each arm's per-seed GLUE averages as points with the median as a bar: the spread a table hides."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = report["arms"]
    figure, axis = plt.subplots(figsize=(1.6 + 1.4 * len(arms), 3.4))
    for x, arm in enumerate(arms.values()):
        values = [100 * v for v in arm.get(AVERAGE, {}).values()]
        if not values:
            continue
        axis.scatter([x] * len(values), values, color="tab:blue", zorder=3)
        axis.hlines(float(np.median(values)), x - 0.3, x + 0.3, color="black", zorder=2)
    axis.set_xticks(range(len(arms)), list(arms), rotation=15)
    axis.set_ylabel("GLUE dev average (no WNLI)")
    axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_comparison(arms: Mapping[str, Mapping], output: Path) -> dict:
    """comparison.json, comparison.md and comparison.png in `output`; returns the report."""
    report = compare_arms(arms)
    output.mkdir(parents=True, exist_ok=True)
    safe = json.loads(json.dumps(report, default=float).replace("NaN", "null"))
    (output / "comparison.json").write_text(json.dumps(safe, indent=2) + "\n", encoding="utf-8")
    (output / "comparison.md").write_text(format_comparison(report), encoding="utf-8")
    plot_arms(report, output / "comparison.png")
    return report
