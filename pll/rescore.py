"""Re-rank n-best lists by acoustic score + λ·PLL, with λ chosen on dev (Salazar et al.'s recipe)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.core.errors import UserError
from electra.pll.nbest import Utterance, combined_score, load_json, looks_like_nbest, parse_nbest, read_utf8
from electra.pll.wer import edit_distance, wer_words

DEFAULT_LAMBDAS = tuple(round(0.05 * i, 2) for i in range(1, 21))  # 0.05, 0.10, ..., 1.00

TextScore = tuple[float, "int | None"]  # (PLL, word pieces it sums over; None when the source did not say)


def attach_plls(
    utt_lists: Sequence[list[Utterance]],
    score_texts: Callable[[list[str]], Sequence[TextScore]] | None,
    known: Mapping[str, TextScore] | None = None,
    scorer: str | None = None,
) -> int:
    """Store a PLL on every hypothesis: from `known` (saved scores) where it has the text, else by scoring each
    distinct remaining text once. Returns how many texts were scored.

    Each hypothesis also records who gave its PLL: `scorer` (the identity of what `score_texts` runs) for the texts
    scored now, the saved files' record (`SavedScores.scorer`) for the others; the caller has checked that the two
    agree, so a list written back says which model its PLLs are from."""
    saved_by = getattr(known, "scorer", None)
    known = dict(known or {})
    missing = sorted({h.text for utts in utt_lists for u in utts for h in u.hyps} - known.keys())
    fresh: set[str] = set()
    if missing:
        if score_texts is None:
            raise UserError(
                f"{len(missing)} hypotheses have no saved score (first: {missing[0]!r}); pass --model to "
                "score them, or --scores files that cover every hypothesis."
            )
        known.update(zip(missing, score_texts(missing)))
        fresh = set(missing)
    for utts in utt_lists:
        for utt in utts:
            for hyp in utt.hyps:
                hyp.pll, hyp.pieces = known[hyp.text]
                hyp.scorer = scorer if hyp.text in fresh else saved_by
    return len(missing)


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


def first_best(utt: Utterance) -> str:
    """The first pass's choice: highest acoustic score (ties: the earlier hypothesis)."""
    return max(enumerate(utt.hyps), key=lambda p: (p[1].score, -p[0]))[1].text


def rescored_index(utt: Utterance, lam: float, ln_alpha: float = 0.0, ln_type: str = "gnmt") -> int:
    """Position of the best hypothesis by score + λ·PLL (ties: the earlier hypothesis)."""
    scores = [combined_score(h, lam, ln_alpha, ln_type) for h in utt.hyps]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def rescored_best(utt: Utterance, lam: float, ln_alpha: float = 0.0, ln_type: str = "gnmt") -> str:
    return utt.hyps[rescored_index(utt, lam, ln_alpha, ln_type)].text


def oracle_best(utt: Utterance) -> str:
    ref = wer_words(utt.ref or "")
    return min(utt.hyps, key=lambda h: edit_distance(ref, wer_words(h.text))).text


@dataclass
class EditTable:
    """Word edits of every hypothesis against its utterance's reference, counted once.

    The WER of any choice of one hypothesis per utterance is then a sum over the table, so a weight search that
    tries thousands of choices aligns each hypothesis with its reference only once. Equal to `corpus_wer`."""

    edits: list[list[int]]
    words: int

    @classmethod
    def of(cls, utts: Sequence[Utterance]) -> EditTable:
        refs = [wer_words(u.ref or "") for u in utts]
        edits = [[edit_distance(ref, wer_words(h.text)) for h in u.hyps] for ref, u in zip(refs, utts)]
        return cls(edits, sum(len(ref) for ref in refs))

    def wer(self, choices: Sequence[int]) -> float:
        total = sum(row[i] for row, i in zip(self.edits, choices))
        return total / self.words if self.words else float(total > 0)

    def oracle(self) -> float:
        return self.wer([min(range(len(row)), key=row.__getitem__) for row in self.edits])


@dataclass
class SplitReport:
    name: str
    utterances: int
    wer_first_best: float
    wer_rescored: float
    wer_oracle: float


def split_report(
    name: str, utts: list[Utterance], lam: float, ln_alpha: float = 0.0, ln_type: str = "gnmt"
) -> SplitReport:
    table = EditTable.of(utts)
    first = [max(range(len(u.hyps)), key=lambda i, u=u: (u.hyps[i].score, -i)) for u in utts]
    return SplitReport(
        name=name,
        utterances=len(utts),
        wer_first_best=table.wer(first),
        wer_rescored=table.wer([rescored_index(u, lam, ln_alpha, ln_type) for u in utts]),
        wer_oracle=table.oracle(),
    )


def require_refs(utts: list[Utterance], source: str) -> None:
    for utt in utts:
        if utt.ref is None:
            raise UserError(
                f"{source}:{utt.id}: no 'ref'; WER (and tuning λ on dev) needs a reference per utterance."
            )
    # WER is edits per reference word: with none, every setting scored 100% (or 0%) and the weights meant nothing.
    if not has_reference_words(utts):
        raise UserError(
            f"{source}: every 'ref' is empty, so there are no reference words to tune the weights on; give the "
            "dev list the transcripts of its utterances."
        )


def has_reference_words(utts: Sequence[Utterance]) -> bool:
    """Whether the references hold a word: the WER's denominator is not zero."""
    return any(wer_words(u.ref or "") for u in utts)


def check_test_refs(utts: list[Utterance], source: str) -> None:
    """A test list has a reference for every utterance or for none (a blind test set): with some missing, its WER
    was left out whole, said as "no references", after all the scoring."""
    missing = [u.id for u in utts if u.ref is None]
    if missing and len(missing) < len(utts):
        raise UserError(
            f"{source}:{missing[0]}: no 'ref', but {len(utts) - len(missing)} of its {len(utts)} utterances have "
            "one; give every utterance its reference (an empty 'ref' where nothing was said), or none at all."
        )


def choose_lambda(
    dev: list[Utterance],
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    ln_alpha: float = 0.0,
    ln_type: str = "gnmt",
) -> tuple[float, dict[float, float]]:
    """The λ with the lowest dev WER (ties go to the smaller λ, the smaller change to the first pass). `lambdas`
    holds at least one λ: `electra.pll.rescore_inputs.parse_lambdas` refuses an empty --lambdas."""
    edits = EditTable.of(dev)
    table = {lam: edits.wer([rescored_index(u, lam, ln_alpha, ln_type) for u in dev]) for lam in lambdas}
    best = min(sorted(table), key=lambda lam: table[lam])
    return best, table
