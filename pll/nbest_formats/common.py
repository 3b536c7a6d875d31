"""The pieces every n-best reader and writer shares: numbered lines, Kaldi-style keyed lines, scores (ESPnet writes
them as `tensor(-3.25)`), NeMo manifests, and keyed text written back.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.pll.nbest import read_utf8

_TENSOR = re.compile(r"tensor\(\s*([^,)]+)")


def numbered_lines(path: Path, what: str, expected: str) -> list[tuple[int, str]]:
    """(line number, line) of a text file, blank lines left out; numbered as editors number them."""
    text = read_utf8(path, what, expected)
    lines = text.split("\n")
    return [(n, line.rstrip("\r")) for n, line in enumerate(lines, start=1) if line.strip()]


def keyed_lines(path: Path, what: str, expected: str) -> dict[str, tuple[int, str]]:
    """A Kaldi-style `KEY value...` file: key -> (line number, the rest of the line, stripped)."""
    out: dict[str, tuple[int, str]] = {}
    for number, line in numbered_lines(path, what, expected):
        key, *rest_of_line = line.split(None, 1)  # Kaldi separates the key by a space; tabs are read alike
        rest = rest_of_line[0] if rest_of_line else ""
        if key in out:
            raise UserError(
                f"{path}:{number}: key {key!r} appears twice (first on line {out[key][0]}); give every key once."
            )
        out[key] = (number, rest.strip())
    return out


def parse_number(path: Path, number: int, raw: str, what: str) -> float:
    """A finite number read from a file, or one line naming FILE:LINE; ESPnet's `tensor(-3.25, ...)` too."""
    match = _TENSOR.match(raw.strip())
    try:
        value = float((match.group(1) if match else raw).strip("[] "))
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        shown = repr(raw.strip()) if raw.strip() else "empty"
        raise UserError(
            f"{path}:{number}: {what} is {shown}, not a finite number; give a number on every line "
            "(a log score or cost), e.g. -12.5."
        )
    return value


def is_number_text(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return bool(_TENSOR.match(raw))
    return True


def keyed_text(rows: Sequence[tuple[str, str]]) -> str:
    return "".join(f"{key} {value}".rstrip() + "\n" for key, value in rows)


def read_manifest(path: Path) -> list[tuple[int, str, dict[str, Any]]]:
    """(line, utterance id, entry) of a NeMo manifest: JSON lines with `text`; the id is the audio file's name
    without its suffix (the line number where there is no `audio_filepath`)."""
    entries = []
    for number, line in numbered_lines(path, "NeMo manifest", "JSON lines with audio_filepath and text"):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            entry = None
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
            raise UserError(
                f"{path}:{number}: not a manifest line (a JSON object with 'audio_filepath' and a string 'text')."
            )
        audio = entry.get("audio_filepath")
        uid = Path(audio).stem if isinstance(audio, str) and audio else str(number)
        entries.append((number, uid, entry))
    ids: dict[str, int] = {}
    for number, uid, _ in entries:
        if uid in ids:
            raise UserError(
                f"{path}:{number}: utterance {uid!r} (its audio file's name) is also on line {ids[uid]}; give "
                "every audio file a distinct name."
            )
        ids[uid] = number
    return entries
