"""The word n-gram baseline: a proper distribution, Kneser-Ney's continuation counts by hand, and the command that
adds its log-probability to n-best lists for fusion."""

from __future__ import annotations

import json
import math

import pytest

from electra.app.cli import main
from electra.pll.ngram import KneserNeyLM, corpus_sentences, normalize_words

TEXT = (
    "The cat sat on the mat. The dog sat on the log! A cat saw the dog.\n"
    "San Francisco is a city. The dog ran to San Francisco. Francisco sat.\n"
)


def _lm(order: int) -> KneserNeyLM:
    return KneserNeyLM(order).fit(corpus_sentences([TEXT]))


def test_normalisation_matches_the_references():
    assert normalize_words("Well-known_words, don't STOP!") == ["well", "known", "words", "don't", "stop"]
    assert list(corpus_sentences(["One. Two!\nThree"])) == [["one"], ["two"], ["three"]]


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_context_gives_a_distribution(order):
    lm = _lm(order)
    ids = list(lm.vocab.values())
    for context in [
        (),
        (0,) * (order - 1),
        (lm.vocab["the"],),
        (lm.vocab["san"], lm.vocab["francisco"]),
        (99,),
    ]:
        total = sum(lm.prob(w, tuple(context)[-(order - 1) :] if order > 1 else ()) for w in ids)
        assert total == pytest.approx(1.0, abs=1e-9), context


def test_kneser_ney_unigrams_are_continuation_counts():
    """'francisco' is frequent but follows almost only 'san'; the unigram level counts distinct left neighbours,
    so after an unseen history 'francisco' is less likely than 'sat' (three distinct left neighbours)."""
    lm = _lm(2)
    v = lm.vocab
    assert lm.counts[1][(v["francisco"],)] == 2  # after "san" and after <s> ("Francisco sat.")
    assert lm.counts[1][(v["sat"],)] == 3  # after cat, dog, francisco
    unseen = (v["city"],)
    assert lm.prob(v["sat"], unseen) > lm.prob(v["francisco"], unseen)
    assert lm.prob(v["francisco"], (v["san"],)) > 0.5  # seen bigram dominates


def test_a_sentence_from_the_corpus_beats_its_shuffle_and_unknown_words_are_scored():
    lm = _lm(3)
    assert lm.logprob("the dog sat on the log".split()) > lm.logprob("log the on sat dog the".split())
    assert math.isfinite(lm.logprob(["zebra"])) and lm.logprob(["zebra"]) < lm.logprob(["cat"])


def test_ngram_command_writes_a_field_rescore_can_fuse(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 3)
    nbest = [
        {
            "id": "u1",
            "ref": "the cat sat on the mat",
            "hyps": [
                {"text": "the cat sat on the mad", "score": -1.0, "am_score": -1.0},
                {"text": "the cat sat on the mat", "score": -1.1, "am_score": -1.1},
            ],
        },
        {
            "id": "u2",
            "ref": "the dog sat on the log",
            "hyps": [
                {"text": "the dog sad on the log", "score": -2.0, "am_score": -2.0},
                {"text": "the dog sat on the log", "score": -2.05, "am_score": -2.05},
            ],
        },
    ]
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(nbest))
    out = tmp_path / "lm"
    assert (
        main(["ngram", "--corpus", str(corpus), "--nbest", str(dev), "--order", "3", "--output", str(out)])
        == 0
    )
    assert "perplexity of its references" in capsys.readouterr().out
    annotated = json.loads((out / "dev.json").read_text())
    lm = KneserNeyLM(3).fit(corpus_sentences([TEXT * 3]))
    first = annotated[0]["hyps"][0]
    assert first["ngram"] == pytest.approx(lm.logprob(first["text"].split())) and first["am_score"] == -1.0
    res = tmp_path / "res"
    assert (
        main(["rescore", "--dev", str(out / "dev.json"), "--features", "score,ngram", "--output", str(res)])
        == 0
    )
    report = json.loads((res / "report.json").read_text())
    assert report["splits"][0]["wer"]["fused"] == 0.0 < report["splits"][0]["wer"]["first_pass"]
    assert main(["ngram", "--corpus", str(corpus), "--nbest", str(dev), "--output", str(tmp_path)]) == 2
    assert "would overwrite the input lists" in capsys.readouterr().err
