"""The report of `bench/task_aware.py`: the finished arms collected from WORK, the table (median, range and every
seed), a Mann-Whitney U test of each TARTAN arm against each TAPT arm, compute and wall time per arm, the plot of
the test metric and META-TARTAN's weight curves."""

from __future__ import annotations

import csv
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from bench.task_aware_arms import ARMS, parse_arm
from electra.tlm.tasks import read_task_file

TASK_FILE = "task.json"  # WORK/<task>/task.json: the task's metric (and where its splits came from)
BUILT_IN = {"sciie": "macro_f1", "agnews": "accuracy"}  # the metric of a task whose folder predates TASK_FILE
REFERENCES = ("tapt_mlm_ft", "tapt_ft")  # the arms each TARTAN arm is tested against, where they ran

Results = dict[str, dict[str, list[dict[str, Any]]]]


def task_metric(work: Path, task: str) -> str:
    """The metric the task is scored by, as its first run recorded it (SciERC's and AG News's of older runs)."""
    path = work / task / TASK_FILE
    return json.loads(path.read_text())["metric"] if path.is_file() else BUILT_IN[task]


def collect(work: Path) -> Results:
    """WORK/<task>/<arm>/seed<k>/arm.json of every finished arm, by task, arms in the grid's order (then others)."""
    results: Results = {}
    tasks = {p.parent for p in work.glob(f"*/{TASK_FILE}")} | {
        work / t for t in BUILT_IN if (work / t).is_dir()
    }
    for folder in sorted(tasks):
        arms = sorted(
            {p.parent.parent.name for p in folder.glob("*/seed*/arm.json")},
            key=lambda a: (ARMS.index(a) if a in ARMS else len(ARMS), a),
        )
        for arm in arms:
            runs = sorted((folder / arm).glob("seed*/arm.json"), key=lambda p: int(p.parent.name[4:]))
            results.setdefault(folder.name, {})[arm] = [json.loads(r.read_text()) for r in runs]
    return results


def majority(work: Path, task: str) -> float:
    """The task metric of always predicting the training split's most common label, on test."""
    train = Counter(e.label for e in read_task_file(work / task / "data" / "train.jsonl"))
    test = [e.label for e in read_task_file(work / task / "data" / "test.jsonl")]
    share = test.count(train.most_common(1)[0][0]) / len(test)
    return share if task_metric(work, task) == "accuracy" else (2 * share / (1 + share)) / len(train)


def label(arm: str) -> str:
    try:
        return parse_arm(arm).label
    except Exception:  # an arm folder of an older grid: its name
        return arm


def summary(values: list[float]) -> str:
    """Median [min–max] in %, or the single value."""
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.median(values):.1f} [{100 * min(values):.1f}–{100 * max(values):.1f}]"


def mann_whitney(first: list[float], second: list[float]) -> tuple[float, float] | None:
    """(U of `first`, two-sided p) of the Mann-Whitney U test, exact where scipy can be (no ties, small samples);
    None where either side has fewer than two seeds (no test can say anything then)."""
    if len(first) < 2 or len(second) < 2:
        return None
    from scipy.stats import mannwhitneyu

    test = mannwhitneyu(first, second, alternative="two-sided", method="auto")
    return float(test.statistic), float(test.pvalue)


def table(results: Results, work: Path, heading: str) -> str:
    """Markdown: per task, every arm's test and dev metric (median [min–max], n, every seed), FLOPs, task steps
    and wall time; then each TARTAN arm against each TAPT arm (Mann-Whitney U, two-sided)."""
    lines = [heading, ""]
    for task, by_arm in results.items():
        metric = task_metric(work, task)
        lines += [
            f"### {task} (test {metric} at the best dev state, %)",
            "",
            "| arm | test median [min–max] | n | test, every seed | dev median | FLOPs | task steps | wall s |",
            "|---|---:|---:|---|---:|---:|---:|---:|",
        ]
        for arm, runs in by_arm.items():
            test = [r["test"][metric] for r in runs]
            dev = [r["dev"][metric] for r in runs]
            seeds = ", ".join(f"{100 * v:.1f}" for v in test)
            flops = statistics.median(r["total_flops"] for r in runs)
            steps = statistics.median(r["stage1_steps"] for r in runs)
            wall = statistics.median(r["wall_s"] for r in runs)
            lines.append(
                f"| {label(arm)} | {summary(test)} | {len(runs)} | {seeds} | {100 * statistics.median(dev):.1f} "
                f"| {flops:.3g} | {steps:.0f} | {wall:.0f} |"
            )
        lines += ["", *significance(by_arm, metric), ""]
    return "\n".join(lines).rstrip() + "\n"


