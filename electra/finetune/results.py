"""What a fine-tuning run writes about its seeds: each seed's result file, read back on a resume, and JSON that
strict readers accept."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from electra.core.errors import ElectraWarning
from electra.core.files import read_json_record, write_json_atomically

SEED_RESULT = "result.json"  # OUTPUT/runs/.../seed-N/result.json: a finished seed's result

Result = TypeVar("Result")


def json_safe(value: Any) -> Any:
    """NaN (an undefined correlation, an average over no task) becomes null: strict JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def write_seed_result(run_dir: Path, result: Any) -> None:
    """A finished seed's result (a dataclass) in its run folder, written whole or not at all."""
    write_json_atomically(run_dir / SEED_RESULT, asdict(result), indent=1)


def read_seed_result(run_dir: Path | None, build: Callable[[dict], Result]) -> Result | None:
    """A seed's result from an earlier (interrupted) invocation, when it finished; `build` makes it from the JSON
    object and raises KeyError, TypeError or ValueError on one that is not a result.

    A file that cannot be read back (cut short by a full disk or a crash of the machine, edited by hand) is one
    warning and the seed counts as unfinished: it is run again from its last checkpoint (or from the start), which
    gives the same result."""
    if run_dir is None or not (run_dir / SEED_RESULT).is_file():
        return None
    record = read_json_record(run_dir / SEED_RESULT)
    try:
        if record is None:
            raise ValueError("not a JSON object")
        return build(record)
    except (KeyError, TypeError, ValueError, AttributeError):
        warnings.warn(
            f"{run_dir / SEED_RESULT} is damaged (not a seed's result); running that seed again",
            ElectraWarning,
            stacklevel=2,
        )
        return None
