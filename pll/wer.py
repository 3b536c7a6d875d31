"""Word error rate, computed by jiwer (the maintained library; rapidfuzz underneath) on lowercased words."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jiwer

# the same WER as a local `evaluate` module, for `evaluate.load(str(METRIC_SCRIPT))` in an installed copy
METRIC_SCRIPT = Path(__file__).with_name("wer_metric.py")


def wer_words(text: str) -> list[str]:
    """The words WER counts: lowercased and split on whitespace (n-best lists are lowercase, unpunctuated words).
    Not `electra.pll.ngram.normalize_words`, the "words" text form a scorer reads, which also splits punctuation."""
    return text.lower().split()


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Minimum substitutions + deletions + insertions turning the word list `ref` into `hyp`."""
    if not ref or not hyp:
        return max(len(ref), len(hyp))
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    return out.substitutions + out.deletions + out.insertions


def corpus_wer(refs: Sequence[str], hyps: Sequence[str]) -> float:
    """Total word edits over total reference words (the standard corpus-level WER, not a mean of ratios)."""
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    ref_words = [wer_words(r) for r in refs]
    hyp_words = [wer_words(h) for h in hyps]
    words = sum(len(r) for r in ref_words)
    edits = sum(edit_distance(r, h) for r, h in zip(ref_words, hyp_words))
    return edits / words if words else float(edits > 0)
