"""Pretraining objectives: one module per family, each registered by name (`register_objective`).

Importing this package registers the built-in objectives; `objective_names()` is the one list of names.
"""

# Registration order is listing order: ELECTRA (the default) first, then the MLM baseline, then the rest.
from electra.objectives import replaced_token  # noqa: I001, F401
from electra.objectives import masked_lm, electric, stepping_stones, generator_variants, cloze  # noqa: F401
from electra.objectives.base import Objective, Parts
from electra.objectives.registry import (
    build_config,
    check_config,
    flop_report,
    get_objective,
    objective_names,
    register_objective,
)

__all__ = [
    "Objective",
    "Parts",
    "build_config",
    "check_config",
    "flop_report",
    "get_objective",
    "objective_names",
    "register_objective",
]
