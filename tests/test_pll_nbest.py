"""WER, n-best reading/writing (both formats, real sample files) and λ-tuned rescoring with a hand-made scorer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.core.errors import UserError
from electra.pll.nbest import Hypothesis, Utterance, length_penalty, read_nbest, write_nbest
from electra.pll.rescore import (
    attach_plls,
    choose_lambda,
    first_best,
    oracle_best,
    rescored_best,
    split_report,
    unscored_texts,
)
from electra.pll.score_files import saved_scores
from electra.pll.wer import corpus_wer, edit_distance


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
        ('{"u1": {"ref": "a b"}}', "u1: empty hypothesis list .*give it at least one hypothesis"),
        (
            '[{"id": "u2", "ref": "a", "hyps": []}]',
            "u2: empty hypothesis list; give it at least one hypothesis",
        ),
        # Python's parser keeps the last of two equal keys: the first utterance (or hypothesis) was lost silently
        (
            '{"u6": {"hyp_1": {"score": -1, "text": "a"}}, "u6": {"hyp_1": {"score": -2, "text": "b"}}}',
            "bad.json: key 'u6' appears twice in one JSON object",
        ),
        (
            '{"u7": {"hyp_1": {"score": -1, "text": "a"}, "hyp_1": {"score": -2, "text": "b"}, "ref": "a"}}',
            "key 'hyp_1' appears twice in one JSON object",
        ),
        ('[{"id": "u8", "id": "u9", "hyps": [{"text": "a", "score": 0}]}]', "key 'id' appears twice"),
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
    # Prefers real words: each of "sad" and "rang" costs 2 nats; one piece per word.
    return [(-2.0 * sum(w in ("sad", "rang") for w in t.split()), len(t.split())) for t in texts]


def _attach_scored(lists, score=_hand_scorer, known=None, scorer=None) -> None:
    """What `score` and `rescore` do: score the texts the saved scores lack, then store every PLL."""
    texts = unscored_texts(lists, known)
    attach_plls(lists, known, dict(zip(texts, score(texts))), scorer=scorer)


def test_rescoring_picks_what_the_hand_made_scorer_prefers():
    utts = _utts()
    _attach_scored([utts])
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
    _attach_scored([utts])
    path = tmp_path / "out.json"
    write_nbest(path, utts, fmt, lam=0.5)
    again, got_fmt = read_nbest(path)
    assert got_fmt == fmt
    assert [u.id for u in again] == ["u1", "u2"] and again[0].ref == "the cat sat"
    assert again[0].hyps[0].text == "the cat sat"  # -1.5 beats -1 + 0.5 * -2
    raw = json.loads(path.read_text())
    first = raw["u1"]["hyp_1"] if fmt == "mlm-scoring" else raw[0]["hyps"][0]
    assert first == {"text": "the cat sat", "score": -1.5, "pll": 0.0, "pieces": 3, "combined": -1.5}


@pytest.mark.parametrize("fmt", ["mlm-scoring", "list"])
def test_the_users_other_fields_survive_rescoring(tmp_path, fmt):
    """A recognizer's own fields (am_score, lm_score, timings) and per-utterance fields are written back as read."""
    hyp_a = {"text": "the cat sad", "score": -1.0, "am_score": -0.4, "lm_score": -0.6, "words": [1, 2]}
    hyp_b = {"text": "the cat sat", "score": -1.5, "am_score": -0.5, "lm_score": -1.0}
    if fmt == "list":
        data = [{"id": "u1", "ref": "the cat sat", "speaker": "s7", "hyps": [hyp_a, hyp_b]}]
    else:
        data = {"u1": {"hyp_1": hyp_a, "hyp_2": hyp_b, "ref": "the cat sat", "speaker": "s7"}}
    source = tmp_path / "in.json"
    source.write_text(json.dumps(data))
    utts, got_fmt = read_nbest(source)
    _attach_scored([utts])
    out = tmp_path / "out.json"
    write_nbest(out, utts, got_fmt, lam=1.0)
    raw = json.loads(out.read_text())
    entry = raw[0] if fmt == "list" else raw["u1"]
    hyps = entry["hyps"] if fmt == "list" else [entry["hyp_1"], entry["hyp_2"]]
    assert entry["speaker"] == "s7" and entry["ref"] == "the cat sat"
    assert [h["text"] for h in hyps] == ["the cat sat", "the cat sad"]  # -1.5 + 0 beats -1 - 2
    assert {k: hyps[1][k] for k in ("am_score", "lm_score", "words")} == {
        "am_score": -0.4,
        "lm_score": -0.6,
        "words": [1, 2],
    }
    assert hyps[0]["am_score"] == -0.5 and hyps[0]["pll"] == 0.0 and hyps[0]["combined"] == -1.5


