"""The official SQuAD v1.1 and v2.0 metrics, reimplemented so scores are comparable with the leaderboard.

Definitions follow the official `evaluate-v1.1.py` / `evaluate-v2.0.py` scripts: answers are normalised (lower case,
punctuation and the articles a/an/the removed, whitespace collapsed), each question scores the maximum over its gold
answers, and F1 is the bag-of-tokens overlap. v2.0 adds unanswerable questions (gold = the empty string), a
no-answer score per question (`na_probs`, any real number: higher means "more likely unanswerable"), the
HasAns/NoAns breakdown and the thresholds that maximise EM and F1 on the evaluated set.

Two deliberate details of the official scripts are kept: v1.1 scores an empty prediction 0 F1 even against an empty
gold, and v2.0 drops gold answers that normalise to nothing (after deciding, from the raw list, that the question has
an answer). A question with no prediction scores 0 (v1.1's rule;
v2.0's script would skip it, which silently inflates the score), and a warning counts them.
"""

from __future__ import annotations

import collections
import logging
import math
import re
import string
from collections.abc import Mapping
from pathlib import Path

from electra.core.local_metrics import load_local_metric

logger = logging.getLogger(__name__)

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles, collapse whitespace (in the official order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
    """v1.1 token F1: no overlap (including both empty) is 0."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    return _overlap_f1(pred_tokens, gold_tokens)


def f1_v2(prediction: str, gold: str) -> float:
    """v2.0 token F1: if either side is empty, F1 is 1 when both are empty (a correct abstention), else 0."""
    pred_tokens = normalize_answer(prediction).split() if prediction else []
    gold_tokens = normalize_answer(gold).split() if gold else []
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    return _overlap_f1(pred_tokens, gold_tokens)


def _overlap_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_answers(dataset: list[dict]) -> dict[str, list[str]]:
    """qid -> gold answer texts from the official JSON's `data` list (v2.0 rules: empty list = unanswerable)."""
    answers: dict[str, list[str]] = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers[qa["id"]] = [a["text"] for a in qa.get("answers", [])]
    return answers


def evaluate_v1(golds: Mapping[str, list[str]], predictions: Mapping[str, str]) -> dict[str, float]:
    """The official v1.1 result: {'exact_match', 'f1'} in percent over every question (`golds`: qid -> texts)."""
    _warn_missing(golds, predictions)
    em = f1 = 0.0
    for qid, answers in golds.items():
        if qid not in predictions or not answers:
            continue
        prediction = predictions[qid]
        em += max(exact_match(prediction, gold) for gold in answers)
        f1 += max(f1_v1(prediction, gold) for gold in answers)
    total = len(golds)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total, "total": total}


