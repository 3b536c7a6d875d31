"""`electra glue`: fine-tune a checkpoint on GLUE tasks and print the paper's table."""

from __future__ import annotations

import argparse
from pathlib import Path

from electra.core.errors import UserError
from electra.core.flags import (
    DefaultsHelpFormatter,
    add_output_option,
    add_setting_flags,
    flag_values,
    require_counts,
)
from electra.core.overwrite import refuse_to_replace, refuse_unowned, start_over
from electra.core.settings import declaration, spelled
from electra.glue.settings import FinetuneSettings, GlueInputs, MultitaskSettings

DESCRIPTION = """Fine-tune any local ELECTRA or BERT checkpoint on GLUE as the ELECTRA paper does (AdamW eps 1e-6,
10% warmup then linear decay, batch 32, learning rate and layer-wise decay by model size, 10 epochs for RTE and
STS-B and 3 otherwise) and report each task's dev metric (median over seeds) and the paper's average."""

GLUE_OUTPUTS = (
    "results.json",
    "results.md",
    "runs",
    "checkpoints",
    "glue_test",
    "teachers",
)  # what a run writes in --output


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "glue",
        help="fine-tune and evaluate a checkpoint on GLUE",
        description=DESCRIPTION,
        formatter_class=DefaultsHelpFormatter,
    )
    add_setting_flags(parser, GlueInputs, declared_defaults=True, skip=("output_dir",))
    add_output_option(parser, "output", declaration(GlueInputs, "output_dir").metadata["help"], default=None)
    parser.add_argument("--seed", type=int, default=1, help="first seed; runs use seed, seed+1, ...")
    add_setting_flags(parser, FinetuneSettings, declared_defaults=True)
    parser.add_argument(
        "--save-train-logits",
        action="store_true",
        help="write the best seed's outputs on its training set to OUTPUT/teachers/TASK.json (teachers for --multitask)",
    )
    parser.add_argument(
        "--multitask",
        action="store_true",
        help="train one model on all --task tasks at once (BAM: 6 epochs, twice the size's rate, layer decay 0.9 "
        "unless --epochs/--learning-rate/--layer-decay say otherwise)",
    )
    parser.add_argument(
        "--teachers",
        nargs="+",
        default=None,
        metavar="DIR",
        help="with --multitask: distil from these --save-train-logits outputs, with teacher annealing",
    )
    add_setting_flags(parser, MultitaskSettings, declared_defaults=True)
    parser.set_defaults(func=run, several_processes=True)
    compare = subparsers.add_parser(
        "glue-compare",
        help="test whether GLUE arms differ (Mann-Whitney U and bootstrap over seeds)",
        description="Compare `electra glue` outputs seed by seed: each arm's per-task medians and per-seed values, "
        "and every arm against the first (Mann-Whitney U, bootstrap of the median difference, Holm-Bonferroni over "
        "tasks), as the BAM chapter tests its tables. Writes comparison.json, comparison.md and comparison.png.",
        formatter_class=DefaultsHelpFormatter,
    )
    compare.add_argument(
        "arms", nargs="+", metavar="DIR", help="`electra glue --output` folders; the first is the reference"
    )
    compare.add_argument("--names", default=None, help="comma list of arm names (default: the folder names)")
    add_output_option(compare, "output", "write comparison.json/.md/.png here", default=None)
    compare.set_defaults(func=run_compare)


def refuse_foreign_run(output: Path) -> None:
    """An --output that holds another command's run (`--output runs/small` beside the pretraining run it
    fine-tunes) is refused, with or without --overwrite or --resume: GLUE wrote its own run.json over the
    pretraining run's record, `--overwrite` deleted that run's `checkpoints/` (a name both write), and `--resume`
    wrote GLUE's checkpoints into it."""
    from electra.glue.inputs import is_glue_record

    if is_glue_record(output / "run.json") is False:
        raise UserError(
            f"{output} holds another command's run ({output / 'run.json'} is not one `electra glue` wrote); a "
            "GLUE run there would replace or delete that run's files: choose another --output."
        )


