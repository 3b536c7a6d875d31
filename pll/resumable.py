"""Scoring that saves as it goes, so a stopped run continues where it stopped.

Masked-LM PLL of a large file or of every hypothesis of a few thousand utterances takes hours, and a scheduler's
time limit or a Ctrl-C may end it at any point. Scores are therefore appended, a chunk at a time, to
OUTPUT.unfinished; `--resume` reads back what is there and scores only the rest, and the file becomes OUTPUT (or is
deleted once its scores are kept elsewhere) when the work is whole. Every saved line names the scorer that made it,
so scores of two models, or of another input, are never mixed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from electra.core.errors import UserError
from electra.core.files import write_text_atomically

if TYPE_CHECKING:
    from electra.pll.scoring import Scorer, SentenceScore

# Texts scored between two saves: small enough that a kill costs minutes, large enough that batches stay full.
SCORE_CHUNK = 1024


def unfinished_path(output: str | Path) -> Path:
    """Where the scores meant for `output` are kept while the run is not whole: OUTPUT.unfinished beside it."""
    return Path(output).with_name(f"{Path(output).name}.unfinished")


def check_unfinished(output: str | Path, resume: bool, overwrite: bool) -> None:
    """Run before the model loads: an earlier run's unfinished scores are continued (`resume`), deleted
    (`overwrite`) or named in a refusal, so a new run neither appends to them nor throws away hours of scoring
    unasked."""
    unfinished = unfinished_path(output)
    if resume or not unfinished.exists():
        return
    if overwrite:
        unfinished.unlink()
        return
    raise UserError(
        f"{unfinished} holds the scores of an interrupted run; pass --resume to continue it, or --overwrite to "
        "start over."
    )


def append_lines(handle: IO[str], text: str) -> None:
    """Append `text` and flush it, so that what a kill leaves on disk is every chunk scored so far."""
    handle.write(text)
    handle.flush()


def sentence_record(number: int, res: SentenceScore, identity: str | None) -> dict[str, Any]:
    """One `score --output` JSON line: a sentence's score with its input line number and the scorer that made it."""
    return {
        "text": res.text,
        "line": number,
        "pll": res.pll,
        "pieces": res.pieces,
        "tokens": res.tokens,
        "words": res.words,
        "truncated": res.truncated,
        "pll_scorer": identity,
    }


def score_sentences_saving(
    scorer: Scorer, numbered: Sequence[tuple[int, str]], output: str, resume: bool
) -> tuple[list[dict[str, Any]], str | None]:
    """Score `numbered` (input line number, sentence) in chunks, appending each chunk's records to
    OUTPUT.unfinished and renaming it to `output` once whole; with `resume`, the records saved there are checked
    against the input and only the sentences after them are scored.

    Returns every record and, when the disk refused a write, the message the command ends with: the scoring goes
    on (its records still reach standard output) and the unfinished file keeps what was written."""
    unfinished = unfinished_path(output)
    records = resumed_records(unfinished, numbered, scorer.identity) if resume else []
    if len(numbered) > SCORE_CHUNK:
        print(
            f"saving scores to {unfinished} as they come ({SCORE_CHUNK} sentences at a time); if stopped, "
            "rerun with --resume to continue",
            file=sys.stderr,
        )
    failed = None
    with open(unfinished, "a", encoding="utf-8") as handle:
        for start in range(len(records), len(numbered), SCORE_CHUNK):
            chunk = numbered[start : start + SCORE_CHUNK]
            results = scorer.score([s for _, s in chunk])
            new = [sentence_record(number, res, scorer.identity) for (number, _), res in zip(chunk, results)]
            records.extend(new)
            if failed is None:
                try:
                    append_lines(handle, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in new))
                except OSError as exc:  # a disk that filled up: keep scoring, for standard output
                    failed = (
                        f"--output {output}: could not be written ({exc.strerror or exc}); the scores are on "
                        f"standard output above, and the first {start} are kept in {unfinished}: free some space "
                        "and rerun with --resume, or choose another --output."
                    )
            if len(numbered) > SCORE_CHUNK:
                print(f"scored {len(records)} of {len(numbered)} sentences", file=sys.stderr)
    if failed is None:
        os.replace(unfinished, output)
    return records, failed


def saved_lines(unfinished: Path, identity: str | None) -> list[dict[str, Any]]:
    """The JSON lines an interrupted run saved in `unfinished`, each made by the scorer `identity` (else refused in
    one line). A last line cut short by the kill is dropped, and the file truncated to the whole lines, so that
    what is appended next starts a line of its own."""
    if not unfinished.exists():
        return []
    records, kept = [], 0
    with open(unfinished, "rb") as handle:
        for raw in handle:
            try:
                record = json.loads(raw)
            except ValueError:
                break  # cut short by the kill: scored again
            if not raw.endswith(b"\n") or not isinstance(record, dict):
                break
            if record.get("pll_scorer") != identity:
                raise UserError(
                    f"--resume: {unfinished} was scored by {record.get('pll_scorer')}, not by {identity}; resume "
                    "with that model and --method, or pass --overwrite to start over."
                )
            records.append(record)
            kept += len(raw)
    os.truncate(unfinished, kept)
    return records


