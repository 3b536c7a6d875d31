"""`electra pretrain` and `pretrain.py`: one argument parser for both, so their flags can never drift apart."""

from __future__ import annotations

import argparse
from pathlib import Path

from electra.app.plot import plot_run
from electra.core.config import SIZES, PretrainConfig
from electra.core.errors import UserError
from electra.core.files import require_file
from electra.core.flags import add_output_option, add_setting_flags, flagged_fields, require_counts
from electra.core.run_inputs import RunInputs, check_run_request
from electra.core.settings import declaration


class RegisteredObjectives:
    """argparse `choices` read from the objective registry only when used (a check or `pretrain --help`), so
    `electra --help` and the other commands start without importing the models."""

    def _names(self) -> tuple[str, ...]:
        from electra.objectives import objective_names

        return objective_names()

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())


OBJECTIVE_CHOICES = RegisteredObjectives()


def registered_objective(name: str) -> str:
    """`--objective`'s check: argparse's own "invalid choice" could not say how a name of one's own gets in."""
    if name not in OBJECTIVE_CHOICES:
        from electra.core.plugin_sources import ENTRY_POINT_GROUP, PLUGINS_VARIABLE

        raise argparse.ArgumentTypeError(
            f"invalid choice: {name!r} (choose from {', '.join(OBJECTIVE_CHOICES)}; an objective of your own: "
            f"name its module in {PLUGINS_VARIABLE}, or declare it as an {ENTRY_POINT_GROUP} entry point)"
        )
    return name


def add_pretrain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--size",
        default=None,
        choices=list(SIZES),
        help="model size preset (paper Table 5.1, plus CPU sizes); default: tiny, or with --init-from the "
        "checkpoint's own size",
    )
    parser.add_argument(
        "--config",
        dest="config_file",
        help="JSON or YAML (.yaml/.yml) file of config fields (overrides the size preset)",
    )
    add_output_option(parser, "output", declaration(RunInputs, "output_dir").metadata["help"], default=None)
    add_setting_flags(parser, PretrainConfig, parse={"objective": registered_objective}, skip=("init_from",))
    # continued pretraining is settled before the config exists (electra.training.continued.run_settings)
    init_from = declaration(PretrainConfig, "init_from").metadata
    parser.add_argument(*init_from["flags"], metavar=init_from["metavar"], help=init_from["help"])
    parser.add_argument(
        "--per-device-batch-size",
        "--per-device-train-batch-size",
        type=int,
        help="sequences per process per forward, as Trainer's --per_device_train_batch_size (the global batch is "
        "this x processes x accumulation)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override any config field"
    )
    add_setting_flags(parser, RunInputs, declared_defaults=True, skip=("output_dir",))
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG of training curves at the end")
    parser.add_argument(
        "--help-config",
        action="store_true",
        help="list every config field with its value for this --size/--config/--set and exit",
    )


def run(args: argparse.Namespace) -> int:
    from electra.core.config_files import parse_overrides

    check_paths(args)  # before the models are imported: a wrong path answers at once
    from electra.objectives import build_config

    overrides = parse_overrides(args.set)
    for spec in flagged_fields(PretrainConfig):
        name = spec.name
        value = getattr(args, name)
        if value is None or name == "init_from":  # settled first, by run_settings
            continue
        if name in overrides:
            # else the flag would win, the --set value unread (nor checked: max_steps=5e-1 would pass)
            flag = spec.metadata["flags"][0]
            raise UserError(f"{flag} and --set {name}={overrides[name]} both set {name}; give one of them.")
        overrides[name] = value
    from electra.training.continued import run_settings
    from electra.training.processes import main_process_print

    args.size, overrides, from_file, note = run_settings(
        args.size, args.config_file, overrides, args.init_from
    )
    if note:
        main_process_print(note)
    if args.per_device_batch_size is not None:
        if args.train_batch_size is not None:
            raise UserError("give --batch-size (global) or --per-device-batch-size, not both.")
        from electra.training.processes import process_count

        accumulation = int(overrides.get("gradient_accumulation_steps") or 1)
        overrides["train_batch_size"] = args.per_device_batch_size * process_count() * accumulation
    config = build_config(args.size, args.config_file, overrides)
    explicit = {**from_file, **overrides}
    if args.help_config:
        for name, value in sorted(config.to_dict().items()):
            print(f"{name} = {value!r}")
        return 0

    from electra.training.pretraining import pretrain

    corpus = args.corpus
    if corpus is None:
        from electra.data.embedded_corpus import ensure_embedded_corpus

        corpus = str(ensure_embedded_corpus(Path(args.cache_dir) / "corpus" if args.cache_dir else None))
        from electra.training.processes import main_process_print

        main_process_print(
            f"no --corpus given: training on the embedded State of the Union corpus ({corpus})"
        )
    output = Path(args.output or f"runs/{args.size}-{config.objective}")
    inputs = RunInputs(
        corpus=corpus,
        output_dir=output,
        vocab=args.vocab,
        cache_dir=args.cache_dir,
        num_proc=args.num_proc,
        resume=args.resume,
        elastic=args.elastic,
        overwrite=args.overwrite,
        size_to_budget=config.flops_budget is not None and "max_steps" not in explicit,
        keep_warmup="warmup_steps" in explicit,
        doc_boundary=args.doc_boundary,
        strict_utf8=args.strict_utf8,
        text_field=args.text_field,
    )
    result = pretrain(config, inputs)
    curves = result.output_dir / "metrics.csv"
    if not args.no_plot and result.is_main_process and result.trained and curves.is_file():
        print(f"curves: {plot_run(result.output_dir)}")
    return 0


def check_paths(args: argparse.Namespace) -> None:
    """The mistakes that need no model to spot (`electra.core.run_inputs.check_run_request`, which the Python API
    runs too), and the command line's own: a per-process batch below 1, a config file that is not there."""
    check_run_request(
        corpus=args.corpus,
        vocab=args.vocab,
        num_proc=args.num_proc,
        resume=args.resume,
        overwrite=args.overwrite,
        elastic=args.elastic,
        init_from=args.init_from,
        generator_from=args.generator_from,
    )
    require_counts(args, (), ("per_device_batch_size",))
    if args.config_file is not None:
        require_file(args.config_file, "config file")


def register(subparsers) -> None:
    parser = subparsers.add_parser("pretrain", help="pretrain ELECTRA / Electric / an MLM baseline")
    add_pretrain_arguments(parser)
    parser.set_defaults(func=run, several_processes=True)