def test_scoring_only_keeps_order_and_adds_pll():
    utts = _utts()
    _attach_scored([utts])
    raw = json.loads(write_nbest(None, utts, "list", lam=None))
    assert [h["text"] for h in raw[0]["hyps"]] == ["the cat sad", "the cat sat", "a cat sat"]
    assert raw[0]["hyps"][0] == {"text": "the cat sad", "score": -1.0, "pll": -2.0, "pieces": 3}


def test_length_penalty_hand_values():
    assert length_penalty(7, 0.0) == 1.0
    assert length_penalty(7, 1.0) == pytest.approx(2.0)  # (5 + 7) / 6
    assert length_penalty(13, 0.5) == pytest.approx(3**0.5)  # ((5 + 13) / 6) ** 0.5
    assert length_penalty(4, 1.0, "length") == 4.0


def test_length_normalisation_changes_the_pick():
    # Two hypotheses with equal first-pass scores; the longer has the lower summed PLL (more terms) but the
    # higher PLL per piece. Without --ln the short one wins; with length division the long one does.
    utt = Utterance("u", "a b c d e f", [Hypothesis("a b c", 0.0), Hypothesis("a b c d e f", 0.0)])
    _attach_scored([[utt]], lambda texts: [(-3.0, 3) if len(t.split()) == 3 else (-4.8, 6) for t in texts])
    assert rescored_best(utt, 1.0) == "a b c"
    assert rescored_best(utt, 1.0, ln_alpha=1.0, ln_type="length") == "a b c d e f"  # -0.8 per piece > -1.0


def test_saved_scores_read_both_files_score_writes_and_refuse_mixed_models(tmp_path):
    lines = tmp_path / "s.jsonl"
    lines.write_text(
        json.dumps({"text": "the cat sat", "pll": -1.25, "pieces": 3})
        + "\n\n"
        + json.dumps({"text": "a dog ran", "pll": -2.5})
        + "\n"
    )
    scored = tmp_path / "scored.json"
    scored.write_text(
        json.dumps([{"id": "u", "hyps": [{"text": "the cat sad", "score": 0, "pll": -4.0, "pieces": 3}]}])
    )
    known = saved_scores([lines, scored])
    assert known == {"the cat sat": (-1.25, 3), "a dog ran": (-2.5, None), "the cat sad": (-4.0, 3)}
    utts = _utts()
    with pytest.raises(UserError, match="2 hypotheses have no saved score"):
        attach_plls([utts], known)  # "a cat sat", "a dog rang", and nothing to score them with
    assert unscored_texts([utts], known) == ["a cat sat", "a dog rang"]  # only these two are scored
    _attach_scored([utts], known=known)
    assert utts[0].hyps[1].pll == -1.25 and utts[1].hyps[1].pll == -2.0
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"text": "the cat sat", "pll": -9.0}) + "\n")
    with pytest.raises(UserError, match="cannot be mixed"):
        saved_scores([lines, other])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("the cat sat\n")
    with pytest.raises(UserError, match=r"bad.jsonl:1: not a JSON line"):
        saved_scores([bad])
    twice = (
        tmp_path / "twice.json"
    )  # a scored list read by `rescore --scores`: its keys are checked there too
    twice.write_text(scored.read_text().replace('"pll": -4.0', '"pll": -4.0, "pll": -1.0'))
    with pytest.raises(UserError, match=r"twice.json: key 'pll' appears twice in one JSON object"):
        saved_scores([twice])


