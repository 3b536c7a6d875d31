"""Re-rank n-best lists by acoustic score + λ·PLL, with λ chosen on dev (Salazar et al.'s recipe)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from electra.core.errors import UserError
from electra.pll.nbest import Utterance, combined_score
from electra.pll.score_files import TextScore
from electra.pll.wer import edit_distance, wer_words

DEFAULT_LAMBDAS = tuple(round(0.05 * i, 2) for i in range(1, 21))  # 0.05, 0.10, ..., 1.00


def unscored_texts(
    utt_lists: Sequence[list[Utterance]], known: Mapping[str, TextScore] | None = None
) -> list[str]:
    """The distinct hypothesis texts of every list that `known` (saved scores) has no PLL for, sorted: each is
    scored once, however many hypotheses share it."""
    return sorted({h.text for utts in utt_lists for u in utts for h in u.hyps} - (known or {}).keys())


def attach_plls(
    utt_lists: Sequence[list[Utterance]],
    known: Mapping[str, TextScore] | None = None,
    scored: Mapping[str, TextScore] | None = None,
    scorer: str | None = None,
) -> None:
    """Store a PLL on every hypothesis: from `scored` (the texts scored now) where it has the text, else from
    `known` (saved scores).

    Each hypothesis also records who gave its PLL: `scorer` (the identity of the model that scored `scored`) for
    the texts scored now, the saved files' record (`electra.pll.score_files.SavedScores.scorer`) for the others;
    the caller has checked that the two agree, so a list written back says which model its PLLs are from."""
    saved_by = getattr(known, "scorer", None)
    known, scored = dict(known or {}), dict(scored or {})
    missing = [text for text in unscored_texts(utt_lists, known) if text not in scored]
    if missing:
        raise UserError(
            f"{len(missing)} hypotheses have no saved score (first: {missing[0]!r}); pass --model to "
            "score them, or --scores files that cover every hypothesis."
        )
    for utts in utt_lists:
        for utt in utts:
            for hyp in utt.hyps:
                fresh = hyp.text in scored
                hyp.pll, hyp.pieces = scored[hyp.text] if fresh else known[hyp.text]
                hyp.scorer = scorer if fresh else saved_by


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
