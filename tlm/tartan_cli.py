"""`electra tartan`: end-task aware training (MT-TARTAN, META-TARTAN) from an existing checkpoint.

One body, the end-task head and auxiliary objectives from the registry, trained together on the joint engine task of
`electra.tlm.train` (the same one TLM's stage 1 runs): TAPT is the LM objective on the task's own texts, DAPT the LM objective
on a domain corpus (a `tlm retrieve` output or any corpus). Early stopping on the end task's dev metric keeps the best
state; test is reported for that state.
"""

from __future__ import annotations

import json

from electra.core.flags import add_output_option, add_setting_flags
from electra.tlm.cli import (
    FINETUNE_FLAGS,
    FINETUNE_UNUSED,
    add_set_flag,
    add_task_columns,
    add_task_files,
    command_settings,
    refuse_unused,
)
from electra.tlm.declared import TASK_ONLY

AUXILIARIES = ("tapt", "dapt")
# META-TARTAN's flags: None until given, as `electra.tlm.cli`'s conditional flags are, so that one given with
# --weighting uniform (which has no meta step) is refused; not given, they keep their declared defaults.
META_FLAGS = ("meta_lr", "meta_head_steps", "meta_head_lr")
# The settings `tartan` takes from flags of their own names, with its own defaults where they differ from the
# declared ones (TARTAN continues from a checkpoint: a fine-tuner's batch and rate, frequent dev evaluations, no
# second stage) and the weightings it offers.
TARTAN_FLAGS = command_settings(
    "TartanFlags",
    (
        "weighting",
        *META_FLAGS,
        "steps",
        "flops_budget",
        "learning_rate",
        "batch_size",
        "eval_every",
        "patience",
        "metric",
        "finetune_epochs",
        "finetune_lr",
        "vocab",
        "seed",
        "cache_dir",
        "save_every",
        "resume",
    ),
    until_given=(*META_FLAGS, "finetune_lr"),
    defaults={
        "weighting": "uniform",
        "learning_rate": 1e-4,
        "batch_size": 32,
        "eval_every": 50,
        "finetune_epochs": 0,
    },
    choices={"weighting": ("uniform", "meta")},
    helps={
        "finetune_epochs": "epochs on the end task alone afterwards; 0 for none",
        "finetune_lr": "peak learning rate of those epochs",
    },
)


def register(subparsers) -> None:
    """`tartan`'s flags: the task files, the output, the auxiliaries and the checkpoint by hand, every other
    setting built from its declaration (TARTAN_FLAGS)."""
    parser = subparsers.add_parser(
        "tartan",
        help="end-task aware training: the task and auxiliary LM objectives together, uniform or meta-learned weights",
        description="TARTAN (Dery et al., 2022) with electra, mlm or electric as the auxiliary objective.",
    )
    parser.add_argument(
        "--init-from", required=True, help="checkpoint to start from (a run of this library or HF ELECTRA)"
    )
    add_task_files(parser)
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
    parser.add_argument(
        "--losses",
        choices=["balanced", "raw"],
        default="balanced",
        help="balanced: each term divided by its running mean before weighting (ELECTRA's loss is ~20x a task's "
        "cross-entropy); raw: the paper's weights on the losses as they are",
    )
    add_output_option(parser, "out", "output folder", default="runs/tartan")
    add_setting_flags(parser, TARTAN_FLAGS, declared_defaults=True)
    add_set_flag(parser, "config override (repeatable)")
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
    """Flags that would be ignored in silence: META-TARTAN's with uniform weights (no meta step reads them) and
    `--finetune-lr` with `--finetune-epochs 0` (the default: no fine-tuning). A user who sets them expects them to
    act. (`--patience` with `--eval-every 0`, no evaluation to count, is refused by the settings.)"""
    refuse_unused(
        args,
        META_FLAGS,
        args.weighting == "meta",
        "{flag} is for --weighting meta; add --weighting meta or drop {flag}.",
    )
    # a negative --finetune-epochs is refused on its own (`settings_from_flags`), not as "0"
    refuse_unused(args, FINETUNE_FLAGS, args.finetune_epochs != 0, FINETUNE_UNUSED)


def run(args) -> int:
    from electra.core.config_files import parse_overrides
    from electra.core.errors import UserError
    from electra.tlm.cli import refuse_to_replace_run, settings_from_flags, start_over_run
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
    settings = settings_from_flags(
        args,
        TARTAN_FLAGS,
        retrieved=args.dapt_corpus,
        objective=args.aux_objective if aux else TASK_ONLY,
        overrides=parse_overrides(args.set),
        rho1=1 if "dapt" in aux else 0,
        rho2=1.0 if "tapt" in aux else 0.0,
        init_from=args.init_from,
        balance_losses=args.losses == "balanced",
    )
    refuse_to_replace_run(args)
    start_over_run(args)
    results = train_tlm(settings)
    keys = ("objective", "weighting", "stage1_steps", "stage1_flops", "dev", "test")
    print(json.dumps({k: results[k] for k in keys}, indent=2))
    return 0
