"""The official SQuAD metrics on hand-worked cases (every expected number below is computed in the comments)."""

from __future__ import annotations

import json

import pytest

from electra.squad.metrics import (
    _apply_threshold,
    best_threshold,
    evaluate_v1,
    evaluate_v2,
    f1_v1,
    f1_v2,
    normalize_answer,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Cat!", "cat"),  # case, article, punctuation
        ("  a  b   c ", "b c"),  # the article "a" goes, whitespace collapses
        ("An apple, the pear.", "apple pear"),
        ("theater anthem", "theater anthem"),  # articles only as whole words
        ("Don't", "dont"),  # punctuation removed, not replaced by a space
        ("1,000 km", "1000 km"),
        ("\tTHE\nEnd", "end"),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_partial_overlap_f1_by_hand() -> None:
    # pred -> [big, red, dog], gold -> [red, dog, barked]: 2 common, P = R = 2/3, F1 = 2/3.
    assert f1_v1("the big red dog", "Red dog barked.") == pytest.approx(2 / 3)
    # pred [red, red, dog] vs gold [red, dog]: common = min(2,1) red + 1 dog = 2; P = 2/3, R = 1, F1 = 0.8.
    assert f1_v1("red red dog", "red dog") == pytest.approx(0.8)
    # no shared token
    assert f1_v1("cat", "dog") == 0.0
    # v1.1 scores two empty strings 0, v2.0 scores them 1 (a correct abstention); one empty side is 0 in both.
    assert f1_v1("", "") == 0.0
    assert f1_v2("", "") == 1.0
    assert f1_v2("the", "") == 1.0  # "the" normalises to nothing
    assert f1_v2("", "Paris") == 0.0


def test_v1_gold_as_prediction_is_100(shared_data) -> None:
    payload = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())
    golds = {
        qa["id"]: [a["text"] for a in qa["answers"]]
        for art in payload["data"][:5]
        for p in art["paragraphs"]
        for qa in p["qas"]
    }
    # Any single gold answer wins the max over golds: take the last one, not only the first.
    result = evaluate_v1(golds, {qid: answers[-1] for qid, answers in golds.items()})
    assert result["exact_match"] == 100.0 and result["f1"] == 100.0 and result["total"] == len(golds)


def test_v1_max_over_golds_and_missing_prediction() -> None:
    golds = {
        "q1": ["Denver Broncos", "Broncos"],
        "q2": ["Carolina Panthers"],
        "q3": ["Santa Clara"],
    }
    # q1: "the Broncos" normalises to "broncos" = second gold: EM 1, F1 1.
    # q2: [panthers, team] vs [carolina, panthers]: P = R = 1/2, F1 = 0.5, EM 0.
    # q3: missing -> 0. EM = 100 * 1/3, F1 = 100 * 1.5/3 = 50.
    result = evaluate_v1(golds, {"q1": "the Broncos", "q2": "Panthers team"})
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(50.0)


GOLDS_V2 = {"a": ["Paris"], "b": [], "c": ["blue whale"], "d": []}
PREDS_V2 = {"a": "Paris", "b": "London", "c": "whale", "d": ""}
NA_V2 = {"a": 0.1, "b": 0.8, "c": 0.5, "d": 0.3}


