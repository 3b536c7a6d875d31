"""`electra tartan`: end-task aware training (MT-TARTAN, META-TARTAN) from an existing checkpoint.

One body, the end-task head and auxiliary objectives from the registry, trained together on the joint engine task of
`electra.tlm.train` (the same one TLM's stage 1 runs): TAPT is the LM objective on the task's own texts, DAPT the LM objective
on a domain corpus (a `tlm retrieve` output or any corpus). Early stopping on the end task's dev metric keeps the best
state; test is reported for that state.
"""

from __future__ import annotations

import json

from electra.core.flags import add_output_option
from electra.tlm.cli import (
    FINETUNE_DEFAULTS,
    FINETUNE_UNUSED,
    add_task_columns,
    fill_defaults,
    refuse_unused,
    with_default,
)

AUXILIARIES = ("tapt", "dapt")
# META-TARTAN's flags when not given: None until given, as `electra.tlm.cli`'s conditional flags are
META_DEFAULTS = {
    "meta_lr": 0.1,
    "meta_head_steps": 1,
    "meta_head_lr": 0.1,
}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tartan",
        help="end-task aware training: the task and auxiliary LM objectives together, uniform or meta-learned weights",
        description="TARTAN (Dery et al., 2022) with electra, mlm or electric as the auxiliary objective.",
    )
    parser.add_argument(
        "--init-from", required=True, help="checkpoint to start from (a run of this library or HF ELECTRA)"
    )
    parser.add_argument("--task-train", required=True)
    parser.add_argument(
        "--task-dev", required=True, help="dev split: early stopping (and META-TARTAN's g_meta)"
    )
    parser.add_argument("--task-test", required=True)
    parser.add_argument(
        "--aux",
        default="tapt",
        help="auxiliary data, comma-separated: tapt (the task's texts), dapt (--dapt-corpus); 'none' trains the "
        "end task alone",
    )
    parser.add_argument(
        "--dapt-corpus", default=None, help="domain text for dapt: a `tlm retrieve` folder or any corpus"
    )
    parser.add_argument(
        "--aux-objective", default="electra", help="LM objective of the auxiliaries (registry)"
    )
    parser.add_argument("--weighting", choices=["uniform", "meta"], default="uniform")
    parser.add_argument(
        "--losses",
        choices=["balanced", "raw"],
        default="balanced",
        help="balanced: each term divided by its running mean before weighting (ELECTRA's loss is ~20x a task's "
        "cross-entropy); raw: the paper's weights on the losses as they are",
    )
    # None until given, so that one given with --weighting uniform (which has no meta step) is refused; the
    # defaults are in META_DEFAULTS
    parser.add_argument(
        "--meta-lr",
        type=float,
        default=None,
        help=with_default("META-TARTAN's step size η for the weights", META_DEFAULTS, "meta_lr"),
    )
    parser.add_argument(
        "--meta-head-steps",
        type=int,
        default=None,
        help=with_default("SGD steps fitting φ* per training step", META_DEFAULTS, "meta_head_steps"),
    )
    parser.add_argument(
        "--meta-head-lr",
        type=float,
        default=None,
        help=with_default("SGD rate fitting φ*", META_DEFAULTS, "meta_head_lr"),
    )
    add_output_option(parser, "out", "output folder", default="runs/tartan")
    parser.add_argument(
        "--steps", type=int, default=None, help="training steps (default: from --flops-budget)"
    )
    parser.add_argument(
        "--flops-budget", type=float, default=None, help="stop after this many training FLOPs"
    )
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument(
        "--batch-size", type=int, default=32, help="task batch size (auxiliary batches match)"
    )
    parser.add_argument("--eval-every", type=int, default=50, help="dev evaluation every N steps")
    parser.add_argument("--patience", type=int, default=None, help="stop after N evaluations without a gain")
    parser.add_argument("--metric", choices=["macro_f1", "accuracy"], default="macro_f1")
    parser.add_argument(
        "--finetune-epochs",
        type=int,
        default=0,
        help="epochs on the end task alone afterwards (default none)",
    )
    parser.add_argument(  # None until given, so that one given with --finetune-epochs 0 is refused
        "--finetune-lr",
        type=float,
        default=None,
        help=with_default("peak learning rate of those epochs", FINETUNE_DEFAULTS, "finetune_lr"),
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)"
    )
    parser.add_argument("--vocab", default=None, help="must match --init-from's vocabulary when given")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--save-every", type=int, default=0, help="checkpoint every N updates, for --resume")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoints in --out")
    add_task_columns(parser)
    parser.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    parser.set_defaults(func=run, several_processes=True)


