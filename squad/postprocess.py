"""From per-window beam outputs to answer texts in the original context, n-best lists and no-answer scores.

A candidate span (start, end) from a window is kept when both ends are context tokens, the start is not [CLS], the
window is the start token's max-context window, end >= start and the span is at most `max_answer_length` tokens.
Its text is the context between the start token's first character and the end token's last one (offsets, so the
original casing, accents and spacing come back). Candidates of all windows of a question are ranked by
start + end score, duplicates by text dropped, and the best `n_best_size` kept.

SQuAD 2.0's no-answer score follows ELECTRA: with the answerability classifier it is the classifier's
"unanswerable" logit, minimised over windows (the window that most believes in an answer decides); without it, the
minimum over windows of the null span's score minus the best non-null score. "No answer" is predicted when the
score exceeds a threshold, normally the one that maximises F1 on the evaluated set (`metrics.best_threshold`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from electra.squad.data import SquadExample

NO_CANDIDATE_SCORE = 1e4  # no-answer score when no valid span exists (JSON has no infinity)


@dataclass
class WindowResult:
    """One evaluation window's head outputs (numpy arrays, as `SpanHead` returns them per row)."""

    start_top_scores: np.ndarray  # (k,)
    start_top_index: np.ndarray  # (k,)
    end_top_scores: np.ndarray  # (k, k)
    end_top_index: np.ndarray  # (k, k)
    null_score: float


@dataclass
class Predictions:
    best_text: dict[str, str] = field(default_factory=dict)  # best non-empty span per question
    nbest: dict[str, list[dict]] = field(default_factory=dict)
    na_scores: dict[str, float] = field(default_factory=dict)  # v2.0 only: higher = more likely unanswerable

    def final(self, threshold: float | None = None) -> dict[str, str]:
        """The official predictions: v1.1 the best span; v2.0 "" where the no-answer score exceeds threshold."""
        if not self.na_scores or threshold is None:
            return dict(self.best_text)
        return {
            qid: ("" if self.na_scores[qid] > threshold else text) for qid, text in self.best_text.items()
        }


def postprocess(
    examples: Sequence[SquadExample],
    example_index: Sequence[int],
    offsets: Sequence[Sequence[Sequence[int]]],
    max_context: Sequence[Sequence[int]],
    results: Sequence[WindowResult],
    version: str,
    has_classifier: bool,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> Predictions:
    """Predictions for every example; the three per-window sequences and `results` are aligned."""
    windows: dict[int, list[int]] = {}
    for w, ex in enumerate(example_index):
        windows.setdefault(int(ex), []).append(w)
    out = Predictions()
    for ex_index, example in enumerate(examples):
        candidates: list[tuple[float, float, float, str]] = []
        nulls: list[float] = []
        for w in windows.get(ex_index, []):
            result, window_offsets, flags = results[w], offsets[w], max_context[w]
            nulls.append(float(result.null_score))
            candidates.extend(
                _window_candidates(result, window_offsets, flags, example.context, max_answer_length)
            )
        candidates.sort(key=lambda c: c[0], reverse=True)
        nbest: list[dict] = []
        seen: set[str] = set()
        for score, start_score, end_score, text in candidates:
            if text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "start_logit": start_score, "end_logit": end_score, "score": score})
            if len(nbest) >= n_best_size:
                break
        if nbest:
            top = max(e["score"] for e in nbest)
            weights = [math.exp(e["score"] - top) for e in nbest]
            for entry, weight in zip(nbest, weights):
                entry["probability"] = weight / sum(weights)
        out.best_text[example.qid] = nbest[0]["text"] if nbest else ""
        out.nbest[example.qid] = nbest
        if version == "2.0":
            null = min(nulls) if nulls else NO_CANDIDATE_SCORE
            if has_classifier:
                out.na_scores[example.qid] = null
            else:
                out.na_scores[example.qid] = null - nbest[0]["score"] if nbest else NO_CANDIDATE_SCORE
    return out


def _window_candidates(
    result: WindowResult,
    offsets: Sequence[Sequence[int]],
    max_context: Sequence[int],
    context: str,
    max_answer_length: int,
) -> list[tuple[float, float, float, str]]:
    found = []
    length = len(offsets)
    for i, start in enumerate(result.start_top_index.tolist()):
        if start == 0 or start >= length or offsets[start][0] < 0 or not max_context[start]:
            continue
        for j, end in enumerate(result.end_top_index[i].tolist()):
            if end >= length or offsets[end][0] < 0 or end < start or end - start + 1 > max_answer_length:
                continue
            start_score = float(result.start_top_scores[i])
            end_score = float(result.end_top_scores[i, j])
            text = context[offsets[start][0] : offsets[end][1]]
            found.append((start_score + end_score, start_score, end_score, text))
    return found
