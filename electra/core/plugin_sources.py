"""Where plugins (objectives from outside the library) are declared, readable without importing the objectives.

Why a module of its own: importing `electra.objectives` loads torch and transformers (seconds), which a command
that names no plugin should not pay at start-up; the CLI asks `requested()` first (`electra.objectives.plugins`
does the loading).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "electra.objectives"
PLUGINS_VARIABLE = "ELECTRA_PLUGINS"


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether an installed package declares an objective entry point or `ELECTRA_PLUGINS` names something."""
    environ = os.environ if environ is None else environ
    return bool(environ.get(PLUGINS_VARIABLE, "").strip()) or bool(entry_points(group=ENTRY_POINT_GROUP))
