"""Experiment (not a test): ELECTRA against the MLM baseline at equal pretraining FLOPs, the paper's central claim.

Both objectives are pretrained by `electra compare`'s machinery (one shared vocabulary, the same cached examples,
the same batch, each schedule spanning its own budget, each run stopping at the first step whose training FLOPs,
counted the paper's way by `electra.objectives.flop_report`, reach `--flops-budget`), on the library's default
corpus unless `--corpus` names another. On one GPU the runs train in bf16 and compiled with CUDA graphs (the
library's default there); on a CPU in fp32, eagerly.

Then, in this order and while `--time-limit` leaves room (a cell starts only when the longest cell of its kind so far
still fits): the linear probes (SST-2 sentiment, Brown part-of-speech) on the final checkpoints and a randomly
initialised encoder, then on the earlier budget fractions; then GLUE on the task files found under `--glue-data`.
A data folder that is not given or not there skips its part with one line; a malformed file is refused in one line
before any pretraining, as `electra compare` refuses it.

Written into OUT (and rewritten after every evaluation cell, so a run stopped from outside keeps what it finished):

- `electra_vs_mlm.md` and `electra_vs_mlm.json`: one table, a row per objective at the full budget (train FLOPs,
  steps, FLOPs per step, training wall time, probe accuracies, GLUE scores and average) and the random encoder's
  row; the JSON adds the run's settings, host, commit and what was skipped;
- `electra_vs_mlm.png`: both runs' training curves against training FLOPs (masked-token loss and accuracy of MLM
  and of ELECTRA's generator, ELECTRA's discriminator against its always-"original" baseline) and the evaluation
  scores at each budget fraction;
- `electra compare`'s own files (`results.md`, `results.json`, `curve.png`, the exports under `checkpoints/`).

A rerun with the same arguments resumes: finished pretraining fractions and evaluation cells are reused.

    # the CPU rehearsal (minutes on 2 cores)
    OMP_NUM_THREADS=1 python bench/electra_vs_mlm.py --size tiny --flops-budget 1e13 --checkpoints 2 \\
        --sst2 DATA/glue/SST-2 --pos DATA/corpus/brown --glue-data DATA/glue --time-limit 15 --out runs/evm-tiny
    # ELECTRA-Small on one GPU
    python bench/electra_vs_mlm.py --size small --flops-budget 3e15 --checkpoints 1 --sst2 DATA/glue/SST-2 \\
        --pos DATA/corpus/brown --glue-data DATA/glue --probe-max-train 1000 --time-limit 9 --out runs/evm-small
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from electra.app.compare.run import (
    CompareSettings,
    check_inputs,
    collect_results,
    finetune_cell,
    glue_settings,
    objective_config,
    pretrain_objective,
    probe_cell,
    run_compare,
    write_report,
)
from electra.core.config_files import parse_overrides
from electra.core.errors import UserError
from electra.core.files import save_figure_atomically, write_json_atomically, write_text_atomically
from electra.core.output_lock import output_lock
from electra.data.embedded_corpus import ensure_embedded_corpus
from electra.glue.inputs import check_files
from electra.glue.tasks import parse_task_list
from electra.objectives import build_config
from electra.training.run_log import read_metrics

REPO = Path(__file__).resolve().parents[1]
ARMS = ["electra", "mlm"]
# A budget per size that fits its machine: minutes of `tiny` on 2 CPU cores; for Small, what one GPU command of at
# most 10 minutes affords with compilation and probes (about 2,300 ELECTRA steps of batch 128 x 128;
# docs/results/central-claim.md holds the arithmetic).
DEFAULT_BUDGETS = {"tiny": 1e13, "small": 3e15}
DEFAULT_GLUE_TASKS = "sst2,mrpc,stsb,rte"
NAME = "electra_vs_mlm"
CURVE_POINTS = 60  # training-log rows per run: enough for a curve, few enough for a small metrics.csv
SMOOTHING = 5  # log rows per running mean in the figure
COLOURS = {"electra": "tab:blue", "mlm": "tab:orange"}
MARKERS = {"sst2": "o", "pos": "s", "GLUE avg": "D"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="ELECTRA against MLM at equal pretraining FLOPs: pretrain both, probe, fine-tune, report.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="output folder (rerun with the same one to resume)")
    parser.add_argument("--size", default="tiny", help="model size preset (tiny on a CPU, small on a GPU)")
    parser.add_argument(
        "--flops-budget",
        type=float,
        default=None,
        help=f"training FLOPs per objective (default: {DEFAULT_BUDGETS} by size)",
    )
    parser.add_argument(
        "--corpus", default=None, help="pretraining text (default: the library's embedded corpus)"
    )
    parser.add_argument("--vocab", default=None, help="a vocab.txt or tokenizer folder both runs use")
    parser.add_argument("--checkpoints", type=int, default=2, help="evenly spaced budget fractions evaluated")
    parser.add_argument("--sst2", default=None, help="SST-2 folder (train.tsv, dev.tsv) for the sst2 probe")
    parser.add_argument("--pos", default=None, help="Brown corpus folder (ca01, ...) for the pos probe")
    parser.add_argument("--glue-data", default=None, help="GLUE folder (RTE/, MRPC/, ...)")
    parser.add_argument("--glue-tasks", default=DEFAULT_GLUE_TASKS, help="GLUE tasks run when time remains")
    parser.add_argument("--seeds", type=int, default=3, help="probe and fine-tuning seeds (median reported)")
    parser.add_argument("--probe-max-train", type=int, default=None, help="training sentences per probe seed")
    parser.add_argument("--glue-max-train-examples", type=int, default=1000, help="training rows per task")
    parser.add_argument("--glue-epochs", type=float, default=3.0, help="fine-tuning epochs")
    parser.add_argument(
        "--glue-max-steps", type=int, default=None, help="fine-tuning updates (overrides epochs)"
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="minutes for the whole script; evaluation cells start only while they fit (default: no limit)",
    )
    parser.add_argument(
        "--mixed-precision",
        default="auto",
        choices=("auto", "no", "fp16", "bf16"),
        help="auto: bf16 on a GPU, fp32 on a CPU",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a pretraining config field"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Run (or resume) the study and return the table's JSON record."""
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    deadline = started + 60 * args.time_limit if args.time_limit else math.inf
    out = Path(args.out)
    settings = study_settings(args, out)
    # every refusal (a bad row, an unknown field, a budget under a step) comes before any work
    check_inputs(settings)
    print(
        f"{NAME}: {', '.join(ARMS)} at {settings.size}, {settings.budget:.3g} training FLOPs each, corpus "
        f"{settings.corpus}, precision {settings.overrides['mixed_precision']}"
    )
    seconds: dict[str, float] = {}
    # pretrains (or resumes) both arms and exports each budget fraction; the evaluation is ours, against the clock
    run_compare(replace(settings, tasks=[], probes=[]))
    seconds["pretraining"] = time.monotonic() - started
    record = evaluate(settings, args, deadline, seconds, started)
    print((out / f"{NAME}.md").read_text())
    return record


