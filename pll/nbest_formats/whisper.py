"""Whisper-style JSON lines ({id, sequences, sequences_scores, ref?}) read into utterances, and the re-ranked
1-best written back as JSON lines.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.files import write_text_atomically
from electra.pll.nbest import Hypothesis, Utterance
from electra.pll.nbest_formats.common import (
    numbered_lines,
)


def read_whisper(path: Path, ref: Path | None) -> list[Utterance]:
    utts = []
    seen: dict[str, int] = {}
    for number, line in numbered_lines(path, "n-best JSON lines", "one JSON object per utterance"):
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            raise UserError(
                f'{where}: not a JSON object; write one utterance a line: {{"id", "sequences", "sequences_scores"}}.'
            )
        texts, scores = record.get("sequences"), record.get("sequences_scores")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise UserError(
                f"{where}: 'sequences' must be the list of decoded texts (processor.batch_decode)."
            )
        if not texts:
            raise UserError(
                f"{where}: an utterance with no hypotheses ('sequences' is empty); give it at least one, or leave "
                "the line out."
            )
        if not isinstance(scores, list) or len(scores) != len(texts):
            count = len(scores) if isinstance(scores, list) else 0
            raise UserError(
                f"{where}: {len(texts)} sequences but {count} sequences_scores; every hypothesis needs its score "
                "(generate's sequences_scores, with output_scores=True)."
            )
        uid = str(record.get("id", number))
        if uid in seen:
            raise UserError(
                f"{where}: utterance id {uid!r} is also on line {seen[uid]}; give each utterance once."
            )
        seen[uid] = number
        features = {
            k: v
            for k, v in record.items()
            if isinstance(v, list) and k not in ("sequences", "sequences_scores")
        }
        for name, values in [("sequences_scores", scores), *features.items()]:
            if len(values) != len(texts):
                raise UserError(
                    f"{where}: {name!r} has {len(values)} values for {len(texts)} sequences; give one each."
                )
            for value in values:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise UserError(
                        f"{where}: {name!r} holds {json.dumps(value)}, not a finite number; give one number per "
                        "sequence."
                    )
        hyps = [
            Hypothesis(
                text=text.strip(),
                score=float(scores[i]),
                extra={name: float(values[i]) for name, values in features.items()},
            )
            for i, text in enumerate(texts)
        ]
        reference = record.get("ref")
        if reference is not None and not isinstance(reference, str):
            raise UserError(f"{where}: 'ref' must be a string (the utterance's transcript).")
        extra = {
            k: v
            for k, v in record.items()
            if k not in ("id", "ref", "sequences", "sequences_scores", *features)
        }
        utts.append(
            Utterance(
                id=uid, ref=reference.strip() if reference is not None else None, hyps=hyps, extra=extra
            )
        )
    return utts


def write_whisper(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    path = whisper_best(stem)
    lines = []
    for utt, hyp, score in chosen:
        record: dict[str, Any] = {"id": utt.id, "sequences": [hyp.text], "sequences_scores": [score]}
        if utt.ref is not None:
            record["ref"] = utt.ref
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    write_text_atomically(path, "".join(lines))
    return path


def whisper_best(stem: Path) -> Path:
    return stem.with_name(stem.name + ".jsonl")
