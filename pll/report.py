"""What `electra rescore` writes: each list re-ranked by the fused score (as n-best JSON, and in its recognizer's
own layout), the WER table of each split with references, and report.json last."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from electra.core.files import write_json_atomically
from electra.pll.fusion import LengthNorm, fused_score, split_table
from electra.pll.nbest import Utterance, write_nbest
from electra.pll.nbest_formats import files_written, json_format, write_first_best
from electra.pll.rescore import has_reference_words

# One list to write: (split, input path, utterances, input format, output path).
Split = tuple[str, str, list[Utterance], str, Path]


def write_rescored(out_dir: Path, splits: Sequence[Split], summary: dict[str, Any], ln: LengthNorm) -> None:
    """Each list re-ranked by the fused score, its WER table where it has references, and report.json last.

    The previous run's report and lists are deleted first, so that a run stopped between two files leaves a
    folder without report.json (plainly unfinished), never a new list beside an old report."""
    weights = summary["weights"]
    besides = [f for _, _, _, fmt, target in splits for f in files_written(fmt, target.with_suffix(""))]
    for stale in [out_dir / "report.json", *(target for *_, target in splits), *besides]:
        stale.unlink(missing_ok=True)
    rows = []
    for name, path, utts, fmt, target in splits:
        combine = lambda h: fused_score(h, weights, ln)  # noqa: E731
        write_nbest(target, utts, json_format(fmt), None, combine=combine)
        entry = {"split": name, "file": str(path), "output": str(target), "utterances": len(utts)}
        first_best = write_first_best(fmt, target.with_suffix(""), utts, combine)
        if first_best is not None:
            entry.update(format=fmt, first_best=str(first_best))
        if all(u.ref is not None for u in utts) and has_reference_words(utts):
            table = split_table(utts, weights, ln)
            entry["wer"] = table
            entry.update(  # the first report's names, kept for scripts that read them
                wer_first_best=table["first_pass"], wer_rescored=table["fused"], wer_oracle=table["oracle"]
            )
            rows.append((name, Path(path).name, len(utts), table))
        else:
            why = "its references are all empty" if utts[0].ref is not None else "no references"
            print(f"{name}: {Path(path).name}: {why}, WER not computed")
        summary["splits"].append(entry)
    print_wer_table(rows)
    write_json_atomically(out_dir / "report.json", summary)
    for entry in summary["splits"]:
        also = f" and {entry['first_best']}" if "first_best" in entry else ""
        print(f"{entry['split']}: {entry['file']} -> {entry['output']}{also}")
    print(f"rescored lists and report.json written to {out_dir}")


def print_wer_table(rows: Sequence[tuple[str, str, int, dict[str, float]]]) -> None:
    """One row per split with references: its WER under each selector, as percentages."""
    if not rows:
        return
    columns = list(rows[0][3])
    print(f"{'split':<6} {'file':<28} {'utts':>5} " + " ".join(f"{c:>14}" for c in columns))
    for name, file, count, table in rows:
        cells = " ".join(f"{100 * table[c]:>13.2f}%" for c in columns)
        print(f"{name:<6} {file[:28]:<28} {count:>5} {cells}")
