"""Word error rate by word-level Levenshtein distance (no jiwer: it is a dozen lines and one less dependency)."""

from __future__ import annotations

from collections.abc import Sequence


def normalize_words(text: str) -> list[str]:
    """Lowercase and split on whitespace: the n-best lists here are already lowercase, unpunctuated words."""
    return text.lower().split()


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Minimum substitutions + deletions + insertions turning `ref` into `hyp` (one rolling row)."""
    previous = list(range(len(hyp) + 1))
    for i, ref_word in enumerate(ref, start=1):
        current = [i] + [0] * len(hyp)
        for j, hyp_word in enumerate(hyp, start=1):
            current[j] = min(
                previous[j] + 1,  # deletion
                current[j - 1] + 1,  # insertion
                previous[j - 1] + (ref_word != hyp_word),  # substitution or match
            )
        previous = current
    return previous[-1]


def corpus_wer(refs: Sequence[str], hyps: Sequence[str]) -> float:
    """Total word edits over total reference words (the standard corpus-level WER, not a mean of ratios)."""
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    edits = sum(edit_distance(normalize_words(r), normalize_words(h)) for r, h in zip(refs, hyps))
    words = sum(len(normalize_words(r)) for r in refs)
    return edits / words if words else float(edits > 0)
