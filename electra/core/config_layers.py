"""A pretraining config made from its layers: the size preset < the objective's defaults < a config file < the
caller's overrides (later wins). Each key is checked against the config's fields and each value coerced to its type
as it is read; the objective registry (`electra.objectives.build_config`) looks up the objective the layers choose
and hands its defaults to `ConfigLayers.assemble`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from electra.core.config import SIZES, PretrainConfig, coerce_field, field_names
from electra.core.config_files import load_config_file
from electra.core.errors import UserError


@dataclass(frozen=True)
class ConfigLayers:
    """A config's values before its objective's defaults join them: the size preset, and over it the config file's
    and the caller's values (checked and coerced). `objective` names the objective they choose, whose defaults the
    registry passes to `assemble`: this module sits below the registry and knows no objective."""

    preset: Mapping[str, Any]
    chosen: Mapping[str, Any]

    @property
    def objective(self) -> str:
        return self.chosen.get("objective", self.preset.get("objective", "electra"))

    def assemble(self, objective_defaults: Mapping[str, Any]) -> PretrainConfig:
        """Size preset < the objective's defaults < config file < explicit overrides (later wins); generic checks
        only."""
        values = {**self.preset, **objective_defaults, **self.chosen}
        # until a tokenizer says otherwise, the vocabulary a run would train
        if "vocab_size" not in self.chosen:
            values["vocab_size"] = values.get("tokenizer_vocab_size", PretrainConfig.tokenizer_vocab_size)
        return PretrainConfig(**values).validate()


def read_config_layers(
    size: str, config_file: str | Path | None, overrides: dict[str, Any] | None
) -> ConfigLayers:
    """The size preset, the config file and the overrides, each key known and each value coerced to its field."""
    if size not in SIZES:
        raise UserError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}.")
    from_file = load_config_file(config_file) if config_file is not None else {}
    if overrides is not None and not isinstance(overrides, Mapping):
        raise TypeError(
            "overrides must be a dict of config field: value (e.g. {'max_steps': 200}), not "
            f"{type(overrides).__name__}."
        )
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for layer in (from_file, given):
        unknown = sorted(set(layer) - field_names())
        if unknown:
            where = f" in {config_file}" if layer is from_file else ""
            raise UserError(
                f"unknown config key(s){where}: {', '.join(unknown)}. Run `electra pretrain --help-config` for "
                "the list."
            )
    chosen = {k: coerce_field(k, v, f"config file {config_file}") for k, v in from_file.items()}
    chosen.update({k: coerce_field(k, v) for k, v in given.items()})
    return ConfigLayers(preset=dict(SIZES[size]), chosen=chosen)