def parse_aux(spec: str) -> list[str]:
    from electra.core.errors import UserError

    if spec.strip().lower() == "none":
        return []
    names = [p.strip().lower() for p in spec.split(",") if p.strip()]
    if not names:  # an empty value (a shell variable that was not set) is not a choice of none
        raise UserError(f"--aux {spec!r} names no auxiliary; give tapt, dapt, tapt,dapt, or none.")
    unknown = [n for n in names if n not in AUXILIARIES]
    if unknown:
        raise UserError(f"--aux {unknown[0]!r} is not one of {', '.join(AUXILIARIES)} (or 'none').")
    return names


def check_contradictions(args) -> None:
    """Flags that would be ignored in silence: META-TARTAN's with uniform weights (no meta step reads them),
    `--finetune-lr` with `--finetune-epochs 0` (the default: no fine-tuning), and `--patience` with
    `--eval-every 0` (no evaluation to count). A user who sets them expects them to act. Then the defaults of the
    None-until-given flags not given are filled in (`electra.tlm.cli.fill_defaults`)."""
    from electra.core.errors import UserError

    refuse_unused(
        args,
        META_DEFAULTS,
        args.weighting == "meta",
        "{flag} is for --weighting meta; add --weighting meta or drop {flag}.",
    )
    # a negative --finetune-epochs is refused on its own (`refuse_to_replace_run`), not as "0"
    refuse_unused(args, FINETUNE_DEFAULTS, args.finetune_epochs != 0, FINETUNE_UNUSED)
    if args.patience is not None and not args.eval_every:
        raise UserError(
            "--patience counts dev evaluations, and --eval-every 0 makes none; give --eval-every N or drop "
            "--patience."
        )
    fill_defaults(args, META_DEFAULTS | FINETUNE_DEFAULTS)


def run(args) -> int:
    from electra.core.config import parse_overrides
    from electra.core.errors import UserError
    from electra.tlm.cli import column_kwargs, refuse_to_replace_run, run_settings, start_over_run
    from electra.tlm.settings import TASK_ONLY, TLMSettings
    from electra.tlm.train import train_tlm

    aux = parse_aux(args.aux)
    if "dapt" in aux and args.dapt_corpus is None:
        raise UserError("--aux dapt needs --dapt-corpus (a `electra tlm retrieve` folder or any corpus).")
    if args.dapt_corpus is not None and "dapt" not in aux:
        raise UserError(
            "--dapt-corpus is given but --aux has no dapt; add it (--aux tapt,dapt) or drop the corpus."
        )
    from electra.objectives import objective_names

    if aux and args.aux_objective not in objective_names():
        raise UserError(
            f"--aux-objective {args.aux_objective!r} is not one of {', '.join(objective_names())}."
        )
    if args.weighting == "meta" and not aux:
        raise UserError("--weighting meta needs at least one auxiliary (--aux tapt and/or dapt).")
    check_contradictions(args)
    refuse_to_replace_run(args)
    settings = TLMSettings(
        retrieved=args.dapt_corpus,
        objective=args.aux_objective if aux else TASK_ONLY,
        overrides=parse_overrides(args.set),
        rho1=1 if "dapt" in aux else 0,
        rho2=1.0 if "tapt" in aux else 0.0,
        weighting=args.weighting,
        **{name: getattr(args, name) for name in META_DEFAULTS},
        learning_rate=args.learning_rate,
        patience=args.patience,
        balance_losses=args.losses == "balanced",
        **run_settings(args),
        **column_kwargs(args),
    )
    start_over_run(args)
    results = train_tlm(settings)
    keys = ("objective", "weighting", "stage1_steps", "stage1_flops", "dev", "test")
    print(json.dumps({k: results[k] for k in keys}, indent=2))
    return 0