def _scores_file(path: Path, pairs, scorer=None) -> Path:
    """JSON lines as `electra score --output` writes them, each naming `scorer` (absent: an older file)."""
    records = [
        {"text": t, "pll": v, "pieces": 3} | ({"pll_scorer": scorer} if scorer else {}) for t, v in pairs
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_saved_scores_refuse_files_of_two_scorers_even_without_a_shared_text(tmp_path):
    """dev scored by one model and test by another share no text, so equal-text checks never saw them."""
    dev = _scores_file(tmp_path / "dev.jsonl", [("the cat sat", -1.0)], "cloze:sha256=aaaa")
    test = _scores_file(tmp_path / "test.jsonl", [("a dog ran", -2.0)], "cloze:sha256=bbbb")
    with pytest.raises(UserError, match="cannot share one weight") as err:
        saved_scores([dev, test])
    assert "test.jsonl was scored by cloze:sha256=bbbb but" in str(err.value) and "\n" not in str(err.value)
    legacy = _scores_file(tmp_path / "old.jsonl", [("a dog ran", -2.0)])
    with pytest.raises(UserError, match=r"old.jsonl does not say which model scored it"):
        saved_scores([dev, legacy])
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(dev.read_text() + test.read_text())
    with pytest.raises(UserError, match=r"mixed.jsonl: its PLLs name 2 scorers"):
        saved_scores([mixed])
    # One scorer throughout: it is known, and every hypothesis keeps it, saved or scored now, through a write.
    same = _scores_file(tmp_path / "same.jsonl", [("a dog ran", -2.0)], "cloze:sha256=aaaa")
    known = saved_scores([dev, same])
    assert known.scorer == "cloze:sha256=aaaa" and known == {"the cat sat": (-1.0, 3), "a dog ran": (-2.0, 3)}
    assert saved_scores([legacy]).scorer is None
    utts = _utts()
    _attach_scored([utts], known=known, scorer="cloze:sha256=aaaa")
    path = tmp_path / "out.json"
    write_nbest(path, utts, "list", lam=None)
    again, _ = read_nbest(path)
    assert {h.scorer for u in again for h in u.hyps} == {"cloze:sha256=aaaa"}
    assert saved_scores([path]).scorer == "cloze:sha256=aaaa"  # a scored list is a scores file too


def test_wer_is_jiwers_and_the_evaluate_module_reports_it():
    import evaluate
    import jiwer

    from electra.pll.rescore import EditTable

    refs = ["The cat sat on the mat", "a dog ran", "hello world"]
    hyps = ["the cat sat on mat", "A dog ran away", "hello"]
    expected = jiwer.wer([r.lower() for r in refs], [h.lower() for h in hyps])
    assert corpus_wer(refs, hyps) == pytest.approx(expected) == pytest.approx(3 / 11)
    from electra.pll.wer import METRIC_SCRIPT

    assert METRIC_SCRIPT == Path(__file__).parent.parent / "pll" / "wer_metric.py"
    module = evaluate.load(str(METRIC_SCRIPT))
    assert module.compute(predictions=hyps, references=refs)["wer"] == pytest.approx(expected)
    # The λ search's table of per-hypothesis edits gives the same corpus WER for any choice.
    utts = _utts()
    table = EditTable.of(utts)
    for choice in ([0, 0], [1, 0], [2, 1]):
        picked = [u.hyps[i].text for u, i in zip(utts, choice)]
        assert table.wer(choice) == pytest.approx(corpus_wer([u.ref for u in utts], picked))
    assert table.oracle() == 0.0
