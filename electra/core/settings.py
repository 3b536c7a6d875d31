"""Settings declared once: a dataclass field says its default, help, allowed values and flags (`setting`),
its check comes from that declaration (`check_declared`), and values given from Python or a config file are coerced
to its type strictly (`coerce_value`, `settings_from`). The command line builds its flags from the same
declarations (`electra.core.flags`), so a flag and its check cannot drift apart.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import numbers
import os
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import field, fields
from typing import Any

from electra.core.errors import UserError

# Float fields outside these ranges would not fail where they are read: a negative max_grad_norm turns clipping
# into a sign flip (gradient ascent), a negative loss weight trains the wrong way, a dropout rate or Adam beta of 1
# or more fails only once the model or optimizer is built, after the corpus is read. Each range: (test, what the
# value "must" do).
Range = tuple[Callable[[float], bool], str]
RATE: Range = (lambda v: 0.0 <= v < 1.0, "be in [0, 1)")
FRACTION: Range = (lambda v: 0.0 <= v <= 1.0, "be in [0, 1]")
NON_NEGATIVE: Range = (lambda v: v >= 0.0, "be at least 0")
POSITIVE: Range = (lambda v: v > 0.0, "be positive")
DECAY: Range = (lambda v: 0.0 < v <= 1.0, "be in (0, 1]")
COUNT: Range = (lambda v: v >= 1, "be at least 1")
NOT_NEGATIVE_COUNT: Range = (lambda v: v >= 0, "not be negative")
OPEN_FRACTION: Range = (lambda v: 0.0 < v < 1.0, "be in (0, 1)")
SEED_RANGE: Range = (lambda v: 0 <= v < 2**32, f"be in 0..{2**32 - 1} (the range numpy seeds)")


def check_declared(settings: Any, source: str) -> None:
    """Every field of a dataclass of `setting`s against its declared choices or range, in field order; one line
    naming the first that is outside them (None, where a field allows it, passes)."""
    where = f"{source}: " if source else ""
    for spec in fields(settings):
        value = getattr(settings, spec.name)
        choices, within = spec.metadata.get("choices"), spec.metadata.get("within")
        if value is None:
            continue
        if choices is not None and value not in choices:
            raise UserError(f"{where}{spec.name}={value!r} is not one of {', '.join(choices)}.")
        if within is not None:
            test, wording = within
            if not (math.isfinite(value) and test(value)):  # inf passes v > 0
                raise UserError(f"{where}{spec.name} must {wording}, got {value}.")


def declaration(settings_class: type, name: str) -> Any:
    """The declaration (`dataclasses.Field`) of a `setting` field: its default, help, choices, range and flags."""
    return next(spec for spec in fields(settings_class) if spec.name == name)


_PYTHON_SPELLING: ContextVar[bool] = ContextVar("electra_python_spelling", default=False)


@contextlib.contextmanager
def python_spelling() -> Iterator[None]:
    """Inside, `spelled` names settings as a Python caller passes them: the API's door runs its checks here, so
    their messages say `resume=True` where the command line's say `--resume`."""
    token = _PYTHON_SPELLING.set(True)
    try:
        yield
    finally:
        _PYTHON_SPELLING.reset(token)


def spelled(settings_class: type | None, name: str, flag: str | None = None) -> str:
    """How a message names setting `name` of `settings_class`: its first declared flag (or `flag`) on the command
    line; inside `python_spelling`, the argument as Python passes it (`name=True` for a switch)."""
    if _PYTHON_SPELLING.get():
        switch = settings_class is not None and declaration(settings_class, name).type in ("bool", bool)
        return f"{name}=True" if switch else name
    if flag is None:
        flags = declaration(settings_class, name).metadata.get("flags") or ()
        flag = flags[0] if flags else f"--set {name}"
    return flag


def spelling(settings_class: type) -> Callable[[str], str]:
    """`spelled` for one declaration: `arg = spelling(RunInputs)`, then `f"pass {arg('resume')}"` reads
    "pass --resume" on the command line and "pass resume=True" in Python."""
    return lambda name: spelled(settings_class, name)