def prepare_output(
    output: str | Path | None,
    model: str | Path,
    init_from: str | Path | None,
    specs: list,
    data_dir: str | Path | None,
    predict_test: bool,
    overwrite: bool,
    resume: bool,
) -> Path:
    """What `electra glue` and `electra.finetune_glue` check before any work, in this order: another command's
    run in `output` (always refused), an earlier run's results there (refused unless `overwrite` or `resume`), the
    model, the data files; then, the inputs being sound, `overwrite` deletes the earlier run's files (never a
    user's). Returns the GLUE data folder."""
    from electra.data.tokenization import require_tokenizer
    from electra.export.layout import finetune_dir, require_safetensors
    from electra.finetune.models import resolve_model_dir
    from electra.glue.inputs import check_files, check_init_from
    from electra.glue.tasks import resolve_data_dir

    if output:
        refuse_foreign_run(Path(output))
        # a user's own files under names a run writes (no run.json beside them): a --resume had written the run
        # over them, and without it the refusal below suggested an --overwrite that then refused them
        refuse_unowned(output, GLUE_OUTPUTS)
    produced = [Path(output) / name for name in GLUE_OUTPUTS] if output and not resume else []
    refuse_to_replace(produced, overwrite, resume_hint=True)
    data = resolve_data_dir(data_dir)
    model_dir = resolve_model_dir(model)
    if init_from:
        check_init_from(model_dir, resolve_model_dir(init_from, spelled(GlueInputs, "init_from")))
    check_files(specs, data, predict_test)
    for directory in (model, init_from):  # pickled weights: refused before run.json is written
        if directory:
            require_safetensors(finetune_dir(directory))
    require_tokenizer(finetune_dir(model))  # where it has none, AutoTokenizer makes an empty one
    if produced:  # the inputs are sound: only now does --overwrite delete the earlier run
        start_over(output, GLUE_OUTPUTS, overwrite, reads=(model, init_from, data))
    return data


def run(args: argparse.Namespace) -> int:
    from electra.glue.finetune import run_glue
    from electra.glue.inputs import check_run_inputs
    from electra.glue.tasks import parse_task_list

    require_counts(args, ("seeds",))
    # checked here, before --overwrite deletes anything
    settings = FinetuneSettings(**flag_values(FinetuneSettings, args), progress=not args.no_progress)
    multi = MultitaskSettings(**flag_values(MultitaskSettings, args))
    wants_output = args.predict_test or args.save_best or args.resume or settings.save_every
    if (wants_output or args.save_train_logits) and not args.output:
        raise UserError(
            "--predict-test, --save-best, --save-every, --save-train-logits and --resume need --output DIR."
        )
    check_multitask_flags(args, multi)
    specs = parse_task_list(args.tasks)
    if args.multitask and len(specs) < 2:
        raise UserError("--multitask needs at least two tasks in --task (e.g. cola,sst2,mrpc,stsb,rte).")
    seeds = [args.seed + i for i in range(args.seeds)]
    check_run_inputs(specs, settings, seeds)
    data_dir = prepare_output(
        args.output,
        args.model,
        args.init_from,
        specs,
        args.data_dir,
        args.predict_test,
        args.overwrite,
        args.resume,
    )
    if args.multitask:
        from electra.glue.multitask import run_multitask

        run_multitask(
            args.model,
            specs,
            data_dir,
            settings,
            multi,
            seeds,
            output_dir=Path(args.output) if args.output else None,
            teachers=args.teachers,
            init_from=args.init_from,
            predict_test=args.predict_test,
            save_best=args.save_best,
            resume=args.resume,
        )
        return 0
    run_glue(
        args.model,
        specs,
        data_dir,
        settings,
        seeds=seeds,
        output_dir=Path(args.output) if args.output else None,
        init_from=args.init_from,
        predict_test=args.predict_test,
        save_best=args.save_best,
        resume=args.resume,
        save_train_logits=args.save_train_logits,
    )
    return 0


def check_multitask_flags(args: argparse.Namespace, multi: MultitaskSettings) -> None:
    """The multi-task flags that only mean something together, refused in one line before any work."""
    given = [
        flag
        for flag, value, default in (
            ("--teachers", args.teachers, None),
            ("--task-exponent", multi.task_exponent, 0.75),
            ("--no-task-sampling", multi.task_sampling, True),
            ("--fixed-lambda", multi.fixed_lambda, None),
            ("--multitask-batch-size", multi.multitask_batch_size, 128),
        )
        if value != default
    ]
    if given and not args.multitask:
        raise UserError(f"{given[0]} is a --multitask flag; add --multitask (and two or more --task).")
    if args.multitask and args.save_train_logits:
        raise UserError(
            "--save-train-logits writes single-task teachers; run it without --multitask, then pass that output "
            "to --multitask --teachers."
        )
    if multi.fixed_lambda is not None and not args.teachers:
        raise UserError("--fixed-lambda weighs the gold label against a teacher's; give --teachers DIR too.")


def run_compare(args: argparse.Namespace) -> int:
    from electra.glue.significance import compare_arms, format_comparison, read_arm, write_comparison

    if len(args.arms) < 2:
        raise UserError("give at least two arms to compare.")
    names = [n.strip() for n in args.names.split(",")] if args.names else [Path(a).name for a in args.arms]
    if len(names) != len(args.arms) or len(set(names)) != len(names):
        raise UserError(
            f"--names gives {len(names)} distinct names for {len(args.arms)} arms; give one per arm."
        )
    arms = {name: read_arm(arm) for name, arm in zip(names, args.arms)}
    report = write_comparison(arms, Path(args.output)) if args.output else compare_arms(arms)
    print(format_comparison(report))
    return 0
