"""The settings of a TLM or TARTAN run (`TLMSettings`) and the model config they resolve to (`run_config`).

This is the boundary: `TLMSettings` checks every setting once, as it is built (from flags or from Python), and
refuses a bad one in one line. The code that trains (`electra.tlm.train` and the modules it runs) trusts what it
is given and checks nothing again. The fields are declared in `electra.tlm.declared` (light: the command line
builds its flags from them); this class adds the check that needs the objective registry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.objectives import build_config, objective_names
from electra.tlm.declared import TASK_ONLY, TLMDeclared
from electra.tlm.tasks import TaskExample, read_task_file
from electra.training.continued import checkpoint_shape, preset_of


@dataclass
class TLMSettings(TLMDeclared):
    """`TLMDeclared`'s settings, with `objective` checked against the objectives registered when the settings are
    built (plugins included, so the choices are known only at run time), before the declared checks."""

    def __post_init__(self) -> None:
        objectives = (*objective_names(), TASK_ONLY)
        if self.objective not in objectives:
            raise UserError(f"--objective {self.objective!r} is not one of {', '.join(objectives)}.")
        super().__post_init__()

    def read_split(self, path: str) -> list[TaskExample]:
        """A task split read with these settings' columns, header and format."""
        return read_task_file(
            path,
            text_columns=self.text_columns,
            label_column=self.label_column,
            header=self.header,
            fmt=self.task_format,
        )


def run_config(settings: TLMSettings) -> tuple[TLMSettings, PretrainConfig]:
    """The settings with their size resolved (the one `init_from` was built as, tiny without one) and the model
    config the run trains: read here once, so that ISS can check a layer against the model's shape before it
    spends the reference run."""
    lm_objective = settings.objective if settings.objective != TASK_ONLY else "electra"
    overrides = {**settings.overrides, "objective": lm_objective}
    if settings.size is None:
        found = (
            preset_of(settings.init_from)
            if settings.init_from and Path(settings.init_from).is_dir()
            else None
        )
        settings = replace(settings, size=found or "tiny")
    if settings.init_from is not None:  # a path that is no folder is refused by checkpoint_shape
        overrides = checkpoint_shape(
            settings.init_from, {**overrides, "init_from": settings.init_from}, settings.size
        )
    config = build_config(settings.size, settings.config_file, overrides)
    if settings.learning_rate is not None:
        config.learning_rate = settings.learning_rate
    return settings, config
