"""`electra flops`: count parameters and FLOPs of a configuration, or print the paper's figures beside ours."""

from __future__ import annotations

import argparse
import json
import sys

from electra.core.errors import UserError

OUTPUT_RULES_HELP = (
    "positions per sequence charged for the masked-LM output head: ceil (ceil(mask_prob*len), default), paper "
    "(fixed 20/128 of the sequence, as the paper's script), reference (int((mask_prob+0.005)*len), the reference "
    "pretraining code), all, or a number"
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "flops",
        help="count parameters and pretraining/inference FLOPs (ELECTRA paper conventions)",
        description="Parameters, inference FLOPs per sequence and training FLOPs per step/run, by component, in "
        "the ELECTRA paper's conventions (multiply-add = 2 FLOPs, backward = forward, one-hot embeddings).",
    )
    parser.add_argument(
        "--size",
        default=None,
        help="size preset: tiny, mini, small, base, large (default tiny, or with init_from the checkpoint's own)",
    )
    parser.add_argument("--config", default=None, help="JSON config file layered over the size preset")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config field (repeatable), e.g. --set generator_hidden_multiplier=0.5",
    )
    parser.add_argument(
        "--seq-len", type=int, default=None, help="training sequence length (default max_seq_length)"
    )
    parser.add_argument("--output-positions", default="ceil", help=OUTPUT_RULES_HELP)
    parser.add_argument(
        "--paper", action="store_true", help="print the paper's published figures beside ours"
    )
    parser.add_argument(
        "--measure",
        action="store_true",
        help="also run one training step of the objective's own model (random weights, a synthetic full-length batch "
        "of 2, CPU) under FlopCounterMode and compare its matmuls with the analytic count, as pretraining's start-up "
        "check does (seconds for tiny to base; large takes a minute and a few GB)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def _output_positions(raw: str) -> str | float:
    from electra.flops.shapes import OUTPUT_POSITION_RULES

    if raw in OUTPUT_POSITION_RULES:
        return raw
    try:
        return float(raw)
    except ValueError:
        raise UserError(
            f"--output-positions {raw!r} is not one of {', '.join(OUTPUT_POSITION_RULES)} or a number."
        ) from None


def _refuse_what_paper_ignores(args: argparse.Namespace) -> None:
    """`--paper` prints a fixed table (each row its own preset and settings), so options that describe a
    configuration or ask for a measurement would be dropped without a word: `--paper --measure` would measure
    nothing, and `--paper --set ...` would look like the table of the user's configuration. `--size` is left
    alone: its default cannot be told from a choice, and the table holds every size."""
    given = [
        flag
        for flag, value in (
            ("--measure", args.measure),
            ("--config", args.config),
            ("--set", args.overrides),
            ("--seq-len", args.seq_len is not None),
            ("--output-positions", args.output_positions != "ceil"),
        )
        if value
    ]
    if given:
        raise UserError(
            f"--paper takes no {given[0]}: it prints the paper's rows, each on its own preset; run `electra flops` "
            "without --paper to count your configuration."
        )


def run(args: argparse.Namespace) -> int:
    if args.paper:
        _refuse_what_paper_ignores(args)
        from electra.app.flops_paper import reproduce_all
        from electra.flops.report import format_paper

        rows = reproduce_all()
        print(json.dumps(rows, indent=2) if args.json else format_paper(rows))
        return 0

    from electra.core.config_files import parse_overrides
    from electra.flops.report import format_report
    from electra.objectives import build_config, flop_report
    from electra.training.continued import run_settings

    if args.seq_len is not None and args.seq_len < 1:
        raise UserError(f"--seq-len must be at least 1, got {args.seq_len}.")
    # the configuration `electra pretrain` would run with these --config and --set: a continued run's
    # (`init_from`) takes its checkpoint's shape, not silently the preset's (and a missing checkpoint is
    # refused), and a frozen generator its own embeddings
    size, overrides, _, note = run_settings(args.size, args.config, parse_overrides(args.overrides))
    if note:
        print(note, file=sys.stderr)
    config = build_config(size, args.config, overrides)
    if args.seq_len is not None and args.seq_len > config.max_position_embeddings:
        raise UserError(
            f"--seq-len {args.seq_len} exceeds max_position_embeddings {config.max_position_embeddings}; "
            "raise it with --set max_position_embeddings=N."
        )
    positions = _output_positions(args.output_positions)
    report = flop_report(config, seq_len=args.seq_len, output_positions=positions)
    measured = None
    if args.measure:
        from electra.flops.measured import MIN_MEASURED_LENGTH
        from electra.training.flop_check import measure_objective_step

        if report.seq_len < MIN_MEASURED_LENGTH:
            raise UserError(
                f"--measure runs a training step, which needs sequences of at least {MIN_MEASURED_LENGTH} tokens "
                f"([CLS] a [SEP] [SEP]), not {report.seq_len}."
            )
        measured = measure_objective_step(config, seq_len=report.seq_len)
    if args.json:
        payload = report.to_dict()
        if measured is not None:
            payload["measured"] = measured
        print(json.dumps(payload, indent=2))
    else:
        print(format_report(report, config, measured))
    return 0
