"""The probe cells of a comparison: linear probes (`electra.probes.run`) fitted on every fraction's frozen features,
and on a randomly initialised encoder as the reference.

At CPU budgets, where a 1,000-example fine-tune is mostly noise, the probes' seed spread is small and the gap to the
random encoder shows what pretraining added. A probe cell (OUT/probes/ARM/KofN/PROBE.json, written by rename) is
reused while it was made with the current seeds, sample size and probe files; any other is stale and redone.
"""

from __future__ import annotations

from pathlib import Path

from electra.app.compare.layout import (
    cell_slug,
    export_dir,
    fraction_name,
    notice_unreadable,
    probe_folder,
    write_json,
)
from electra.app.compare.settings import CompareSettings
from electra.core.files import read_json_record
from electra.probes.inputs import check_probe_inputs, get_probe
from electra.probes.run import data_sha256, random_encoder_dir, run_probe, training_samples

PROBE_MAX_LENGTH = 128  # the pieces a probe reads of each sentence (`electra probe --max-length`'s default)


def probe_cell(settings: CompareSettings, cell: dict | None, probe: str) -> dict:
    """One (arm, fraction, probe) cell, or with `cell=None` the random-encoder reference (a randomly initialised
    copy of the first arm's encoder): every seed. Skipped when already on disk with the same settings."""
    if cell is None:
        path = probe_folder(settings) / f"{probe}.json"
    else:
        name = fraction_name(cell["index"], settings.checkpoints)
        path = probe_folder(settings, cell_slug(cell), name) / f"{probe}.json"
    key = _probe_key(settings, probe)
    done = _probe_current(path, key)
    if done is not None:
        return done
    notice_unreadable(path)
    if cell is None:
        last = fraction_name(settings.checkpoints, settings.checkpoints)
        model_dir = random_encoder_dir(
            export_dir(settings, settings.arms[0].slug, last), path.parent / "model"
        )
        print(f"compare: probing a randomly initialised encoder on {probe}")
    else:
        model_dir = export_dir(settings, cell_slug(cell), name)
        print(f"compare: probing {cell['objective']} {name} on {probe} (seeds {settings.seeds})")
    result = run_probe(
        model_dir, probe, settings.probe_data, settings.seeds, settings.probe_max_train, PROBE_MAX_LENGTH
    )
    done = dict(
        key, **{k: result[k] for k in ("median", "min", "max", "accuracy", "majority", "n_train", "n_dev")}
    )
    write_json(path, done)
    return done


def _probe_key(settings: CompareSettings, probe: str) -> dict:
    """What a finished probe cell must share with the run that reuses it: seeds, sample size, and the SHA-256 of
    each file the probe reads (so that a corrected SST-2 dev file makes the cell stale)."""
    data = data_sha256(get_probe(probe), settings.probe_data)
    return {"seeds": settings.seeds, "max_train": settings.probe_max_train, "data": data}


def _probe_current(path: Path, key: dict) -> dict | None:
    """A probe cell on disk made with the current seeds and sizes; None when missing, unreadable or stale."""
    done = read_json_record(path)
    return done if done is not None and {k: done.get(k) for k in key} == key else None


def probes_on_disk(settings: CompareSettings, folder: Path) -> dict[str, dict]:
    """Probe results in `folder` made with the current seeds and sizes (others are stale and left out)."""
    found = {}
    for probe in settings.probes:
        path = folder / f"{probe}.json"
        done = _probe_current(path, _probe_key(settings, probe))
        if done is not None:
            found[probe] = {k: done[k] for k in ("median", "min", "max", "accuracy", "majority")}
    return found


def check_probe_data(settings: CompareSettings) -> None:
    """Each probe's files, read, and each seed's training sample (two classes at least), as `electra probe` checks
    them before its first probe."""
    if not settings.probes:
        return
    specs = [get_probe(name) for name in settings.probes]
    check_probe_inputs(specs, settings.probe_data, PROBE_MAX_LENGTH)
    for spec in specs:
        data = spec.read(Path(settings.probe_data))
        training_samples(spec, data, settings.probe_data, settings.seeds, settings.probe_max_train)
