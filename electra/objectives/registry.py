"""The one list of objective names: config validation, the CLI, `compare`, `tlm`, `flops` and `pll` read it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from electra.core.config import PretrainConfig
from electra.core.config_layers import read_config_layers
from electra.core.errors import UserError
from electra.core.plugin_sources import ENTRY_POINT_GROUP, PLUGINS_VARIABLE
from electra.flops.analytic import FlopReport, count_flops
from electra.objectives.base import Objective

_REGISTRY: dict[str, Objective] = {}

ObjectiveClass = TypeVar("ObjectiveClass", bound=type[Objective])


def register_objective(cls: ObjectiveClass) -> ObjectiveClass:
    """Class decorator: make an `Objective` subclass selectable by its `name` everywhere."""
    if not (isinstance(cls, type) and issubclass(cls, Objective)) or not cls.name:
        raise TypeError("register_objective takes an Objective subclass with a non-empty `name`")
    existing = _REGISTRY.get(cls.name)
    if existing is not None and type(existing).__qualname__ != cls.__qualname__:
        raise ValueError(f"objective {cls.name!r} is already registered by {type(existing).__qualname__}")
    _REGISTRY[cls.name] = cls()
    return cls


def objective_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get_objective(name: str) -> Objective:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(
            f"config: objective={name!r} is not one of {', '.join(_REGISTRY)} (an objective of your own: name its "
            f"module in {PLUGINS_VARIABLE}, or declare it as an {ENTRY_POINT_GROUP} entry point)."
        ) from None


def build_config(
    size: str = "tiny",
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> PretrainConfig:
    """Size preset < the objective's defaults < config file < explicit overrides (later wins), validated."""
    layers = read_config_layers(size, config_file, overrides)
    return check_config(layers.assemble(get_objective(layers.objective).config_defaults))


def check_config(config: PretrainConfig) -> PretrainConfig:
    """Validate a config however it was made (built, loaded from a run, edited): generic fields, then what the
    objective declares it trains with (`Objective.requires`), then its own rules between fields. This is the one
    check of a pretraining config; the run below it trusts the config."""
    config.validate()
    objective = get_objective(config.objective)
    for name, (allowed, why) in objective.requires.items():
        value = getattr(config, name)
        if value not in allowed:
            raise UserError(f"config: objective={objective.name} {why.format(value=value)}")
    objective.validate(config)
    return config


def flop_report(config: PretrainConfig, **kwargs: Any) -> FlopReport:
    """`electra.flops.analytic.count_flops` with what the config's objective declares it computes."""
    return count_flops(config, plan=get_objective(config.objective).flop_plan(config), **kwargs)