def evaluate_v2(
    golds: Mapping[str, list[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """The official v2.0 result: exact/f1 (after the no-answer threshold), HasAns/NoAns, the best thresholds.

    `golds` maps each question id to its answer texts ([] when unanswerable).

    A question is answered "no answer" when `na_probs[qid] > na_prob_thresh`. Without `na_probs`, every score is
    0, so only the text predictions count (an empty prediction is an abstention), as in the official script.
    """
    # Whether a question has an answer is decided from its raw answer list, before answers that normalise to
    # nothing (like "the" or ".") are dropped for scoring: the official script's order. A question whose only
    # answers normalise to nothing stays answerable, and only an empty prediction matches it.
    has_ans = {qid: bool(answers) for qid, answers in golds.items()}
    golds = {qid: [a for a in answers if normalize_answer(a)] or [""] for qid, answers in golds.items()}
    _warn_missing(golds, predictions)
    raw_exact: dict[str, float] = {}
    raw_f1: dict[str, float] = {}
    for qid, answers in golds.items():
        prediction = predictions.get(qid)
        if prediction is None:
            raw_exact[qid] = raw_f1[qid] = 0.0
            continue
        raw_exact[qid] = float(max(exact_match(prediction, gold) for gold in answers))
        raw_f1[qid] = max(f1_v2(prediction, gold) for gold in answers)
    scores_na = {qid: float((na_probs or {}).get(qid, 0.0)) for qid in golds}
    exact = _apply_threshold(raw_exact, scores_na, has_ans, na_prob_thresh)
    f1 = _apply_threshold(raw_f1, scores_na, has_ans, na_prob_thresh)

    result = _summary(exact, f1, list(golds), "")
    has = [q for q in golds if has_ans[q]]
    no = [q for q in golds if not has_ans[q]]
    if has:
        result.update(_summary(exact, f1, has, "HasAns_"))
    if no:
        result.update(_summary(exact, f1, no, "NoAns_"))
    if na_probs is not None:
        preds = {qid: predictions.get(qid, "") for qid in golds}
        result["best_exact"], result["best_exact_thresh"] = best_threshold(
            preds, raw_exact, scores_na, has_ans
        )
        result["best_f1"], result["best_f1_thresh"] = best_threshold(preds, raw_f1, scores_na, has_ans)
    return result


def _apply_threshold(
    scores: dict[str, float], na_probs: dict[str, float], has_ans: dict[str, bool], thresh: float
) -> dict[str, float]:
    return {
        qid: (float(not has_ans[qid]) if na_probs[qid] > thresh else score) for qid, score in scores.items()
    }


def _summary(exact: dict[str, float], f1: dict[str, float], qids: list[str], prefix: str) -> dict[str, float]:
    total = len(qids)
    return {
        f"{prefix}exact": 100.0 * sum(exact[q] for q in qids) / total,
        f"{prefix}f1": 100.0 * sum(f1[q] for q in qids) / total,
        f"{prefix}total": total,
    }


def best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
) -> tuple[float, float]:
    """The (score %, threshold) that maximises the total when "no answer" is predicted above the threshold.

    The sweep is the official script's: it starts with every question abstaining (one point per unanswerable
    question) and admits questions in increasing na score: an answerable one gains its score, an unanswerable one
    loses its point if the model gave a non-empty text. Ties keep the lowest threshold, as the official script does.

    Two departures make the threshold reproduce the score when applied (`na score > threshold` abstains, as
    `evaluate_v2` and `Predictions.final` apply it), for na scores of any sign: this head's are logit differences,
    often all negative, not the official script's probabilities.
    - When abstaining everywhere wins, the official script returns 0.0, which abstains everywhere only when every
      score is positive; here it is 0.0 in that case (the official figure) and otherwise a value below the lowest
      score.
    - Questions with equal na scores are admitted together (one threshold admits all of them or none), so the
      best is only taken where a threshold can stop; with no ties this is the official sweep's best.
    """
    current = best = float(sum(1 for q in scores if not has_ans[q]))
    best_thresh = _below_all(min((na_probs[q] for q in scores), default=0.0))
    order = sorted(scores, key=lambda q: na_probs[q])
    for i, qid in enumerate(order):
        if has_ans[qid]:
            current += scores[qid]
        elif predictions.get(qid):
            current -= 1.0
        last_of_tie = i + 1 == len(order) or na_probs[order[i + 1]] != na_probs[qid]
        if last_of_tie and current > best:
            best = current
            best_thresh = na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def _below_all(lowest: float) -> float:
    """A threshold every na score exceeds: 0.0 when the scores are all positive (the official script's value),
    else a round number below the lowest (or the next float down, where floats are too sparse for that)."""
    if lowest > 0.0:
        return 0.0
    below = math.floor(lowest) - 1.0
    return below if below < lowest else math.nextafter(lowest, -math.inf)


def _warn_missing(golds: Mapping[str, list[str]], predictions: Mapping[str, str]) -> None:
    missing = [qid for qid in golds if qid not in predictions]
    if missing:
        logger.warning(
            "%d of %d questions have no prediction (scored 0), e.g. %s", len(missing), len(golds), missing[0]
        )


METRIC_SCRIPT = Path(__file__).with_name("squad_metric.py")


def official_scores(
    version: str,
    golds: Mapping[str, list[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """The official scores through the shipped `evaluate` module (what a user computes with `evaluate.load`)."""
    metric = load_local_metric(str(METRIC_SCRIPT), version)
    qids = list(golds)
    references = [{"id": q, "answers": {"text": golds[q], "answer_start": [0] * len(golds[q])}} for q in qids]
    rows = [{"id": q, "prediction_text": predictions.get(q, "")} for q in qids]
    if version == "2.0":
        for row in rows:
            row["no_answer_probability"] = float((na_probs or {}).get(row["id"], 0.0))
        return metric.compute(predictions=rows, references=references, na_prob_thresh=na_prob_thresh)
    return metric.compute(predictions=rows, references=references)