def resumed_records(
    unfinished: Path, numbered: Sequence[tuple[int, str]], identity: str | None
) -> list[dict[str, Any]]:
    """The sentence records an interrupted run saved, each checked against the input line it claims to score: a
    resume with another input is refused rather than mixed with it."""
    records = saved_lines(unfinished, identity)
    for index, record in enumerate(records):
        if index >= len(numbered) or (record.get("line"), record.get("text")) != tuple(numbered[index]):
            raise UserError(
                f"--resume: {unfinished} line {index + 1} holds the score of another input (input line "
                f"{record.get('line')}: {record.get('text')!r}); resume with the input it was made from, or "
                "pass --overwrite to start over."
            )
    print(
        f"--resume: {len(records)} of {len(numbered)} sentences scored earlier ({unfinished})",
        file=sys.stderr,
    )
    return records


def _resumed_texts(
    unfinished: Path, scorer: Scorer, texts: Sequence[str]
) -> dict[str, tuple[float, int, int]]:
    """Text -> (pll, pieces, word count) an interrupted run saved, each a text of this list (else refused)."""
    wanted = set(texts)
    scores: dict[str, tuple[float, int, int]] = {}
    for record in saved_lines(unfinished, scorer.identity):
        if record.get("text") not in wanted or not {"pll", "pieces", "word_count"} <= record.keys():
            raise UserError(
                f"--resume: {unfinished} holds the score of {record.get('text')!r}, which this list does not "
                "hold; resume with the list it was made from, or pass --overwrite to start over."
            )
        scores[record["text"]] = (record["pll"], record["pieces"], record["word_count"])
    print(f"--resume: {len(scores)} of {len(texts)} texts scored earlier ({unfinished})", file=sys.stderr)
    return scores


def score_texts_saving(
    scorer: Scorer, texts: Sequence[str], output: str | Path | None, resume: bool
) -> dict[str, tuple[float, int, int]]:
    """Text -> (pll, pieces, word count) for the distinct texts of n-best lists, scored in chunks. With an
    `output`, each chunk's scores are appended to OUTPUT.unfinished as they come and, with `resume`, the texts
    saved there are not scored again. A write the disk refuses stops the saving with a warning, not the scoring:
    the caller still has every score to write or print."""
    unfinished = unfinished_path(output) if output else None
    scores = _resumed_texts(unfinished, scorer, texts) if resume and unfinished is not None else {}
    todo = [text for text in texts if text not in scores]
    if unfinished is not None:  # rescore's --output-dir is made once there is work to save in it
        unfinished.parent.mkdir(parents=True, exist_ok=True)
    handle = open(unfinished, "a", encoding="utf-8") if unfinished is not None else None
    try:
        for start in range(0, len(todo), SCORE_CHUNK):
            lines = []
            for res in scorer.score(todo[start : start + SCORE_CHUNK]):
                scores[res.text] = (res.pll, res.pieces, res.word_count)
                record = {
                    "text": res.text,
                    "pll": res.pll,
                    "pieces": res.pieces,
                    "word_count": res.word_count,
                }
                lines.append(json.dumps({**record, "pll_scorer": scorer.identity}, ensure_ascii=False) + "\n")
            if handle is not None:
                try:
                    append_lines(handle, "".join(lines))
                except OSError as exc:  # a full disk: keep scoring; the list goes to stdout if unsaved
                    print(f"warning: {unfinished}: no longer saved ({exc.strerror or exc})", file=sys.stderr)
                    handle.close()
                    handle = None
            if len(todo) > SCORE_CHUNK:
                print(f"scored {len(scores)} of {len(texts)} distinct texts", file=sys.stderr)
    finally:
        if handle is not None:
            handle.close()
    return scores


def keep_plls(path: Path, scores: Mapping[str, tuple[float, int | None]], identity: str | None) -> None:
    """Every PLL of one feature written whole to `path`, in the JSON lines `score --output` writes (so `rescore
    --scores` reads it); the unfinished copy the scoring appended to is deleted once this is on disk."""
    lines = "".join(
        json.dumps({"text": text, "pll": pll, "pieces": pieces, "pll_scorer": identity}, ensure_ascii=False)
        + "\n"
        for text, (pll, pieces) in scores.items()
    )
    write_text_atomically(path, lines)
    unfinished_path(path).unlink(missing_ok=True)
