"""Re-rank n-best lists by acoustic score + λ·PLL, with λ chosen on dev (Salazar et al.'s recipe)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from electra.errors import UserError
from pll.nbest import Utterance, combined_score
from pll.wer import corpus_wer, edit_distance, normalize_words

DEFAULT_LAMBDAS = tuple(round(0.05 * i, 2) for i in range(1, 21))  # 0.05, 0.10, ..., 1.00


def attach_plls(
    utt_lists: Sequence[list[Utterance]], score_texts: Callable[[list[str]], list[float]]
) -> None:
    """Score every distinct hypothesis text once and store its PLL on the hypotheses."""
    texts = sorted({h.text for utts in utt_lists for u in utts for h in u.hyps})
    plls = dict(zip(texts, score_texts(texts)))
    for utts in utt_lists:
        for utt in utts:
            for hyp in utt.hyps:
                hyp.pll = plls[hyp.text]


def first_best(utt: Utterance) -> str:
    """The first pass's choice: highest acoustic score (ties: the earlier hypothesis)."""
    return max(enumerate(utt.hyps), key=lambda p: (p[1].score, -p[0]))[1].text


def rescored_best(utt: Utterance, lam: float) -> str:
    return max(enumerate(utt.hyps), key=lambda p: (combined_score(p[1], lam), -p[0]))[1].text


def oracle_best(utt: Utterance) -> str:
    ref = normalize_words(utt.ref or "")
    return min(utt.hyps, key=lambda h: edit_distance(ref, normalize_words(h.text))).text


@dataclass
class SplitReport:
    name: str
    utterances: int
    wer_first_best: float
    wer_rescored: float
    wer_oracle: float


def split_report(name: str, utts: list[Utterance], lam: float) -> SplitReport:
    refs = [u.ref or "" for u in utts]
    return SplitReport(
        name=name,
        utterances=len(utts),
        wer_first_best=corpus_wer(refs, [first_best(u) for u in utts]),
        wer_rescored=corpus_wer(refs, [rescored_best(u, lam) for u in utts]),
        wer_oracle=corpus_wer(refs, [oracle_best(u) for u in utts]),
    )


def require_refs(utts: list[Utterance], source: str) -> None:
    for utt in utts:
        if utt.ref is None:
            raise UserError(
                f"{source}:{utt.id}: no 'ref'; WER (and tuning λ on dev) needs a reference per utterance."
            )


def choose_lambda(
    dev: list[Utterance], lambdas: Sequence[float] = DEFAULT_LAMBDAS
) -> tuple[float, dict[float, float]]:
    """The λ with the lowest dev WER (ties go to the smaller λ, the smaller change to the first pass)."""
    if not lambdas:
        raise UserError("no λ values to try; pass at least one to --lambdas.")
    refs = [u.ref or "" for u in dev]
    table = {lam: corpus_wer(refs, [rescored_best(u, lam) for u in dev]) for lam in lambdas}
    best = min(sorted(table), key=lambda lam: table[lam])
    return best, table
