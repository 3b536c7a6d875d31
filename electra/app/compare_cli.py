"""`electra compare`: pretrain objectives to equal training FLOPs and compare their GLUE scores.

Only the argument parser and the flags' checks live here; the work (`electra.app.compare.run`) is imported when the
command runs, so `electra --help` stays fast.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from electra.app.compare.settings import (
    COMPARE_CONTROLS,
    DEFAULT_OBJECTIVES,
    DEFAULT_TASKS,
    CompareSettings,
)
from electra.core.errors import UserError
from electra.core.flags import (
    DefaultsHelpFormatter,
    add_output_option,
    add_setting_flags,
    flag_values,
    require_counts,
)


def _list(value: str) -> list[str]:
    items = []
    for part in value.split(","):
        part = part.strip()
        if part and part not in items:
            items.append(part)
    return items


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="pretrain objectives to equal FLOPs and compare their GLUE scores (paper Figure 5.1)",
        description="Pretrain objectives to equal training FLOPs and compare their GLUE scores (paper Figure 5.1).",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--corpus", required=True, help="text file or directory every objective pretrains on")
    add_output_option(parser, "out", "output directory (rerun with the same one to resume)", required=True)
    parser.add_argument(
        "--objectives",
        default=DEFAULT_OBJECTIVES,
        help="comma list of arms: a registered objective (`electra pretrain --help` lists them), optionally with "
        "config fields and a label, [LABEL:]OBJECTIVE[+KEY=VALUE]..., e.g. electra+embedding_sharing=gdes or "
        "fast:electra+generator_from=runs/gen",
    )
    # --size, --flops-budget, --checkpoints, --cache-dir, --vocab, --probe-max-train and the --glue-* numbers
    add_setting_flags(parser, CompareSettings, declared_defaults=True)
    parser.add_argument("--glue-tasks", default=DEFAULT_TASKS, help="comma list of GLUE tasks, or none")
    parser.add_argument(
        "--probes",
        default="",
        help="comma list of linear probes run on every checkpoint and on a random encoder (sst2, pos; "
        "`electra probe --help`)",
    )
    parser.add_argument(
        "--probe-data",
        default=None,
        help="folder holding glue/SST-2/ and corpus/brown/ (default: the GLUE folder's parent, or $ELECTRA_DATA)",
    )
    parser.add_argument(
        "--glue-data", default=None, help="GLUE data folder (CoLA/, SST-2/, ...); default $GLUE_DIR"
    )
    parser.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per task (median reported)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a pretraining config field"
    )
    parser.add_argument("--plan", action="store_true", help="print the steps and runs it would do, and exit")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="evaluate with other GLUE/probe settings than the report in --out was made with, replacing it; or "
        "start over with other pretraining settings where no arm has pretrained yet",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from electra.app.compare.run import describe_plan, run_compare

    settings = _settings(args)
    if args.plan:
        print(describe_plan(settings))
        return 0
    run_compare(settings)
    return 0


def _check_numbers(args: argparse.Namespace) -> None:
    """Counts, the budget and the rate, checked here rather than at the first cell or probe that reads them, which
    comes after every arm has pretrained. CompareSettings' declarations hold these ranges too (and --checkpoints');
    the checks here come first so that the message names the flag."""
    # 0 is no count (--glue-max-steps 0 is not "by epochs": leave it out for that)
    require_counts(args, ("seeds", "glue_batch_size"), optional=("glue_max_steps", "probe_max_train"))
    if not math.isfinite(args.budget) or args.budget <= 0:  # nan, inf: a traceback
        raise UserError("--flops-budget must be a positive, finite number (e.g. 2e13).")
    if args.glue_learning_rate is not None and not (
        math.isfinite(args.glue_learning_rate) and args.glue_learning_rate > 0
    ):  # nan, inf, 0: no rate (leaving the flag out is how to ask for the default)
        raise UserError(
            f"--glue-learning-rate must be a positive, finite number, got {args.glue_learning_rate:g}; leave it "
            "out for the default."
        )


def _objectives(args: argparse.Namespace) -> list[str]:
    """The arms as listed, each once: one listed twice is a typo, not a second arm."""
    objectives = _list(args.objectives)
    if not objectives:
        raise UserError("--objectives is empty; name at least one (e.g. electra,mlm).")
    named = [part.strip() for part in args.objectives.split(",") if part.strip()]
    twice = sorted({name for name in named if named.count(name) > 1})
    if twice:
        raise UserError(
            f"--objectives names {', '.join(twice)} more than once; name each arm once (two arms of one "
            "objective differ by their settings, e.g. electra,gdes:electra+embedding_sharing=gdes)."
        )
    return objectives


def _settings(args: argparse.Namespace) -> CompareSettings:
    """The run's settings from its flags, refusing what the flags alone show to be wrong (what files hold is
    read later, by `checks.check_inputs`)."""
    from electra.core.config_files import parse_overrides
    from electra.glue.tasks import parse_task_list, resolve_data_dir
    from electra.probes.inputs import parse_probe_list

    _check_numbers(args)
    objectives = _objectives(args)
    overrides = parse_overrides(args.set)
    tasks = [] if args.glue_tasks.strip().lower() in ("", "none") else parse_task_list(args.glue_tasks)
    probes = [spec.name for spec in parse_probe_list(args.probes)] if args.probes.strip() else []
    if not tasks and not probes:
        raise UserError("nothing to evaluate: give --glue-tasks or --probes (or both).")
    glue_data = (
        resolve_data_dir(args.glue_data, "--glue-data")
        if tasks or not (args.probe_data or os.environ.get("ELECTRA_DATA"))
        else None
    )
    probe_data = Path(args.probe_data or os.environ.get("ELECTRA_DATA") or glue_data.parent)
    if probes and not probe_data.is_dir():
        raise UserError(
            f"--probe-data {probe_data}: not a folder; give the folder holding glue/ and corpus/."
        )
    if args.vocab is not None and not Path(args.vocab).exists():
        raise UserError(f"--vocab {args.vocab}: not found; give a vocab.txt or a tokenizer directory.")
    if "objective" in overrides:
        raise UserError("--set objective=... is not allowed here; list objectives with --objectives.")
    for key in overrides:
        if key in COMPARE_CONTROLS:
            raise UserError(f"--set {key}=...: compare controls {key} ({COMPARE_CONTROLS[key]}); drop it.")
    declared = flag_values(CompareSettings, args)
    # the flags' 0 ("all" examples, "the paper's" epochs) is None in the settings
    declared["glue_max_train_examples"] = declared["glue_max_train_examples"] or None
    declared["glue_epochs"] = declared["glue_epochs"] or None
    return CompareSettings(
        corpus=args.corpus,
        out=Path(args.out),
        objectives=objectives,
        tasks=[spec.name for spec in tasks],
        glue_data=glue_data,
        seeds=[1 + i for i in range(args.seeds)],
        overrides=overrides,
        probes=probes,
        probe_data=probe_data,
        overwrite=args.overwrite,
        **declared,
    )
