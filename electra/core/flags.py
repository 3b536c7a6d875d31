"""Command-line options that mean the same in every command, spelled once (argparse only: no heavy imports)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import Field, fields
from typing import Any

from electra.core.errors import UserError
from electra.core.overwrite import refuse_unusable_output


def add_output_option(
    parser: argparse.ArgumentParser, dest: str, help: str, directory: bool = True, **kwargs: Any
) -> None:
    """`--output`, with the spellings users bring from other tools (`--output-dir`, Trainer's; `--out`) as
    aliases for a folder; a command that writes one file takes `--output` alone, as `score` and `plot` do (an
    `--output-dir` naming a file reads as a mistake); `kwargs` are argparse's (default, required).

    A `directory` output that names an existing file is refused while the flags are read, before any work: the
    one check every command that writes a folder shares (`electra.core.overwrite.refuse_unusable_output`)."""
    if not directory:
        parser.add_argument("--output", dest=dest, help=help, **kwargs)
        return
    kwargs.setdefault("type", _output_directory)
    parser.add_argument("--output", "--output-dir", "--out", dest=dest, help=help, **kwargs)


def _output_directory(value: str) -> str:
    try:
        refuse_unusable_output(value, option=None)  # argparse names the option itself
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def require_counts(
    args: argparse.Namespace, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> None:
    """Count options must be at least 1 (`optional` ones only when given, or when the command has them): one line
    naming the flag otherwise."""
    for name in required + optional:
        value = getattr(args, name, None)
        if (value is not None or name in required) and (value is None or value < 1):
            raise UserError(f"--{name.replace('_', '-')} must be at least 1.")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: …)" only where there is a value to show: not after a flag whose default is None (its
    help says what happens without it) or after a switch that takes no value ("--no-x (default: True)" reads as
    if the switch were on)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.nargs == 0:
            return action.help
        return super()._get_help_string(action)


def flagged_fields(settings_class: type) -> Iterator[Field]:
    """The fields of a dataclass of `electra.core.config.setting`s that have command-line flags."""
    return (spec for spec in fields(settings_class) if spec.metadata.get("flags"))


def add_setting_flags(
    parser: argparse.ArgumentParser,
    settings_class: type,
    parse: dict[str, Callable[[str], Any]] | None = None,
    declared_defaults: bool = False,
    skip: tuple[str, ...] = (),
) -> None:
    """One flag per flagged field of `settings_class`, built from its declaration: the names, help, choices and
    metavar, and the value type from the annotation. A bool field is a switch: `--x` where it defaults to False,
    the declared `--no-x` where it defaults to True, `--x/--no-x` where it defaults to None. Flags default to
    None ("not given", so a preset, a config file or --set decides) unless `declared_defaults`, where they default
    to the field's own default. `parse` replaces a field's value type (a check that needs more than argparse's);
    the fields in `skip` are left to the caller (an option with its own parser, `add_output_option`'s)."""
    parse = parse or {}
    for spec in flagged_fields(settings_class):
        if spec.name in skip:
            continue
        kind = str(spec.type)
        options: dict[str, Any] = {"dest": spec.name, "help": spec.metadata["help"]}
        if spec.metadata.get("required"):
            options["required"] = True
        options["default"] = spec.default if declared_defaults else None
        if spec.metadata.get("metavar"):
            options["metavar"] = spec.metadata["metavar"]
        if kind.startswith("bool"):
            switch = (
                {False: "store_true", True: "store_false"}.get(spec.default) if declared_defaults else None
            )
            options["action"] = switch or argparse.BooleanOptionalAction
        else:
            options["type"] = parse.get(spec.name) or (
                int if kind.startswith("int") else float if kind.startswith("float") else str
            )
            if spec.metadata.get("choices") and spec.name not in parse:
                options["choices"] = spec.metadata["choices"]
        parser.add_argument(*spec.metadata["flags"], **options)


def flag_values(settings_class: type, args: argparse.Namespace) -> dict[str, Any]:
    """The values the flags of `settings_class` read, by field name."""
    return {spec.name: getattr(args, spec.name) for spec in flagged_fields(settings_class)}
