"""electra: compute-efficient language-model pretraining (ELECTRA, Electric) and the tools that consume it.

`import electra` is cheap; the entry points (`electra.build_config`, `electra.pretrain`, `electra.finetune_glue`,
`electra.load_scorer`, `electra.register_objective`, ...) load on first use from `electra.app.api`.
"""

from __future__ import annotations

from typing import Any

from electra.core.version import __version__ as __version__

# The names electra.app.api exports (tests/test_objective_registry.py checks the two lists agree).
API = (
    "Export",
    "Objective",
    "PretrainingModel",
    "PretrainResult",
    "Scorer",
    "build_config",
    "build_pretraining_model",
    "finetune_dir",
    "finetune_glue",
    "finetune_squad",
    "flop_report",
    "get_objective",
    "load_scorer",
    "objective_names",
    "pretrain",
    "read_export",
    "register_objective",
)


def __getattr__(name: str) -> Any:
    # Lazy, so that `electra.core.errors` or the CLI's argument parsing never pays for torch and transformers. Only the
    # API's names load it: `from electra import cli` must not (Python asks __getattr__ before importing a submodule).
    if name not in API:
        raise AttributeError(f"module 'electra' has no attribute {name!r}")
    import electra.app.api as api

    return getattr(api, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *API])
