"""What a rerun into the same OUT must agree on to resume the comparison there.

OUT/compare.json records the pretraining settings the arms were trained under (PRETRAINING_KEYS), results.json the
evaluation settings its cells were made with; a rerun with other ones is refused before any work, so that it never
mixes cells of two comparisons. An OUT holding a comparison's file names without compare.json is someone else's
folder and is refused too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from electra.app.compare.layout import OUT_NAMES, write_json
from electra.app.compare.report import evaluation_settings
from electra.app.compare.settings import PRETRAINING_KEYS, CompareSettings
from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.finetune.results import json_safe
from electra.glue.settings import FinetuneSettings

# Lists of what is evaluated, not in which order: `--glue-tasks mrpc,rte` fine-tunes the same cells as `rte,mrpc`.
_UNORDERED = ("tasks", "probes")


def refuse_foreign_out(out: Path) -> None:
    """An OUT without compare.json (written before any of OUT_NAMES) is no comparison's folder: its results.md,
    curve.png or tokenizer/ are a user's (or another command's run) that a run would replace or take as its own,
    so they are refused, --overwrite or not (it replaces only a comparison's own report). Other files are left."""
    if not out.is_dir() or (out / "compare.json").is_file():
        return
    clashing = sorted(path.name for path in out.iterdir() if path.name in OUT_NAMES)
    if clashing:
        raise UserError(
            f"{out} holds {', '.join(clashing)} but no compare.json, so it is not a comparison's folder and a run "
            "would write over them; move them out, or choose another --out."
        )


def check_manifest(settings: CompareSettings) -> tuple[dict[str, Any], bool]:
    """The pretraining settings OUT/compare.json must match for a rerun to resume (the cells were trained under
    them); returned for `record_manifest`, which writes them once every check has passed, so that an input refused
    before any work leaves nothing to block the corrected rerun. A manifest under which no arm was pretrained (a
    run killed or failed before its first checkpoint) binds nothing: with --overwrite it is replaced (the second
    value is True), and so is OUT/tokenizer."""
    path = settings.out / "compare.json"
    current = _manifest(settings)
    if not path.is_file():
        return current, False
    saved = read_json_record(path)
    if saved is None:
        raise UserError(
            f"{path}: unreadable (cut short by a full disk or a crash?); it records the pretraining settings of "
            f"the arms in {settings.out}: delete it and rerun with the settings they were pretrained with."
        )
    changed = [
        f"{key} (saved {json.dumps(saved.get(key), default=str)}, now {json.dumps(current[key], default=str)})"
        for key in PRETRAINING_KEYS
        if saved.get(key) != current[key]
    ]
    if not changed:
        return current, False
    started = _pretrained_anything(settings)
    if not started and settings.overwrite:
        return current, True
    if started:
        advice = "rerun with the same settings to resume it, or choose another --out" + (
            " (--overwrite replaces a report, never pretrained arms)" if settings.overwrite else ""
        )
    else:
        advice = "no arm was pretrained under them yet: pass --overwrite to start over with these"
    raise UserError(f"{path}: this comparison was run with other {', '.join(changed)}; {advice}.")


def _manifest(settings: CompareSettings) -> dict[str, Any]:
    """This run's pretraining settings, as OUT/compare.json records them."""
    return {
        "corpus": str(Path(settings.corpus).resolve()),
        "size": settings.size,
        "overrides": settings.overrides,
        "budget": settings.budget,
        "checkpoints": settings.checkpoints,
        # every arm reads OUT/tokenizer, made from it: a rerun with another --vocab would not use that one
        "vocab": str(Path(settings.vocab).resolve()) if settings.vocab else None,
    }


def _pretrained_anything(settings: CompareSettings) -> bool:
    """Whether any arm in --out has pretrained: a checkpoint, an export, a cell evaluated, or a report."""
    out = settings.out
    if (out / "results.json").exists() or any((out / "pretrain").glob("*/checkpoints/step-*")):
        return True
    return any(
        path.is_file() for name in ("checkpoints", "glue", "probes") for path in (out / name).rglob("*")
    )


def record_manifest(settings: CompareSettings, manifest: dict[str, Any], replace: bool = False) -> None:
    """Write OUT/compare.json unless one is there (or `replace` it)."""
    path = settings.out / "compare.json"
    if replace or not path.is_file():
        write_json(path, manifest)


def check_report(settings: CompareSettings, finetune: FinetuneSettings) -> None:
    """A rerun into the same --out resumes the comparison its results.json reports. One with other evaluation
    settings would replace that report (and redo its cells), and one without an arm the report holds would drop
    it, so these need --overwrite, as glue, tlm, score and rescore do to replace their results; the check comes
    before any work. Arms may be added: the report then grows."""
    path = settings.out / "results.json"
    if settings.overwrite or not path.is_file():
        return
    saved = read_json_record(path)
    if saved is None:
        raise UserError(
            f"{path}: unreadable (cut short by a full disk or a crash?); delete it and rerun: the report is rebuilt "
            "from the cells on disk."
        )
    current = json.loads(json.dumps(json_safe(evaluation_settings(settings, finetune)), default=str))
    changed = changed_settings(saved, current)
    arms = {arm.label for arm in settings.arms}
    dropped = [label for label in saved.get("objectives") or {} if label not in arms]
    if dropped:  # an added arm extends the report; a dropped one would vanish from it
        changed.append(f"--objectives (this run leaves out {', '.join(dropped)})")
    if changed:
        raise UserError(
            f"{path} reports a comparison made with other {'; '.join(changed)}; rerun with those settings to "
            "resume it, pass --overwrite to evaluate with these (results.json, results.md and curve.png are "
            "replaced), or choose another --out."
        )


def changed_settings(saved: dict, current: dict) -> list[str]:
    """Each evaluation setting that differs, with its saved and new value (of a dict, the entries that differ), so
    that the refusal says what to pass to resume instead of only naming the setting. A fine-tuning setting only
    one side has is not compared (a report from another version may lack one or hold one more), as
    `refuse_changed_settings` does."""

    def shown(value: Any) -> str:
        return json.dumps(value, default=str)

    changed = []
    for key, value in current.items():
        old = saved.get(key)
        if key in _UNORDERED and isinstance(old, list) and isinstance(value, list):
            old, value = sorted(map(str, old)), sorted(map(str, value))
        if old == value:
            continue
        if isinstance(old, dict) and isinstance(value, dict):
            parts = [
                f"{key}.{name} (saved {shown(old.get(name))}, now {shown(value.get(name))})"
                for name in sorted(set(old) & set(value))
                if old[name] != value[name]
            ]
            changed.extend(parts)
        else:
            changed.append(f"{key} (saved {shown(old)}, now {shown(value)})")
    return changed
