"""Where an `electra compare` run keeps its files in OUT, and how it writes its records there.

OUT/tokenizer/                      the shared vocabulary (`vocab`)
OUT/pretrain/ARM/                   each arm's pretraining run and its checkpoints (`pretrain`)
OUT/checkpoints/ARM/KofN/           the export of budget fraction K of N, with its cell.json
OUT/glue/ARM/KofN/TASK.json         a fine-tuning cell (`glue`), its seeds run beside it
OUT/probes/ARM/KofN/PROBE.json      a probe cell (`probes`); OUT/probes/random-encoder/ the reference
OUT/compare.json, OUT/results.*     the manifest (`rerun`) and the report (`report`)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from electra.app.compare.settings import CompareSettings
from electra.core.files import read_json_record, write_json_atomically
from electra.finetune.results import json_safe

# What a run writes into OUT after compare.json (besides its scratch: cache/, dot-files), each replaced or reused.
OUT_NAMES = (
    "tokenizer",
    "pretrain",
    "checkpoints",
    "glue",
    "probes",
    "results.json",
    "results.md",
    "curve.png",
)


def fraction_name(index: int, total: int) -> str:
    """The folder name of budget fraction `index` of `total` (KofN)."""
    return f"{index}of{total}"


def export_dir(settings: CompareSettings, slug: str, fraction: str) -> Path:
    """OUT/checkpoints/ARM/FRACTION: the export of one budget fraction, with its cell.json."""
    return settings.out / "checkpoints" / slug / fraction


def glue_cell(settings: CompareSettings, slug: str, fraction: str, task: str) -> Path:
    """OUT/glue/ARM/FRACTION/TASK.json: one fine-tuning cell's record (its seeds run beside it)."""
    return settings.out / "glue" / slug / fraction / f"{task}.json"


def probe_folder(settings: CompareSettings, slug: str | None = None, fraction: str = "") -> Path:
    """OUT/probes/ARM/FRACTION/ holding PROBE.json per probe, or with no arm the random encoder's folder."""
    return settings.out / "probes" / (slug or "random-encoder") / fraction


def cell_slug(cell: dict) -> str:
    """The folder name of the arm a pretraining cell record belongs to."""
    return cell.get("slug") or cell["objective"]


def cache_dir(settings: CompareSettings) -> str:
    """The tokenizer and example cache every arm shares: --cache-dir, else OUT/cache."""
    return settings.cache_dir or str(settings.out / "cache")


def tokenizer_cache(settings: CompareSettings) -> str:
    """Where trained vocabularies are cached, keyed by the corpus."""
    return str(Path(cache_dir(settings)) / "tokenizers")


def notice_unreadable(path: Path) -> None:
    """Say so when a cell is redone because its file is unreadable (not merely missing or made otherwise)."""
    if path.is_file() and read_json_record(path) is None:
        print(f"compare: {path} is unreadable (cut short?); doing this cell again")


def write_json(path: Path, value: Any) -> None:
    """Write a record atomically, as strict JSON (an undefined score becomes null)."""
    write_json_atomically(path, json_safe(value), allow_nan=False, default=str)
