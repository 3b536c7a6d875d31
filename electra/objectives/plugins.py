"""Objectives from outside the library, registered before a command reads its flags.

Why: `register_objective` registers a class in the process that imports it, but `electra pretrain` (and
compare, tlm, flops) run in a fresh process that never imports the user's module, so the name would be refused
there. Two ways in, both read by every command at start-up:

- a package declares an entry point in the `electra.objectives` group, naming a module (its decorators register)
  or an `Objective` subclass (registered here); installed once, always offered;
- `ELECTRA_PLUGINS` names modules or `.py` files, comma-separated, for one shell or one launch (torchrun and
  `accelerate launch` pass it on to every process).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.plugin_sources import ENTRY_POINT_GROUP, PLUGINS_VARIABLE
from electra.objectives.base import Objective
from electra.objectives.registry import objective_names, register_objective


def load_plugins(environ: Mapping[str, str] | None = None) -> list[str]:
    """Imports the installed entry points and the `ELECTRA_PLUGINS` items; returns the objective names they added.
    A plugin that cannot be found or imported is refused in one line naming it."""
    environ = os.environ if environ is None else environ
    before = set(objective_names())
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        _register(
            _loaded(entry.load, f"entry point {entry.name} = {entry.value} (group {ENTRY_POINT_GROUP})")
        )
    for item in (part.strip() for part in environ.get(PLUGINS_VARIABLE, "").split(",")):
        if item:
            _register(_loaded(lambda item=item: _import(item), f"{PLUGINS_VARIABLE} item {item!r}"))
    return [name for name in objective_names() if name not in before]


def _loaded(load: Callable[[], Any], what: str) -> Any:
    try:
        return load()
    except UserError:
        raise
    except Exception as exc:  # the plugin's own error, whatever it is: one line naming the plugin
        raise UserError(f"{what}: importing it failed with {type(exc).__name__}: {exc}") from exc


def _import(item: str) -> Any:
    """A module by its import name, or a `.py` file by its path (imported under its file name's stem)."""
    if not (item.endswith(".py") or os.sep in item or "/" in item):
        try:
            return importlib.import_module(item)
        except ModuleNotFoundError as exc:
            if exc.name != item.split(".")[0]:
                raise  # the plugin's own import failed: the general message names it
            raise UserError(
                f"{PLUGINS_VARIABLE}: no module {item!r} on the import path; give a .py file's path, or add its "
                "folder to PYTHONPATH."
            ) from exc
    path = Path(item).expanduser().resolve()
    if not path.is_file():
        raise UserError(
            f"{PLUGINS_VARIABLE}: no file {path}; give importable module names or paths of .py files, "
            "comma-separated."
        )
    known = sys.modules.get(path.stem)
    if known is not None and getattr(known, "__file__", None) == str(path):
        return known  # already imported (a second command in one process)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[path.stem]
        raise
    return module


def _register(loaded: Any) -> None:
    """An entry point may name a class instead of a module: register it (a module registered its own)."""
    if isinstance(loaded, type) and issubclass(loaded, Objective):
        register_objective(loaded)