def setting(
    default: Any = None,
    help: str = "",
    *,
    choices: tuple[str, ...] | None = None,
    within: Range | None = None,
    flags: tuple[str, ...] = (),
    metavar: str | None = None,
    required: bool = False,
) -> Any:
    """A configuration field declared once: its default, help, allowed values (`choices`, or a range `within`),
    and the command-line flags that set it (none: `--set NAME=VALUE` only; `required`: a flag the command cannot
    run without, where the Python function takes it as a positional argument). `validate` reads the checks and the
    CLI builds the flags from here (`electra.core.flags.add_setting_flags`), so neither can drift from the other."""
    metadata = {"help": help, "choices": choices, "within": within, "flags": flags, "metavar": metavar}
    metadata["required"] = required
    return field(default=default, metadata=metadata)


def coerce_value(name: str, raw: Any, kind: str, source: str = "config") -> Any:
    """Turn a CLI string or a JSON value into the type `kind` ("int", "float | None", ...), strictly; errors name
    the field.

    An integer field takes an integral number only (2, 2.0, "1e3"; not 2.5 or "5e-1", which would floor to another
    value silently), a boolean field a boolean (or yes/no words from the command line), a float field a number, a
    string field a string.
    """
    nullable = "None" in kind
    if nullable and isinstance(raw, str) and raw.lower() in ("none", "null"):
        return None
    if raw is None:
        if nullable:
            return None
        raise UserError(f"{source}: {name} cannot be empty (null); give a {kind}.")
    if kind.startswith("dict"):
        if not isinstance(raw, dict):
            raise UserError(f"{source}: {name} must be a JSON object, got {raw!r}.")
        return raw
    wrong = UserError(f"{source}: {name}={raw!r} is not a valid {kind.replace(' | None', '')}.")
    if kind.startswith("bool"):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return raw.lower() in ("1", "true", "yes", "on")
        raise wrong
    if kind.startswith("int") or kind.startswith("float"):
        if isinstance(raw, bool):
            raise wrong
        try:
            number = float(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise wrong from None
        if isinstance(number, numbers.Integral):  # numpy's integers (np.arange, astype(int)) are accepted
            number = int(number)
        elif isinstance(number, numbers.Real):  # and its float32
            number = float(number)
        if not isinstance(number, (int, float)) or number != number:  # not a number, or NaN
            raise wrong
        if number in (float("inf"), float("-inf")):  # no field means "unbounded" by inf (None says "none")
            raise UserError(
                f"{source}: {name}={raw!r} is not a finite number; give a {kind.replace(' | None', '')}."
            )
        if kind.startswith("int"):
            if number != int(number):
                raise UserError(f"{source}: {name}={raw!r} is not a whole number; give an integer.")
            return int(number)
        return float(number)
    if isinstance(raw, os.PathLike):  # a path field given a pathlib.Path
        raw = os.fspath(raw)
    if not isinstance(raw, str):
        raise wrong
    return raw


def settings_from(cls: type, values: Mapping[str, Any], source: str) -> Any:
    """`cls(**values)` for a settings dataclass (GLUE's, SQuAD's) given from Python: each value coerced to its
    field's type as config fields are (`coerce_value`: "200" for an int is 200, "fast" for a float is refused,
    where the dataclass alone takes anything and fails deep inside training), and an unknown name refused
    (TypeError, as for any unknown keyword) with the names it may have meant."""
    known = {f.name: str(f.type) for f in fields(cls) if f.init}
    unknown = sorted(set(values) - set(known))
    if unknown:
        close = sorted({m for name in unknown for m in difflib.get_close_matches(name, known, n=2)})
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise TypeError(
            f"{source}: unknown setting(s) {', '.join(unknown)}{hint}; the settings are {', '.join(known)}."
        )
    return cls(**{name: coerce_value(name, value, known[name], source) for name, value in values.items()})