def study_settings(args: argparse.Namespace, out: Path) -> CompareSettings:
    """The comparison's settings from the flags: the default corpus, the probes and GLUE tasks whose data is there
    (each missing part said in one line), the precision for this machine and a log row every ~1/60 of a run."""
    if args.size not in DEFAULT_BUDGETS and args.flops_budget is None:
        raise UserError(
            f"--size {args.size}: give --flops-budget (defaults exist for {', '.join(DEFAULT_BUDGETS)})."
        )
    budget = args.flops_budget if args.flops_budget is not None else DEFAULT_BUDGETS[args.size]
    if not (math.isfinite(budget) and budget > 0):
        raise UserError(f"--flops-budget must be a positive, finite number, got {budget:g}.")
    if args.time_limit is not None and not args.time_limit > 0:
        raise UserError(f"--time-limit must be a positive number of minutes, got {args.time_limit:g}.")
    overrides = parse_overrides(args.set)
    overrides.setdefault("mixed_precision", _precision(args.mixed_precision))
    probes, probe_root = _probe_data(args, out)
    tasks, glue_data = _glue_tasks(args)
    settings = CompareSettings(
        corpus=args.corpus or str(ensure_embedded_corpus()),
        out=out,
        objectives=list(ARMS),
        tasks=tasks,
        glue_data=glue_data,
        size=args.size,
        budget=budget,
        checkpoints=args.checkpoints,
        seeds=[1 + i for i in range(args.seeds)],
        overrides=overrides,
        vocab=args.vocab,
        probes=probes,
        probe_data=probe_root,
        probe_max_train=args.probe_max_train,
        glue_max_train_examples=args.glue_max_train_examples or None,
        glue_epochs=args.glue_epochs or None,
        glue_max_steps=args.glue_max_steps,
        # The report's evaluation settings follow the data found this time (a folder given or not): this script's
        # rerun replaces compare's report rather than being refused for it. Pretraining settings still must agree.
        overwrite=True,
    )
    if "log_every" not in overrides:
        # the steps counted as `electra compare --plan` counts them before a vocabulary exists (its largest size)
        vocab = build_config(settings.size, None, dict(overrides)).tokenizer_vocab_size
        try:
            steps = objective_config(replace(settings, tasks=[], probes=[]), "mlm", vocab).max_steps
        except UserError:  # a budget under a step per checkpoint: refused by the run itself, naming the arm
            steps = 1
        settings.overrides["log_every"] = max(1, steps // CURVE_POINTS)
    return settings


def _precision(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "bf16" if torch.cuda.is_available() else "no"


def _probe_data(args: argparse.Namespace, out: Path) -> tuple[list[str], Path | None]:
    """The probes whose data was given, and the folder laid out as the probes read it (OUT/probe-data/glue/SST-2
    and OUT/probe-data/corpus/brown, links to the folders given)."""
    root = out / "probe-data"
    wanted = {
        "sst2": (args.sst2, root / "glue" / "SST-2", ("train.tsv", "dev.tsv"), "--sst2"),
        "pos": (args.pos, root / "corpus" / "brown", (), "--pos"),
    }
    probes = []
    for probe, (given, link, files, flag) in wanted.items():
        if link.is_symlink():
            link.unlink()
        folder = Path(given) if given else None
        if folder is None or not folder.is_dir() or not all((folder / f).is_file() for f in files):
            what = "not given" if folder is None else f"{folder} is not a folder"
            what += f" holding {' and '.join(files)}" if folder is not None and files else ""
            print(f"{NAME}: skipping the {probe} probe: {flag} {what}")
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(folder.resolve(), target_is_directory=True)
        probes.append(probe)
    return probes, (root if probes else None)


def _glue_tasks(args: argparse.Namespace) -> tuple[list[str], Path | None]:
    """The GLUE tasks whose files are under --glue-data; each task without them is skipped with one line."""
    requested = args.glue_tasks.strip().lower()
    if requested in ("", "none"):
        return [], None
    if not args.glue_data or not Path(args.glue_data).is_dir():
        what = "not given" if not args.glue_data else f"{args.glue_data} is not a folder"
        print(f"{NAME}: skipping GLUE: --glue-data {what}")
        return [], None
    glue_data = Path(args.glue_data)
    tasks = []
    for spec in parse_task_list(args.glue_tasks):
        try:
            check_files([spec], glue_data, predict_test=False)
        except UserError as exc:
            print(f"{NAME}: skipping GLUE task {spec.name}: {exc}")
            continue
        tasks.append(spec.name)
    return tasks, (glue_data if tasks else None)


def evaluate(
    settings: CompareSettings, args: argparse.Namespace, deadline: float, seconds: dict, started: float
) -> dict:
    """The probe cells, then the GLUE cells, each started only while it fits before the deadline, the full
    budget's checkpoints first. A cell's estimate is the longest cell of the same probe or task so far, else of
    any probe or any task (GLUE cells of 1,000 examples take about as long), else nothing: the first cell starts
    while any time is left. The report is rewritten after every cell."""
    with output_lock(settings.out):
        cells = {
            arm.label: pretrain_objective(settings, arm, settings.out / "tokenizer") for arm in settings.arms
        }
        finetune = glue_settings(settings, build_config(settings.size, None, dict(settings.overrides)))
        order = list(reversed(range(settings.checkpoints)))  # the full budget first
        # the two arms' final checkpoints first, then the random encoder they are read against, then the rest
        jobs: list[tuple[str, str, dict | None]] = [
            ("probe", p, cells[a][i]) for i in order[:1] for p in settings.probes for a in cells
        ]
        jobs += [("probe", probe, None) for probe in settings.probes]
        jobs += [("probe", p, cells[a][i]) for i in order[1:] for p in settings.probes for a in cells]
        jobs += [("glue", t, cells[a][i]) for i in order for t in settings.tasks for a in cells]
        longest: dict[tuple[str, str], float] = {}
        skipped: list[str] = []
        record, results = write_study(settings, args, cells, finetune, seconds, skipped, started)
        for kind, name, cell in jobs:
            which = (
                "random encoder"
                if cell is None
                else f"{cell['objective']} {cell['index']}of{settings.checkpoints}"
            )
            now = time.monotonic()
            same_kind = max((t for (k, _), t in longest.items() if k == kind), default=0.0)
            if (
                not _on_disk(results, kind, name, cell)
                and now + longest.get((kind, name), same_kind) > deadline
            ):
                left = max(0.0, deadline - now) / 60
                skipped.append(f"{kind} {name} on {which}")
                print(f"{NAME}: no time left for {kind} {name} on {which} ({left:.1f} min left)")
                continue
            if kind == "probe":
                probe_cell(settings, cell, name)
            else:
                finetune_cell(settings, cell, name, finetune)
            took = time.monotonic() - now
            longest[(kind, name)] = max(longest.get((kind, name), 0.0), took)
            part = "probes" if kind == "probe" else "glue"
            seconds[part] = seconds.get(part, 0.0) + took
            record, results = write_study(settings, args, cells, finetune, seconds, skipped, started)
        # once more at the end: the cells skipped and the total time
        return write_study(settings, args, cells, finetune, seconds, skipped, started)[0]


def _on_disk(results: dict, kind: str, name: str, cell: dict | None) -> bool:
    """Whether the cell is on disk, made with the current settings and data, as compare's report found it (a
    rerun reuses such a cell at no cost, so the time limit does not hold it back)."""
    if kind == "probe" and cell is None:
        return name in results["random_encoder"]
    row = results["objectives"][cell["objective"]]["cells"][cell["index"] - 1]
    if kind == "probe":
        return name in row["probes"]
    return any(key == name or key.startswith(f"{name}-") for key in row["scores"])  # mnli: mnli-m, mnli-mm


def write_study(
    settings: CompareSettings,
    args: argparse.Namespace,
    cells: dict[str, list[dict]],
    finetune: Any,
    seconds: dict,
    skipped: list[str],
    started: float,
) -> tuple[dict, dict]:
    """compare's report, then this study's table (markdown and JSON) and figure, from the cells on disk; returns
    the table's record and compare's results."""
    results = collect_results(settings, cells, finetune)
    write_report(results, settings.out)
    record = study_record(settings, args, results, dict(seconds, total=time.monotonic() - started), skipped)
    write_json_atomically(settings.out / f"{NAME}.json", record, allow_nan=False)
    write_text_atomically(settings.out / f"{NAME}.md", table_markdown(record))
    plot_study(record, settings.out, settings.out / f"{NAME}.png")
    return record, results


def study_record(
    settings: CompareSettings, args: argparse.Namespace, results: dict, seconds: dict, skipped: list[str]
) -> dict:
    """The table as data: one row per objective at the full budget, the random encoder's probe row, every
    fraction's scores (for the figure), and where, when and how it was measured."""
    rows = []
    for label, entry in results["objectives"].items():
        final = entry["cells"][-1]
        rows.append(
            {
                "objective": label,
                "train_flops": final["train_flops"],
                "steps": final["step"],
                "flops_per_step": entry["train_flops_per_step"],
                "train_seconds": _train_seconds(settings.out / "pretrain" / label),
                "probes": {p: (final["probes"].get(p) or {}).get("median") for p in settings.probes},
                "glue": dict(final["scores"]),
                "glue_average": final["average"],
                "fractions": [
                    {
                        "train_flops": c["train_flops"],
                        "step": c["step"],
                        "probes": {p: v["median"] for p, v in c["probes"].items()},
                        "glue_average": c["average"],
                    }
                    for c in entry["cells"]
                ],
            }
        )
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": _host(),
        "commit": _commit(),
        "command": "python bench/electra_vs_mlm.py " + " ".join(args.argv),
        "size": settings.size,
        "budget": settings.budget,
        "corpus": settings.corpus,
        "mixed_precision": settings.overrides.get("mixed_precision"),
        "seeds": settings.seeds,
        "probes": list(settings.probes),
        "tasks": list(settings.tasks),
        "rows": rows,
        "random_encoder": {p: v["median"] for p, v in (results.get("random_encoder") or {}).items()},
        "skipped": list(skipped),
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }


def _train_seconds(run_dir: Path) -> float | None:
    """Training seconds of the arm's run (every resumed segment): its newest checkpoint's elapsed time."""
    states = []
    for path in run_dir.glob("checkpoints/step-*/trainer_state.json"):
        state = json.loads(path.read_text())
        states.append((state.get("step", 0), state.get("elapsed_seconds")))
    return max(states)[1] if states else None


def _host() -> str:
    """The accelerator's name, else the CPU's model name as lscpu gives it, and the torch release."""
    import torch

    if torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
    else:
        device = platform.processor() or platform.machine()
        try:
            lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
            names = [
                line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")
            ]
            threads = torch.get_num_threads()
            device = f"{names[0] if names else device}, {threads} thread{'s' if threads != 1 else ''}"
        except OSError:
            pass
    return f"{device}, torch {torch.__version__}"


def _commit() -> str | None:
    try:
        found = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return found.stdout.strip() or None


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def table_markdown(record: dict) -> str:
    """One table: objective, train FLOPs, steps, FLOPs per step, training wall time, probe accuracies (x100), GLUE
    medians and average (x100); then the random encoder's probes, and one line saying how it was measured."""
    tasks = list(dict.fromkeys(t for row in record["rows"] for t in row["glue"])) or list(record["tasks"])
    glue_columns = [*tasks, "GLUE avg"] if record["tasks"] else []
    header = ["objective", "train FLOPs", "steps", "FLOPs/step", "train wall (min)"]
    header += [f"probe {p}" for p in record["probes"]] + glue_columns
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for row in record["rows"]:
        wall = "–" if row["train_seconds"] is None else f"{row['train_seconds'] / 60:.1f}"
        cells = [
            row["objective"],
            f"{row['train_flops']:.3g}",
            str(row["steps"]),
            f"{row['flops_per_step']:.3g}",
        ]
        cells += [wall] + [_pct(row["probes"].get(p)) for p in record["probes"]]
        if glue_columns:
            cells += [_pct(row["glue"].get(t)) for t in tasks] + [_pct(row["glue_average"])]
        lines.append("| " + " | ".join(cells) + " |")
    if record["probes"]:
        cells = ["random encoder", "0", "0", "–", "–"] + [
            _pct(record["random_encoder"].get(p)) for p in record["probes"]
        ]
        lines.append("| " + " | ".join(cells + ["–"] * len(glue_columns)) + " |")
    note = (
        f"Budget {record['budget']:.3g} training FLOPs per objective (the paper's count, generator included), size "
        f"{record['size']}, precision {record['mixed_precision']}, {record['host']}, commit {record['commit']}, "
        f"{record['date']}. Probes and GLUE: dev accuracy or the task's metric x100, median over seeds "
        f"{record['seeds']}."
    )
    if record["skipped"]:
        note += f" Not run for lack of time: {'; '.join(record['skipped'])}."
    return "\n".join(lines) + "\n\n" + note + "\n"


def _curve(run_dir: Path, per_step: float) -> dict[str, list[float]]:
    """The run's training-log columns (train/... of metrics.csv) with x = training FLOPs at each logged step."""
    rows = read_metrics(run_dir, "train") if (run_dir / "metrics.csv").is_file() else []
    keys = list(dict.fromkeys(key for row in rows for key in row))
    columns = {key: [row.get(key, math.nan) for row in rows] for key in keys}
    columns["flops"] = [step * per_step for step in columns.get("step", [])]
    return columns


def _smooth(values: list[float], width: int = SMOOTHING) -> list[float]:
    """A centred running mean over `width` log rows (fewer at the ends), so that a window's noise does not hide
    the trend; NaN cells are left out of each mean."""
    half = width // 2
    smoothed = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - half) : i + half + 1] if not math.isnan(v)]
        smoothed.append(sum(window) / len(window) if window else math.nan)
    return smoothed


