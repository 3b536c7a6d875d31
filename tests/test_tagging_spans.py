"""Span scores equal seqeval's (the conlleval convention) on the same tags, malformed sequences included."""

from __future__ import annotations

import random

import pytest
from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities, precision_recall_fscore_support

from electra.tagging.spans import Span, extract_spans, parse_tag, score_tags, span_scores, token_accuracy


def seqeval_spans(tags: list[str]) -> list[Span]:
    """seqeval's entities as Spans (its ends are inclusive)."""
    return [Span(kind, start, end + 1) for kind, start, end in get_entities(tags)]


TRICKY = {
    "i_after_o_opens": ["O", "I-NP", "I-NP", "O"],
    "i_at_start_opens": ["I-PER", "I-PER", "O"],
    "type_change_inside": ["B-PER", "I-LOC", "I-LOC"],
    "type_change_b_to_i": ["B-NP", "I-VP", "O", "B-NP"],
    "b_after_b": ["B-NP", "B-NP", "I-NP"],
    "bioes_single": ["S-LOC", "O", "S-PER", "S-PER"],
    "bioes_full": ["B-ORG", "I-ORG", "E-ORG", "O", "B-LOC", "E-LOC"],
    "e_after_o_opens": ["O", "E-PER", "O"],
    "i_after_e_opens": ["B-X", "E-X", "I-X", "E-X"],
    "e_after_e": ["E-X", "E-X"],
    "s_then_i": ["S-X", "I-X", "O"],
    "b_then_s": ["B-X", "S-X"],
    "e_of_other_type": ["B-X", "I-X", "E-Y"],
    "all_o": ["O", "O"],
    "empty": [],
    "hyphen_in_type": ["B-MISC-X", "I-MISC-X", "O"],
}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_spans_equal_seqeval_on_tricky_sequences(name):
    tags = TRICKY[name]
    assert extract_spans(tags) == seqeval_spans(tags)


def test_expected_spans_by_hand():
    # conlleval: I- after O starts a chunk; a type change ends one and starts another; S- is one token
    assert extract_spans(["O", "I-NP", "I-NP", "O"]) == [Span("NP", 1, 3)]
    assert extract_spans(["B-PER", "I-LOC", "I-LOC"]) == [Span("PER", 0, 1), Span("LOC", 1, 3)]
    assert extract_spans(["S-LOC", "B-PER", "E-PER"]) == [Span("LOC", 0, 1), Span("PER", 1, 3)]
    assert extract_spans(["B-X", "E-X", "I-X", "E-X"]) == [Span("X", 0, 2), Span("X", 2, 4)]


def random_tags(rng: random.Random, length: int, prefixes: str) -> list[str]:
    return [
        "O" if rng.random() < 0.3 else f"{rng.choice(prefixes)}-{rng.choice(['A', 'B', 'NP'])}"
        for _ in range(length)
    ]


@pytest.mark.parametrize("prefixes", ["BI", "BIES"])
def test_spans_equal_seqeval_on_random_sequences(prefixes):
    rng = random.Random(0)
    for _ in range(3000):
        tags = random_tags(rng, rng.randint(0, 9), prefixes)
        assert extract_spans(tags) == seqeval_spans(tags), tags


@pytest.mark.parametrize("prefixes", ["BI", "BIES"])
def test_scores_equal_seqeval_overall_and_per_type(prefixes):
    rng = random.Random(1)
    gold = [random_tags(rng, rng.randint(1, 12), prefixes) for _ in range(200)]
    # predictions: gold with some tags changed, so that some spans match and some do not
    predicted = [[t if rng.random() < 0.8 else random_tags(rng, 1, prefixes)[0] for t in s] for s in gold]
    ours = span_scores(gold, predicted)
    assert ours.overall.f1 == pytest.approx(f1_score(gold, predicted))
    assert ours.overall.precision == pytest.approx(precision_score(gold, predicted))
    assert ours.overall.recall == pytest.approx(recall_score(gold, predicted))
    precision, recall, f1, support = precision_recall_fscore_support(gold, predicted, average=None)
    types = sorted(ours.types)
    assert types == sorted({s.type for sent in gold + predicted for s in seqeval_spans(sent)})
    assert [ours.types[t].precision for t in types] == pytest.approx(list(precision))
    assert [ours.types[t].recall for t in types] == pytest.approx(list(recall))
    assert [ours.types[t].f1 for t in types] == pytest.approx(list(f1))
    assert [ours.types[t].gold for t in types] == list(support)
    assert token_accuracy(gold, predicted) == pytest.approx(accuracy_score(gold, predicted))
    assert 0.2 < ours.overall.f1 < 0.9  # a test that can tell right from wrong


def test_spans_do_not_cross_sentences():
    # seqeval joins sentences with an O; scoring them one by one must agree
    gold = [["B-NP", "I-NP"], ["I-NP", "O"]]
    predicted = [["B-NP", "I-NP"], ["B-NP", "O"]]
    assert span_scores(gold, predicted).overall.f1 == pytest.approx(f1_score(gold, predicted)) == 1.0


def test_nothing_predicted_scores_zero():
    scores = span_scores([["B-NP", "O"]], [["O", "O"]])
    assert (scores.overall.precision, scores.overall.recall, scores.overall.f1) == (0.0, 0.0, 0.0)
    assert scores.types["NP"].gold == 1


def test_score_tags_for_pos_is_accuracy_only():
    assert score_tags([["NN", "VB"]], [["NN", "NN"]], spans=False) == {"accuracy": 0.5}
    metrics = score_tags([["B-NP", "O"]], [["B-NP", "O"]], spans=True)
    assert metrics["f1"] == metrics["f1/NP"] == metrics["accuracy"] == 1.0


def test_bad_tags_and_lengths_are_refused():
    with pytest.raises(ValueError, match="'NN'"):
        parse_tag("NN")
    with pytest.raises(ValueError, match="'X-NP'"):
        extract_spans(["X-NP"])
    with pytest.raises(ValueError, match="sentence 0"):
        span_scores([["O", "O"]], [["O"]])
    with pytest.raises(ValueError, match="predicted sentences"):
        token_accuracy([["O"]], [])
