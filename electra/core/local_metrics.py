"""Load the metric modules this library ships, through `evaluate`, without a network.

`evaluate.load("glue", "mrpc")` fetches a script from the Hugging Face hub and fails offline; `evaluate.load` of a
local script works anywhere. Each consumer package ships its metric as such a script (`glue/glue_metric.py`,
`squad/squad_metric.py`, `pll/wer_metric.py`), a thin `evaluate.Metric` over the package's tested functions, so a
user computes the numbers through the interface they know and gets exactly what the fine-tuners report.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any


@cache
def load_local_metric(script: str, config_name: str | None = None) -> Any:
    """`evaluate.load` of a metric script by path (cached per process: loading copies and imports the script)."""
    import evaluate

    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: metric script missing from the installation")
    return evaluate.load(str(path), config_name)