def plot_study(record: dict, out: Path, path: Path) -> Path:
    """Four panels against training FLOPs: masked-token loss and accuracy (MLM beside ELECTRA's generator),
    ELECTRA's discriminator (AUC against chance, final accuracy against its always-"original" baseline), and the
    evaluation scores per budget fraction, each probe's line starting at the random encoder (0 FLOPs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {
        row["objective"]: _curve(out / "pretrain" / row["objective"], row["flops_per_step"])
        for row in record["rows"]
    }
    figure, axes = plt.subplots(2, 2, figsize=(12.0, 8.4))
    (loss, accuracy), (discriminator, scores) = axes
    for label, metric, name in (
        ("mlm", "mlm_loss", "MLM"),
        ("electra", "generator_loss", "ELECTRA's (smaller) generator"),
    ):
        _line(loss, runs.get(label, {}), metric, name, COLOURS.get(label))
    loss.set_title("masked-token loss")
    loss.set_ylabel("cross-entropy (nats)")
    for label, metric, name in (
        ("mlm", "mlm_accuracy", "MLM"),
        ("electra", "generator_accuracy", "ELECTRA's (smaller) generator"),
    ):
        _line(accuracy, runs.get(label, {}), metric, name, COLOURS.get(label))
    accuracy.set_title("masked-token accuracy")
    accuracy.set_ylabel("fraction of masked tokens predicted")
    _draw_discriminator(discriminator, runs.get("electra", {}))
    _draw_scores(scores, record)
    for axis in (loss, accuracy, discriminator, scores):
        axis.set_xlabel("training FLOPs")
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8, loc="best")
    figure.suptitle(
        f"ELECTRA vs MLM at {record['size']}, {record['budget']:.2g} training FLOPs each; training curves are "
        f"running means over {SMOOTHING} log rows ({record['host']}, {record['date']})",
        fontsize=10,
    )
    figure.tight_layout()
    try:
        save_figure_atomically(figure, path, dpi=110)
    finally:
        plt.close(figure)
    return path


def _line(axis: Any, columns: dict, metric: str, label: str, colour: str | None, style: str = "-") -> None:
    values = columns.get(metric)
    if values and any(not math.isnan(v) for v in values):
        axis.plot(columns["flops"], _smooth(values), style, color=colour, label=label, linewidth=1.5)


def _draw_discriminator(axis: Any, electra: dict) -> None:
    """The discriminator's AUC against chance (0.5), and in a note its final accuracy against the accuracy of
    always answering "original" (1 - the replaced fraction): the two sit within a point of each other for most of a
    short run, so drawn on the AUC's axis they would hide each other."""
    _line(axis, electra, "discriminator_auc", "AUC of replaced-token detection", COLOURS["electra"])
    if electra.get("flops"):
        axis.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="chance (AUC 0.5)")
    accuracy, replaced = electra.get("discriminator_accuracy"), electra.get("replaced_fraction")
    if accuracy and replaced:
        tail = slice(-SMOOTHING, None)
        final = sum(accuracy[tail]) / len(accuracy[tail])
        baseline = 1 - sum(replaced[tail]) / len(replaced[tail])
        axis.text(
            0.98,
            0.04,
            f'final accuracy {final:.3f}\nalways "original": {baseline:.3f}',
            transform=axis.transAxes,
            ha="right",
            va="bottom",
            fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "0.8"},
        )
    axis.set_title("ELECTRA's discriminator")
    axis.set_ylabel("AUC")