def significance(by_arm: dict[str, list[dict]], metric: str) -> list[str]:
    """Rows of each TARTAN arm's Mann-Whitney test against each TAPT arm that ran (test metric, two-sided)."""
    references = [r for r in REFERENCES if r in by_arm]
    tartan = [a for a in by_arm if a.startswith(("mt_", "meta_"))]
    if not references or not tartan:
        return []
    lines = [
        "| TARTAN arm | " + " | ".join(f"vs {label(r)}: Δ median, U, p" for r in references) + " |",
        "|---|" + "---:|" * len(references),
    ]
    for arm in tartan:
        values = [r["test"][metric] for r in by_arm[arm]]
        cells = []
        for reference in references:
            other = [r["test"][metric] for r in by_arm[reference]]
            delta = 100 * (statistics.median(values) - statistics.median(other))
            test = mann_whitney(values, other)
            cells.append(
                f"{delta:+.1f}, " + (f"U={test[0]:.1f}, p={test[1]:.3f}" if test else "no test (n<2)")
            )
        lines.append(f"| {label(arm)} | " + " | ".join(cells) + " |")
    return lines


def plot(results: Results, work: Path, output: Path, title: str) -> None:
    """The test metric of every arm (median bar, seeds as dots, the majority class dashed), one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        1, len(results), figsize=(6 * len(results), 0.4 * max(map(len, results.values())) + 2), squeeze=False
    )
    for axis, (task, by_arm) in zip(axes[0], results.items()):
        metric, baseline = task_metric(work, task), majority(work, task)
        for position, (arm, runs) in enumerate(by_arm.items()):
            values = [100 * r["test"][metric] for r in runs]
            colour = "tab:blue" if arm.startswith(("mt_", "meta_")) else "tab:gray"
            axis.barh(position, statistics.median(values), color=colour)
            axis.plot(values, [position] * len(values), "k.", markersize=4)
        axis.axvline(100 * baseline, color="tab:red", linestyle="--", linewidth=1, label="majority class")
        axis.legend(fontsize=8, loc="lower right")
        axis.set_yticks(range(len(by_arm)), [label(a) for a in by_arm], fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel(f"test {metric} (%), median bar, seeds as dots")
        axis.set_title(task)
        axis.grid(axis="x", alpha=0.3)
        low = min(100 * r["test"][metric] for runs in by_arm.values() for r in runs)
        axis.set_xlim(max(0, min(low, 100 * baseline) - 10), None)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(output, dpi=120)
    plt.close(figure)


def weight_curves(work: Path, output: Path) -> Path | None:
    """META-TARTAN's weights over the steps (the paper's Figures 3-4), one panel per task and meta arm, every
    seed's curve drawn; None where no META-TARTAN arm has finished."""
    runs = sorted(work.glob("*/meta_*/seed*/task/stage1/task_weights.csv"))
    panels: dict[tuple[str, str], list[Path]] = {}
    for path in runs:
        seed_dir = path.parents[2]
        panels.setdefault((seed_dir.parent.parent.name, seed_dir.parent.name), []).append(path)
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.4), squeeze=False)
    for axis, ((task, arm), paths) in zip(axes[0], sorted(panels.items())):
        for seed, path in enumerate(paths):
            with open(path, newline="") as handle:
                rows = list(csv.DictReader(handle))
            terms = [k for k in rows[0] if k != "step"] if rows else []
            for index, term in enumerate(terms):
                axis.plot(
                    [int(r["step"]) for r in rows],
                    [float(r[term]) for r in rows],
                    color=f"C{index}",
                    linewidth=0.8,
                    label=term if seed == 0 else None,
                )
        axis.set_title(f"{task}: {label(arm)}", fontsize=8)
        axis.set_xlabel("step")
        axis.set_ylabel("weight")
        axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(output, dpi=120)
    plt.close(figure)
    return output
