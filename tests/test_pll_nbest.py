"""WER, n-best reading/writing (both formats, real sample files) and λ-tuned rescoring with a hand-made scorer."""

from __future__ import annotations

import json

import pytest

from electra.errors import UserError
from pll.nbest import Hypothesis, Utterance, read_nbest, write_nbest
from pll.rescore import attach_plls, choose_lambda, first_best, oracle_best, rescored_best, split_report
from pll.wer import corpus_wer, edit_distance


def test_edit_distance_hand_cases():
    assert edit_distance("a b c".split(), "a b c".split()) == 0
    assert edit_distance("a b c".split(), "a x c".split()) == 1  # one substitution
    assert edit_distance("a b c".split(), "a c".split()) == 1  # one deletion
    assert edit_distance("a b c".split(), "a b c d".split()) == 1  # one insertion
    assert edit_distance("the cat sat".split(), "cat sat on the".split()) == 3  # del the; ins on, the
    assert edit_distance([], "a b".split()) == 2 and edit_distance("a b".split(), []) == 2


def test_corpus_wer_is_total_edits_over_total_words():
    # 1 edit / 4 words and 2 edits / 2 words: corpus WER 3/6, not the mean of ratios (0.625).
    assert corpus_wer(["a b c d", "e f"], ["a b x d", "g"]) == pytest.approx(0.5)
    assert corpus_wer(["Hello World"], ["hello   world"]) == 0.0  # case and spacing are not errors


def test_reads_the_mlm_scoring_sample(shared_data):
    path = shared_data / "asr_mlm_scoring_partial" / "dev-clean.am.pppl.json"
    utts, fmt = read_nbest(path)
    assert fmt == "mlm-scoring" and len(utts) == 3
    assert all(len(u.hyps) == 100 for u in utts)
    first = utts[0]
    assert first.id == "1272-128104-0000"
    assert first.hyps[0].key == "hyp_1" and first.hyps[1].key == "hyp_2" and first.hyps[-1].key == "hyp_100"
    assert first.hyps[0].text.startswith("mister quilter is the apostle")  # leading space stripped
    assert first.ref is not None and first.ref.split()[0] == "mister"


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ('{"u1": {"ref": "a b"}}', "u1: empty hypothesis list"),
        ('[{"id": "u2", "ref": "a", "hyps": []}]', "u2: empty hypothesis list"),
        (
            '[{"id": "u3", "ref": "a", "hyps": [{"text": "a"}]}]',
            r"u3/hyps\[0\]: missing or non-numeric 'score'",
        ),
        ('{"u4": {"hyp_1": {"score": "high", "text": "a"}}}', "u4/hyp_1: missing or non-numeric 'score'"),
        ('{"u5": {"hyp_1": {"score": 1.0}}}', "u5/hyp_1: missing or non-string 'text'"),
        ('"just a string"', "top level must be"),
        ("[]", "holds no utterances"),
    ],
)
def test_bad_nbest_input_is_one_line_naming_file_and_entry(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UserError, match=message) as err:
        read_nbest(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def _utts():
    return [
        Utterance(
            "u1",
            "the cat sat",
            [Hypothesis("the cat sad", -1.0), Hypothesis("the cat sat", -1.5), Hypothesis("a cat sat", -3.0)],
        ),
        Utterance("u2", "a dog ran", [Hypothesis("a dog ran", -2.0), Hypothesis("a dog rang", -2.2)]),
    ]


def _hand_scorer(texts):
    # Prefers real words: each of "sad" and "rang" costs 2 nats.
    return [-2.0 * sum(w in ("sad", "rang") for w in t.split()) for t in texts]


def test_rescoring_picks_what_the_hand_made_scorer_prefers():
    utts = _utts()
    attach_plls([utts], _hand_scorer)
    assert [first_best(u) for u in utts] == ["the cat sad", "a dog ran"]
    # u1: "the cat sad" -1 + λ(-2) vs "the cat sat" -1.5: the PLL wins once λ > 0.25.
    assert rescored_best(utts[0], 0.2) == "the cat sad"
    assert rescored_best(utts[0], 0.3) == "the cat sat"
    assert [oracle_best(u) for u in utts] == ["the cat sat", "a dog ran"]
    lam, table = choose_lambda(utts)
    assert lam == 0.3  # the smallest λ on the grid reaching the lowest WER
    assert table[0.25] == pytest.approx(1 / 6) and table[0.3] == 0.0
    rep = split_report("dev", utts, lam)
    assert rep.wer_first_best == pytest.approx(1 / 6) and rep.wer_rescored == 0.0 and rep.wer_oracle == 0.0


@pytest.mark.parametrize("fmt", ["mlm-scoring", "list"])
def test_written_lists_read_back_best_first(tmp_path, fmt):
    utts = _utts()
    attach_plls([utts], _hand_scorer)
    path = tmp_path / "out.json"
    write_nbest(path, utts, fmt, lam=0.5)
    again, got_fmt = read_nbest(path)
    assert got_fmt == fmt
    assert [u.id for u in again] == ["u1", "u2"] and again[0].ref == "the cat sat"
    assert again[0].hyps[0].text == "the cat sat"  # -1.5 beats -1 + 0.5 * -2
    raw = json.loads(path.read_text())
    first = raw["u1"]["hyp_1"] if fmt == "mlm-scoring" else raw[0]["hyps"][0]
    assert first == {"text": "the cat sat", "score": -1.5, "pll": 0.0, "combined": -1.5}
