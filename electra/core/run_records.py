"""OUTPUT/run.json: what a run was started with, so that `--resume` continues only the same run. Every command
that resumes (pretrain, glue, tag, squad, tlm) writes it once and checks it before any work.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.files import write_json_atomically
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelling

arg = spelling(RunInputs)  # --resume on the command line, resume=True in Python


def resume_fix() -> str:
    """What a refused `--resume` of a consumer (glue, squad, tlm) says to do instead: the flags all of them take."""
    return (
        f"resume with the saved settings, use another {arg('output_dir')}, or drop {arg('resume')} and pass "
        f"{arg('overwrite')} to start over."
    )


def refuse_changed_settings(
    record: str | Path,
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    fix: str,
    ignore: Collection[str] = (),
) -> None:
    """Stop a `--resume` whose settings differ from the ones its output was started with, in one line naming each
    differing setting with its saved and new value, before any work.

    Every command that resumes (pretrain, glue, squad, tlm) shares this refusal: continuing checkpoints, or
    reusing finished results, under other settings would label numbers with settings that did not produce them.
    Values are compared as JSON (what `record` holds), so tuples, lists and paths given as str compare alike. A
    setting only one side has (a record written before the setting existed) is not compared. `fix` says what to
    do instead (the command's own flags)."""
    old, new = (json.loads(json.dumps(dict(values), default=str)) for values in (saved, current))
    changed = [
        f"{name} (saved {json.dumps(old[name])}, now {json.dumps(new[name])})"
        for name in new
        if name in old and name not in ignore and old[name] != new[name]
    ]
    if changed:
        raise UserError(f"{arg('resume')}: {record} differs from this run in {', '.join(changed)}; {fix}")


def read_run_record(path: str | Path) -> dict[str, Any] | None:
    """A run's saved settings (a JSON object), or None when there is none; a damaged record is one line naming
    the file, since a resume must not go on without it."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{path}: not valid JSON ({exc}); restore it, or start over: drop {arg('resume')} and pass "
            f"{arg('overwrite')}."
        ) from None
    if not isinstance(data, dict):
        raise UserError(
            f"{path}: must hold a JSON object of settings; restore it, or start over: drop {arg('resume')} and "
            f"pass {arg('overwrite')}."
        )
    return data


def write_run_record(path: str | Path, settings: Mapping[str, Any]) -> None:
    """Save the settings a later `--resume` must match, atomically (a kill mid-write leaves the old record)."""
    write_json_atomically(path, dict(settings), default=str)


# OUTPUT/run.json: what a `--resume` must match (pretrain: corpus, vocabulary, processes; glue, squad, tlm: the
# model and settings)
RUN_RECORD = "run.json"


def check_run_record(
    output: Path,
    record: Mapping[str, Any],
    from_results: Callable[[dict[str, Any]], Mapping[str, Any] | None] | None = None,
) -> None:
    """A consumer's (glue, squad, tlm) `--resume` check: `record` against OUTPUT/run.json, or, for an output from
    before run.json existed, against what `from_results` recovers from its results.json (None: nothing to
    compare). Refused in one line, before any work: an input file whose contents changed at the same path
    (`INPUT_DIGESTS`), then any other setting (`refuse_changed_settings`)."""
    where = output / RUN_RECORD
    saved = read_run_record(where)
    if saved is None and from_results is not None:
        results = read_run_record(output / "results.json")
        saved, where = (from_results(results) if results else None), output / "results.json"
    if saved is None:
        return
    digests, saved_digests = record.get(INPUT_DIGESTS) or {}, saved.get(INPUT_DIGESTS) or {}
    changed = [name for name, digest in digests.items() if saved_digests.get(name, digest) != digest]
    if changed:
        paths = ", ".join(str(record.get(name, name)) for name in changed)
        raise UserError(
            f"{arg('resume')}: {paths} changed since {output} was started with "
            f"{'them' if len(changed) > 1 else 'it'} (other contents at the same path); restore the files it was "
            f"started with, or drop {arg('resume')} and pass {arg('overwrite')} to start over (or choose another "
            "output)."
        )

    def settings_of(values: Mapping[str, Any]) -> dict[str, Any]:
        return {name: value for name, value in values.items() if name != INPUT_DIGESTS}

    refuse_changed_settings(where, settings_of(saved), settings_of(record), resume_fix())


# run.json's record of what each input file held (setting name -> SHA-256 or a corpus sample): the same path can
# hold another file by a resume (a task file relabelled, a training file edited), and a run continued on it mixes
# two datasets under one set of results. `check_run_record` refuses that, naming the file (the setting's value).
INPUT_DIGESTS = "input_sha256"


def keep_run_record(output: Path, record: Mapping[str, Any], resume: bool) -> None:
    """Write OUTPUT/run.json, except where a resume finds one: the first run's settings stay the reference."""
    if not (resume and (output / RUN_RECORD).is_file()):
        write_run_record(output / RUN_RECORD, record)
