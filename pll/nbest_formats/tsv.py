"""A tab-separated table with a header (`utt`, `text`, `score`, optional `ref` and numeric features) read into
utterances, and the re-ranked 1-best written back as a table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import write_text_atomically
from electra.pll.nbest import Hypothesis, Utterance
from electra.pll.nbest_formats.common import (
    numbered_lines,
    parse_number,
)


def read_tsv(path: Path, ref: Path | None) -> list[Utterance]:
    lines = numbered_lines(path, "n-best table", "a tab-separated table with a header utt, text, score")
    if not lines:
        raise UserError(f"{path}: holds no utterances.")
    header_line, header = lines[0][0], lines[0][1].split("\t")
    missing = [c for c in ("utt", "text", "score") if c not in header]
    if missing or len(set(header)) != len(header):
        why = f"no {missing[0]!r} column" if missing else "a column named twice"
        raise UserError(
            f"{path}:{header_line}: {why} in the header; the first line names the columns, tab-separated: utt, "
            "text, score, then any numeric fields (and ref, the transcript)."
        )
    numeric = [c for c in header if c not in ("utt", "text", "ref")]
    order: list[str] = []
    by_utt: dict[str, Utterance] = {}
    for number, line in lines[1:]:
        cells = line.split("\t")
        if len(cells) != len(header):
            raise UserError(
                f"{path}:{number}: {len(cells)} tab-separated cells for the header's {len(header)} columns; give "
                "every row every column (an empty text where the recognizer heard nothing)."
            )
        row = dict(zip(header, cells))
        uid = row["utt"].strip()
        if not uid:
            raise UserError(f"{path}:{number}: no utterance id in column 'utt'.")
        values = {c: parse_number(path, number, row[c], f"column {c!r}") for c in numeric}
        reference = row["ref"].strip() if "ref" in row else None
        if uid not in by_utt:
            order.append(uid)
            by_utt[uid] = Utterance(id=uid, ref=reference)
        elif by_utt[uid].ref != reference:
            raise UserError(
                f"{path}:{number}: utterance {uid!r} has another 'ref' here than on its first row; give each "
                "utterance one reference."
            )
        hyp = Hypothesis(
            text=row["text"].strip(),
            score=values.pop("score"),
            key=f"line {number}",
            extra=values,
        )
        by_utt[uid].hyps.append(hyp)
    return [by_utt[u] for u in order]


def write_tsv(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    path = tsv_best(stem)
    with_ref = all(u.ref is not None for u, _, _ in chosen)
    rows = ["utt\ttext\tscore" + ("\tref" if with_ref else "")]
    for utt, hyp, score in chosen:
        rows.append(f"{utt.id}\t{hyp.text}\t{score!r}" + (f"\t{utt.ref}" if with_ref else ""))
    write_text_atomically(path, "\n".join(rows) + "\n")
    return path


def tsv_best(stem: Path) -> Path:
    return stem.with_name(stem.name + ".tsv")
