"""The PLL scores `electra score` saves, read back for `electra rescore --scores` (and `--resume`'s saved PLLs):
scored n-best JSON, or JSON lines {text, pll, pieces, pll_scorer}. Read strictly, as every file a user names is: a
line that is not such a record, a PLL that is not a finite number, a piece count that is not a count, one text
with two PLLs, or files of two scorers is one `UserError` naming the file (and line) and the fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from electra.core.errors import UserError
from electra.pll.nbest import load_json, looks_like_nbest, parse_nbest, read_utf8

TextScore = tuple[float, "int | None"]  # (PLL, word pieces it sums over; None when the source did not say)


class SavedScores(dict):
    """text -> (PLL, pieces) read from `--scores` files, with the one `scorer` that gave them all (None when the
    files predate that record) and the files read, for messages."""

    def __init__(self, scores: dict[str, TextScore], scorer: str | None, paths: list[Path]):
        super().__init__(scores)
        self.scorer = scorer
        self.paths = paths


def saved_scores(paths: Sequence[str | Path]) -> SavedScores:
    """text -> (PLL, pieces) from files `electra score` wrote: scored n-best JSON, or JSON lines {text, pll, pieces}.

    The same text with two different PLLs (two models, two methods) is an error, not a silent pick; so are files
    whose records name two scorers even where they share no text (dev scored by one model, test by another: the
    weight tuned on one would be applied to the other), and a file with no record beside one with a record (the
    two cannot be shown to be the same model). Files that all lack the record (written before it existed) are read
    as before."""
    scores: dict[str, TextScore] = {}
    origin: dict[str, Path] = {}
    scorers: dict[Path, str | None] = {}
    for raw in paths:
        path = Path(raw)
        text = read_utf8(path, "scores file", "what `electra score` wrote")
        found = _scores_in(path, text)
        scorers[path] = _one_scorer(path, {by for _, _, by in found})
        for sentence, value, _ in found:
            if sentence in scores and abs(scores[sentence][0] - value[0]) > 1e-4 * max(1.0, abs(value[0])):
                raise UserError(
                    f"{path}: {sentence!r} has PLL {value[0]:.4f} here but {scores[sentence][0]:.4f} in "
                    f"{origin[sentence]}; scores from different models cannot be mixed."
                )
            scores[sentence], origin[sentence] = value, path
    recorded = [(path, by) for path, by in scorers.items() if by is not None]
    other = [(path, by) for path, by in recorded if by != recorded[0][1]]
    if other:
        (a, by_a), (b, by_b) = recorded[0], other[0]
        raise UserError(
            f"{b} was scored by {by_b} but {a} by {by_a}; PLLs of two models (or methods) cannot share one "
            "weight: score every list with the same --model."
        )
    unrecorded = [path for path, by in scorers.items() if by is None]
    if recorded and unrecorded:
        a, by_a = recorded[0]
        raise UserError(
            f"{unrecorded[0]} does not say which model scored it (written before `electra score` recorded "
            f"'pll_scorer'), but {a} was scored by {by_a}; score {unrecorded[0]} again with that model."
        )
    return SavedScores(scores, recorded[0][1] if recorded else None, [Path(p) for p in paths])


def _one_scorer(path: Path, found: set[str | None]) -> str | None:
    """The scorer a file's records name: one, or none at all; anything else is a file put together by hand."""
    if len(found) > 1:
        named = sorted(by for by in found if by is not None)
        also = " and some no scorer" if None in found else ""
        raise UserError(
            f"{path}: its PLLs name {len(named)} scorers ({', '.join(named)}){also}; a scores file must come "
            "from one `electra score` run."
        )
    return next(iter(found), None)


def _scores_in(path: Path, text: str) -> list[tuple[str, TextScore, str | None]]:
    """(text, (PLL, pieces), scorer) of every score in a file; scorer None where the file does not say."""
    if looks_like_nbest(text):
        utts, _ = parse_nbest(path, load_json(path, text))
        found = [(h.text, (h.pll, h.pieces), h.scorer) for u in utts for h in u.hyps if h.pll is not None]
        if not found:
            raise UserError(
                f"{path}: an n-best list without 'pll' fields; score it first with `electra score`."
            )
        return found  # type: ignore[return-value]
    found = []
    # By "\n" alone, as JSON lines are: str.splitlines also breaks at U+2028 and other separators that a scored
    # sentence may hold (`electra score` writes them unescaped).
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            entry = (str(record["text"]).strip(), (float(record["pll"]), record.get("pieces")))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise UserError(
                f"{path}:{number}: not a JSON line with 'text' and 'pll' (what `electra score --output` writes)."
            ) from None
        _check_saved_values(path, number, record)
        scorer = record.get("pll_scorer")
        found.append((*entry, scorer if isinstance(scorer, str) else None))
    if not found:
        raise UserError(f"{path}: holds no scores.")
    return found


def _check_saved_values(path: Path, number: int, record: dict) -> None:
    """A saved PLL must be a finite number and its piece count, where given, a count: NaN or Infinity (which
    Python's JSON reads) became NaN weights and `"combined": NaN` in every list written, `true` read as 1.0, and a
    piece count of "3" or -5 stopped --ln with a TypeError or ZeroDivisionError traceback."""
    pll, pieces = record["pll"], record.get("pieces")
    if isinstance(pll, bool) or not isinstance(pll, (int, float)) or not math.isfinite(pll):
        raise UserError(
            f"{path}:{number}: 'pll' is {json.dumps(pll)}, not a finite number; score that text again with "
            "`electra score`."
        )
    if pieces is not None and (isinstance(pieces, bool) or not isinstance(pieces, int) or pieces < 0):
        raise UserError(
            f"{path}:{number}: 'pieces' is {json.dumps(pieces)}, not a count of word pieces (0 or more); "
            "score that text again with `electra score`."
        )