def _draw_scores(axis: Any, record: dict) -> None:
    """Each probe (and the GLUE average) per budget fraction, colour by objective, marker by score; a probe's line
    starts at the random encoder (0 FLOPs). The objectives are drawn 1.5% of the budget apart so that equal scores
    do not hide each other."""
    names = [*record["probes"], *(["GLUE avg"] if record["tasks"] else [])]
    drawn = False
    for index, row in enumerate(record["rows"]):
        shift = record["budget"] * 0.015 * (index - (len(record["rows"]) - 1) / 2)
        for name in names:
            points = [
                (f["train_flops"], f["glue_average"] if name == "GLUE avg" else f["probes"].get(name))
                for f in row["fractions"]
            ]
            if name in record["random_encoder"]:
                points.insert(0, (0.0, record["random_encoder"][name]))
            points = [(x + shift, 100 * y) for x, y in points if y is not None]
            if points:
                xs, ys = zip(*points)
                axis.plot(
                    xs,
                    ys,
                    marker=MARKERS.get(name, "^"),
                    color=COLOURS.get(row["objective"]),
                    label=f"{row['objective']}: {name}",
                )
                drawn = True
    axis.set_title(
        "evaluation (0 FLOPs: the random encoder)" if drawn else "evaluation: nothing evaluated yet"
    )
    axis.set_ylabel("dev score x100 (median over seeds)")


if __name__ == "__main__":
    try:
        main()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
