"""NeMo's beams file (`preds_out_width{W}_...tsv`) with its manifest read into utterances, and the re-ranked
1-best written back as a manifest with `pred_text`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import write_text_atomically
from electra.pll.nbest import Hypothesis, Utterance
from electra.pll.nbest_formats.common import (
    numbered_lines,
    parse_number,
    read_manifest,
)

NEMO_NAME = re.compile(r"preds_out_width(\d+)")


def read_nemo(path: Path, ref: Path | None) -> list[Utterance]:
    rows = []
    for number, line in numbered_lines(path, "NeMo beams file", "NeMo's `text<TAB>score` lines"):
        text, tab, raw = line.rpartition("\t")
        if not tab:
            raise UserError(
                f"{path}:{number}: no tab-separated score after the hypothesis; NeMo writes each beam as "
                "`text<TAB>score`: give every line its score."
            )
        rows.append((number, text.strip(), parse_number(path, number, raw, "the beam's score")))
    manifest = read_manifest(ref) if ref is not None else None
    widths = NEMO_NAME.findall(path.name)  # the last: a re-ranked copy keeps the name it was made from
    match = int(widths[-1]) if widths else None
    if manifest is None and match is None:
        raise UserError(
            f"{path}: the beam width cannot be told without the manifest; pass the manifest the beams were "
            "decoded from as --dev-ref/--test-ref."
        )
    if manifest is None:
        width = match
        named = [(str(i + 1), {}) for i in range(-(-len(rows) // width))]
    else:
        width = match if match else max(len(rows) // max(len(manifest), 1), 1)
        named = [(uid, entry) for _, uid, entry in manifest]
        if len(rows) < width * len(manifest):
            number = manifest[len(rows) // width][0]
            raise UserError(
                f"{ref}:{number}: utterance {manifest[len(rows) // width][1]!r} has no beams (or too few) in "
                f"{path}, which holds {len(rows)} lines for {len(manifest)} utterances of {width} beams; give "
                "the manifest the beams were decoded from (the same utterances, in order)."
            )
    if len(rows) > width * len(named):  # more beams than the manifest's utterances take
        raise UserError(
            f"{path}:{rows[width * len(named)][0]}: beams beyond the {len(named)} utterances of {ref} "
            f"({width} each); give the manifest and the beams file of one decoding."
        )
    if len(rows) < width * len(named):  # no manifest: the last utterance is short of beams
        raise UserError(
            f"{path}:{rows[-1][0]}: the last utterance has {len(rows) % width} of its {width} beams (width{width} "
            "in the file's name); give the whole beams file NeMo wrote, or its manifest as --dev-ref/--test-ref."
        )
    utts = []
    for index, (uid, entry) in enumerate(named):
        beams = rows[index * width : (index + 1) * width]
        hyps = [Hypothesis(text=text, score=score, key=f"line {n}") for n, text, score in beams]
        ref_text = entry.get("text") if entry else None
        extra = {k: v for k, v in entry.items() if k != "text"}
        utts.append(
            Utterance(
                id=uid, ref=ref_text.strip() if isinstance(ref_text, str) else None, hyps=hyps, extra=extra
            )
        )
    return utts


def write_nemo(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    """The width-1 beams file, and, where the utterances came from a manifest, the manifest with `pred_text`
    (what NeMo's speech_to_text_eval.py scores)."""
    path = nemo_best(stem)
    if all("audio_filepath" in u.extra for u, _, _ in chosen):
        lines = [
            json.dumps({**u.extra, "text": u.ref or "", "pred_text": h.text}, ensure_ascii=False)
            for u, h, _ in chosen
        ]
        write_text_atomically(nemo_manifest(stem), "".join(f"{x}\n" for x in lines))
    write_text_atomically(path, "".join(f"{h.text}\t{s!r}\n" for _, h, s in chosen))
    return path


def nemo_manifest(stem: Path) -> Path:
    return stem.with_name(stem.name + ".manifest.json")


def nemo_best(stem: Path) -> Path:
    return stem.with_name(stem.name + ".preds_out_width1.tsv")
