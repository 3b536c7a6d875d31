"""Scores for tag sequences: span precision, recall and F1 (overall and per type) for BIO/BIOES tags, and token
accuracy for tags without spans (part of speech).

Spans follow the CoNLL `conlleval` convention as `seqeval` implements it in its default mode, so a score here
equals `seqeval.metrics` on the same tags (the tests check this on malformed sequences too):

- a tag is `O` or a prefix `B`, `I`, `E`, `S` and a type, as in `B-NP`;
- a span opens at `B-` and `S-`, at any tag whose type differs from the previous tag's, and at `I-`/`E-` after
  `O`, `E-` or `S-` (so `I-` after `O` starts a span, as in IOB1 files);
- a span closes after `E-` and `S-`, before `B-`, `S-` and `O`, and where the type changes;
- a span's type is its tokens' type; a predicted span is correct when its type, start and end all match a gold one.

Sentences are scored separately (a span never crosses a sentence break). Precision, recall and F1 are fractions in
[0, 1]; a ratio with nothing to count (no predicted spans, say) is 0, as seqeval reports it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

PREFIXES = frozenset("BIES")


@dataclass(frozen=True)
class Span:
    """Tokens [start, end) of one sentence, of one type."""

    type: str
    start: int
    end: int


def parse_tag(tag: str) -> tuple[str, str]:
    """(prefix, type) of a tag: ("O", "") for `O`, ("B", "NP") for `B-NP`. Raises ValueError for anything else,
    naming the tag (`is_span_label` tells a caller beforehand)."""
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[0] in PREFIXES and tag[1] == "-":
        return tag[0], tag[2:]
    raise ValueError(f"tag {tag!r} is neither O nor B-, I-, E- or S- followed by a type")


def is_span_label(tag: str) -> bool:
    """Whether `tag` is `O` or a BIOES-prefixed type (what span scoring reads)."""
    return tag == "O" or (len(tag) > 2 and tag[0] in PREFIXES and tag[1] == "-")


def _closes(prev: tuple[str, str], cur: tuple[str, str]) -> bool:
    """Whether the span holding `prev` ends before `cur` (`cur` is ("O", "") past the sentence's end)."""
    if prev[0] == "O":
        return False
    return prev[0] in "ES" or cur[0] in "BSO" or prev[1] != cur[1]


def _opens(prev: tuple[str, str], cur: tuple[str, str]) -> bool:
    """Whether a span starts at `cur` (`prev` is ("O", "") at the sentence's start)."""
    if cur[0] == "O":
        return False
    return cur[0] in "BS" or prev[0] in "OES" or prev[1] != cur[1]


def extract_spans(tags: Sequence[str]) -> list[Span]:
    """The spans of one sentence's tags, in order, under the convention in the module's docstring."""
    spans: list[Span] = []
    prev, start = ("O", ""), 0
    for i, tag in enumerate([*tags, "O"]):
        cur = parse_tag(tag)
        if _closes(prev, cur):
            spans.append(Span(prev[1], start, i))
        if _opens(prev, cur):
            start = i
        prev = cur
    return spans


@dataclass(frozen=True)
class Counts:
    """Spans of one type (or all): gold, predicted, and predicted that match a gold span exactly."""

    gold: int = 0
    predicted: int = 0
    correct: int = 0

    @property
    def precision(self) -> float:
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass(frozen=True)
class SpanScores:
    """Micro-averaged counts over all spans (`overall`) and per type (`types`, sorted by name)."""

    overall: Counts
    types: dict[str, Counts] = field(default_factory=dict)

    def as_metrics(self) -> dict[str, float]:
        """Flat numbers for logs and reports: f1, precision, recall, then f1/<TYPE> per type."""
        metrics = {"f1": self.overall.f1, "precision": self.overall.precision, "recall": self.overall.recall}
        metrics.update({f"f1/{name}": counts.f1 for name, counts in self.types.items()})
        return metrics


def _check_lengths(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> None:
    if len(gold) != len(predicted):
        raise ValueError(f"{len(predicted)} predicted sentences for {len(gold)} gold ones")
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(p)} predicted tags for {len(g)} gold ones")


def span_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> SpanScores:
    """Span counts of `predicted` against `gold`, one tag list per sentence on both sides (equal lengths)."""
    _check_lengths(gold, predicted)
    n_gold: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    n_correct: Counter[str] = Counter()
    for g_tags, p_tags in zip(gold, predicted):
        g_spans, p_spans = set(extract_spans(g_tags)), set(extract_spans(p_tags))
        n_gold.update(s.type for s in g_spans)
        n_pred.update(s.type for s in p_spans)
        n_correct.update(s.type for s in g_spans & p_spans)
    types = {
        name: Counts(n_gold[name], n_pred[name], n_correct[name])
        for name in sorted(set(n_gold) | set(n_pred))
    }
    overall = Counts(sum(n_gold.values()), sum(n_pred.values()), sum(n_correct.values()))
    return SpanScores(overall, types)


def token_accuracy(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> float:
    """Share of tokens whose predicted tag equals the gold one (0 when there are no tokens)."""
    _check_lengths(gold, predicted)
    total = sum(len(g) for g in gold)
    right = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
    return right / total if total else 0.0


def score_tags(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], spans: bool
) -> dict[str, float]:
    """The numbers a tagging run reports: span f1/precision/recall (and f1 per type) when `spans`, and token
    accuracy always (for part of speech, the metric)."""
    metrics = span_scores(gold, predicted).as_metrics() if spans else {}
    metrics["accuracy"] = token_accuracy(gold, predicted)
    return metrics
