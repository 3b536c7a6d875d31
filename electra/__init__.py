"""electra: compute-efficient language-model pretraining (ELECTRA, Electric) and the tools that consume it.

`import electra` is cheap; the entry points (`electra.build_config`, `electra.pretrain`, `electra.finetune_glue`,
`electra.load_scorer`, `electra.register_objective`, ...) load on first use from `electra.api`.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazy, so that `electra.errors` or the CLI's argument parsing never pays for torch and transformers.
    import electra.api as api

    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'electra' has no attribute {name!r}")


def __dir__() -> list[str]:
    import electra.api as api

    return sorted([*globals(), *api.__all__])