def test_v2_no_answer_scoring_by_hand() -> None:
    # raw exact: a 1, b 0 (answered an unanswerable), c 0, d 1 (abstained on an unanswerable)
    # raw F1:    a 1, b 0, c = [whale] vs [blue, whale]: P 1, R 1/2 -> 2/3, d 1
    result = evaluate_v2(GOLDS_V2, PREDS_V2)
    assert result["exact"] == pytest.approx(50.0)
    assert result["f1"] == pytest.approx(100 * (1 + 0 + 2 / 3 + 1) / 4)
    assert result["HasAns_total"] == 2 and result["NoAns_total"] == 2
    assert result["HasAns_exact"] == pytest.approx(50.0)
    assert result["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert result["NoAns_exact"] == pytest.approx(50.0) and result["NoAns_f1"] == pytest.approx(50.0)
    assert "best_f1" not in result  # thresholds need na_probs


def test_v2_threshold_applied_and_best_thresholds_by_hand() -> None:
    # threshold 0.4: b (0.8) and c (0.5) become "no answer": b right (1), c wrong (0) -> EM = F1 = 3/4.
    result = evaluate_v2(GOLDS_V2, PREDS_V2, NA_V2, na_prob_thresh=0.4)
    assert result["exact"] == pytest.approx(75.0) and result["f1"] == pytest.approx(75.0)
    # Sweep from "all abstain" (2 points: b and d) in na order a 0.1, d 0.3, c 0.5, b 0.8:
    #   exact: a +1 -> 3 (thresh 0.1), d +0, c +0, b -1  => best 3/4 = 75 at 0.1
    #   f1:    a +1 -> 3, d +0, c +2/3 -> 3.667 (thresh 0.5), b -1  => best 91.67 at 0.5
    assert result["best_exact"] == pytest.approx(75.0) and result["best_exact_thresh"] == 0.1
    assert result["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4) and result["best_f1_thresh"] == 0.5
    # Applying the best F1 threshold reproduces the best F1.
    again = evaluate_v2(GOLDS_V2, PREDS_V2, NA_V2, na_prob_thresh=0.5)
    assert again["f1"] == pytest.approx(result["best_f1"])


def test_v2_drops_golds_that_normalise_to_nothing() -> None:
    # "the" normalises to "", so the only usable gold is "cat"; the empty prediction then scores 0.
    assert evaluate_v2({"q": ["the", "cat"]}, {"q": ""})["exact"] == 0.0
    assert evaluate_v2({"q": ["the", "cat"]}, {"q": "a cat"})["exact"] == 100.0


def test_best_threshold_never_answering_is_the_floor() -> None:
    # Every prediction wrong: the best is to abstain everywhere (1 unanswerable of 2 -> 50%), threshold 0.0.
    score, thresh = best_threshold(
        {"x": "no", "y": "no"}, {"x": 0.0, "y": 0.0}, {"x": 0.2, "y": 0.7}, {"x": True, "y": False}
    )
    assert score == pytest.approx(50.0) and thresh == 0.0


def _official_find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    """`find_best_thresh` of the official evaluate-v2.0.py, verbatim but for names and layout."""
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = best_score = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def test_best_threshold_reproduces_its_score_for_logit_scores_of_any_sign() -> None:
    """Before: the sweep started from the official script's threshold 0.0 (its scores are probabilities); with this
    head's logit-difference scores, all negative, "abstain everywhere" won but 0.0 abstains nowhere, so the EM/F1
    reported at the tuned threshold (11.16/12.81 in an audit) fell below the best printed beside them (24.98)."""
    golds = {"a": ["Paris"], "b": [], "c": ["blue whale"], "d": []}
    wrong = {"a": "Rome", "b": "London", "c": "seal", "d": "Oslo"}  # every text wrong
    # All scores negative. Abstaining everywhere scores b + d = 2 of 4 = 50; admitting any question only loses
    # (a, c: +0; b, d: -1), so the best is 50 at a threshold below every score (-7.5 -> -9.0).
    negative = {"a": -2.0, "b": -7.5, "c": -3.25, "d": -4.0}
    result = evaluate_v2(golds, wrong, negative)
    assert result["best_exact"] == pytest.approx(50.0) and result["best_f1"] == pytest.approx(50.0)
    assert result["best_f1_thresh"] == -9.0
    applied = evaluate_v2(golds, wrong, negative, na_prob_thresh=result["best_f1_thresh"])
    assert applied["f1"] == pytest.approx(result["best_f1"]) and applied["exact"] == pytest.approx(50.0)
    # Mixed signs, PREDS_V2 (a right, b wrong text on an unanswerable, c F1 2/3, d abstains), in na order
    # d -1.5, a -0.5, c 0.25, b 2.0: from 2 (b, d abstain), d +0 -> 2, a +1 -> 3, c +2/3 -> 3.667 (F1, at 0.25),
    # b -1 -> 2.667. Best F1 = 91.67 at 0.25; best EM = 75 at -0.5.
    mixed = {"a": -0.5, "b": 2.0, "c": 0.25, "d": -1.5}
    result = evaluate_v2(GOLDS_V2, PREDS_V2, mixed)
    assert result["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4) and result["best_f1_thresh"] == 0.25
    assert result["best_exact"] == pytest.approx(75.0) and result["best_exact_thresh"] == -0.5
    for kind in ("exact", "f1"):
        applied = evaluate_v2(GOLDS_V2, PREDS_V2, mixed, na_prob_thresh=result[f"best_{kind}_thresh"])
        assert applied[kind] == pytest.approx(result[f"best_{kind}"]), kind
    # Mixed signs where abstaining everywhere wins: the threshold must sit below -1.5. At 0.0, a and d would
    # answer (d wrongly, on an unanswerable question) and the score would be 1 of 4, not 2 of 4.
    result = evaluate_v2(golds, wrong, {"a": -0.5, "b": 2.0, "c": 0.25, "d": -1.5})
    assert result["best_f1"] == pytest.approx(50.0) and result["best_f1_thresh"] < -1.5
    assert evaluate_v2(golds, wrong, mixed, na_prob_thresh=result["best_f1_thresh"])["f1"] == pytest.approx(
        50.0
    )


def test_best_threshold_agrees_with_the_official_script_without_ties() -> None:
    """The official sweep's best figures, and its threshold wherever that threshold is reachable (not all-abstain
    with non-positive scores); and with tied scores the threshold still reproduces the figure it returns."""
    import random

    rng = random.Random(0)
    for trial in range(200):
        qids = [f"q{i}" for i in range(rng.randrange(1, 12))]
        has_ans = {q: rng.random() < 0.5 for q in qids}
        preds = {q: rng.choice(["", "x"]) for q in qids}
        raw = {q: rng.choice([0.0, 0.5, 1.0]) if has_ans[q] else float(not preds[q]) for q in qids}
        sign = rng.choice([-1.0, 1.0, 0.0])
        na = {q: round(rng.uniform(0.01, 5) * (sign or rng.choice([-1.0, 1.0])), 6) for q in qids}
        if len(set(na.values())) < len(na):
            continue
        ours = best_threshold(preds, raw, na, has_ans)
        official = _official_find_best_thresh(preds, raw, na, has_ans)
        assert ours[0] == pytest.approx(official[0]), trial
        if ours[1] != official[1]:  # only the all-abstain case, where 0.0 does not abstain everywhere
            assert official[1] == 0.0 and min(na.values()) <= 0.0 and ours[1] < min(na.values()), trial
        applied = _apply_threshold(raw, na, has_ans, ours[1])
        assert 100.0 * sum(applied.values()) / len(qids) == pytest.approx(ours[0]), trial
    # Ties: q1 and q2 share 0.3; admitting q1 alone (+1) is no threshold's choice, since 0.3 admits q2 (-1) too.
    preds, raw = {"q1": "x", "q2": "x"}, {"q1": 1.0, "q2": 0.0}
    has_ans, na = {"q1": True, "q2": False}, {"q1": 0.3, "q2": 0.3}
    score, thresh = best_threshold(preds, raw, na, has_ans)
    assert score == pytest.approx(50.0) and thresh == 0.0
    assert 100.0 * sum(_apply_threshold(raw, na, has_ans, thresh).values()) / 2 == pytest.approx(score)


def test_v2_an_answerable_question_whose_answers_normalise_to_nothing_stays_answerable() -> None:
    """The official script decides HasAns from the raw answer list. Before: answers like "the" or "." made the
    question count as NoAns (a constructed file had 1,346 HasAns where the official script counts 1,372)."""
    golds = {"only_the": ["the"], "dot": ["."], "real": ["cat"], "none": []}
    predictions = {"only_the": "", "dot": "dog", "real": "cat", "none": ""}
    result = evaluate_v2(golds, predictions)
    assert result["HasAns_total"] == 3 and result["NoAns_total"] == 1
    # Scoring still drops the empty-after-normalising golds: only "" matches them, as in the official script.
    assert result["HasAns_exact"] == pytest.approx(100 * 2 / 3) and result["NoAns_exact"] == 100.0


def test_squad_eval_scores_what_the_official_script_scores(tmp_path, capsys) -> None:
    """Before: a wrong answer_start, or a 1.1 file under --version 2.0, was refused; the official script scores
    both. Now they are warnings."""
    import json

    from electra.app.cli import main

    data = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "The cat sat on the mat.",
                        "qas": [
                            {
                                "id": "q1",
                                "question": "Who sat?",
                                "answers": [{"text": "cat", "answer_start": 9}],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "data.json").write_text(json.dumps(data))
    (tmp_path / "pred.json").write_text(json.dumps({"q1": "the cat"}))
    argv = ["squad-eval", "--data", str(tmp_path / "data.json"), "--predictions", str(tmp_path / "pred.json")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["exact_match"] == 100.0
    assert "does not match the context at answer_start=9" in captured.err and "scored anyway" in captured.err
    assert main([*argv, "--version", "2.0"]) == 0
    captured = capsys.readouterr()
    assert (
        "says version 1.1; scoring it as 2.0" in captured.err
        and json.loads(captured.out)["HasAns_total"] == 1
    )
    # Before: an n-best file given as --predictions printed its whole list inside the one-line error.
    nbest = [{"text": "the cat " * 20, "probability": 0.5}] * 20
    (tmp_path / "nbest.json").write_text(json.dumps({"q1": nbest}))
    assert main([*argv[:-1], str(tmp_path / "nbest.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the data file's warning
    assert err.endswith("value a list is not a str (is this nbest_predictions.json? give predictions.json).")
    assert len(err) < 300


def test_the_evaluate_module_is_the_official_evaluation() -> None:
    """`evaluate.load("squad/squad_metric.py", version)` takes the hub metrics' input format and returns the
    official scripts' numbers (the hand-worked ones above)."""
    import evaluate

    from electra.squad.metrics import METRIC_SCRIPT, official_scores

    metric = evaluate.load(str(METRIC_SCRIPT), "2.0")
    references = [
        {"id": q, "answers": {"text": g, "answer_start": [0] * len(g)}} for q, g in GOLDS_V2.items()
    ]
    rows = [
        {"id": q, "prediction_text": PREDS_V2.get(q, ""), "no_answer_probability": NA_V2[q]} for q in GOLDS_V2
    ]
    result = metric.compute(predictions=rows, references=references, na_prob_thresh=0.4)
    assert result == pytest.approx(evaluate_v2(GOLDS_V2, PREDS_V2, NA_V2, na_prob_thresh=0.4))
    assert result["exact"] == pytest.approx(75.0) and result["best_f1_thresh"] == 0.5
    assert official_scores("2.0", GOLDS_V2, PREDS_V2, NA_V2, 0.4) == pytest.approx(result)
    v1 = evaluate.load(str(METRIC_SCRIPT), "1.1")
    golds = {"q1": ["Denver Broncos", "Broncos"], "q2": ["blue whale"]}
    rows_v1 = [{"id": "q1", "prediction_text": "the Broncos"}, {"id": "q2", "prediction_text": "whale"}]
    refs_v1 = [{"id": q, "answers": {"text": g, "answer_start": [0] * len(g)}} for q, g in golds.items()]
    scores = v1.compute(predictions=rows_v1, references=refs_v1)
    assert scores["exact_match"] == pytest.approx(50.0) and scores["f1"] == pytest.approx(
        100 * (1 + 2 / 3) / 2
    )
