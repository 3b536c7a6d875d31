"""Bind the library's other top-level packages (glue, squad, ...) to the copies installed beside `electra`.

The repository's layout makes them top-level names, and top-level names are shared by every distribution in an
environment: glue-core (glueviz) also installs a package `glue`, and a folder with an `__init__.py` named like one of
them in the working directory or on PYTHONPATH comes earlier on `sys.path` than site-packages. Without this,
`electra glue` would then import the wrong `glue` and fail with an error that names neither. Importing `electra`
loads each sibling from the directory that holds `electra` itself, so the rest of `sys.path` no longer decides.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from electra.errors import UserError

SIBLINGS = ("generators", "discriminators", "flops", "glue", "squad", "pll", "tlm", "probes")
ROOT = Path(__file__).resolve().parent.parent  # the repository, or site-packages for a wheel


def is_ours(module: ModuleType) -> bool:
    """Loaded from beside `electra` and carrying the marker every sibling's `__init__` sets."""
    locations = list(getattr(module, "__path__", None) or []) or [getattr(module, "__file__", None) or ""]
    beside = any(Path(loc).resolve().is_relative_to(ROOT) for loc in locations if loc)
    return beside and getattr(module, "__electra_package__", False) is True


def bind_siblings(strict: bool = False) -> None:
    """Import every sibling package from ROOT unless it is imported already.

    A sibling that is already imported from elsewhere (the program imported another `glue` first) cannot be swapped
    under running code; with `strict` (the CLI) that is a one-line error saying which file took the name."""
    for name in SIBLINGS:
        module = sys.modules.get(name)
        if module is not None:
            if strict and not is_ours(module):
                where = getattr(module, "__file__", None) or list(getattr(module, "__path__", []))
                raise UserError(
                    f"another package named {name!r} ({where}) was imported instead of electra's ({ROOT / name}): "
                    "two distributions share that top-level name; install electra in its own virtual environment."
                )
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, [str(ROOT)])
        if spec is None or spec.loader is None:
            continue  # a partial install without this package: its command says so when run
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
