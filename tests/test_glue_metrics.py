"""GLUE metrics against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from electra.glue.metrics import accuracy, binary_f1, compute_metrics, matthews, pearson, spearman
from electra.glue.tasks import get_task

# predictions vs labels: TP = 2 (positions 0, 4), FP = 1 (1), FN = 1 (3), TN = 1 (2)
PRED = [1, 1, 0, 0, 1]
GOLD = [1, 0, 0, 1, 1]


def test_accuracy():
    assert accuracy(PRED, GOLD) == pytest.approx(3 / 5)


def test_f1_of_positive_class():
    # F1 = 2TP / (2TP + FP + FN) = 4 / 6
    assert binary_f1(PRED, GOLD) == pytest.approx(2 / 3)
    # the negative class as positive: TP' = 1, FP' = 1, FN' = 1 -> 2 / 4
    assert binary_f1(PRED, GOLD, positive=0) == pytest.approx(0.5)


def test_matthews_correlation():
    # (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 - 1) / sqrt(3*3*2*2) = 1/6
    assert matthews(PRED, GOLD) == pytest.approx(1 / 6)
    assert matthews([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert matthews([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0  # constant prediction: defined as 0


def test_pearson_and_spearman():
    # x - mean = (-1, 0, 1), y - mean = (-1, 1, 0): cov 1, both variances 2 -> 0.5
    assert pearson([1.0, 2.0, 3.0], [1.0, 3.0, 2.0]) == pytest.approx(0.5)
    # ranks differ by d = (0, 1, 1, 0): 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)
    # Spearman only sees ranks: a monotone but non-linear relation is 1, Pearson is not
    assert spearman([1.0, 2.0, 3.0], [1.0, 10.0, 100.0]) == pytest.approx(1.0)
    assert pearson([1.0, 2.0, 3.0], [1.0, 10.0, 100.0]) < 0.95
    assert math.isnan(pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))


def test_compute_metrics_per_task():
    assert compute_metrics(get_task("cola"), PRED, GOLD) == pytest.approx({"mcc": 1 / 6, "accuracy": 0.6})
    assert compute_metrics(get_task("mrpc"), PRED, GOLD) == pytest.approx({"accuracy": 0.6, "f1": 2 / 3})
    assert compute_metrics(get_task("qqp"), PRED, GOLD) == pytest.approx({"accuracy": 0.6, "f1": 2 / 3})
    assert compute_metrics(get_task("rte"), PRED, GOLD) == pytest.approx({"accuracy": 0.6})
    stsb = compute_metrics(get_task("stsb"), [1.0, 2.0, 3.0], [1.0, 3.0, 2.0])
    assert stsb == pytest.approx({"pearson": 0.5, "spearman": 0.5})
    with pytest.raises(ValueError):
        compute_metrics(get_task("rte"), [1, 0], [1])


@pytest.mark.parametrize("task", ["cola", "mrpc", "stsb", "rte", "qqp"])
def test_the_evaluate_module_equals_the_benchmark_formulas(task):
    """`evaluate.load("glue/glue_metric.py", task)` gives the numbers of the formulas the hub's GLUE script uses
    (scikit-learn's F1 and MCC, scipy's Pearson and Spearman), offline."""
    import evaluate
    import numpy as np
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    from electra.glue.metrics import METRIC_SCRIPT, task_scores

    rng = np.random.default_rng(0)
    spec = get_task(task)
    if spec.is_regression:
        labels = rng.uniform(0, 5, 40)
        predictions = labels + rng.normal(0, 1, 40)
    else:
        labels = rng.integers(0, 2, 40)
        predictions = np.where(rng.uniform(size=40) < 0.7, labels, 1 - labels)
    got = evaluate.load(str(METRIC_SCRIPT), task).compute(predictions=predictions, references=labels)
    if spec.is_regression:
        expected = {
            "pearson": pearsonr(predictions, labels)[0],
            "spearman": spearmanr(predictions, labels)[0],
        }
    else:
        expected = {"accuracy": float((predictions == labels).mean())}
        if task == "cola":
            expected["mcc"] = matthews_corrcoef(labels, predictions)
        if task in ("mrpc", "qqp"):
            expected["f1"] = f1_score(labels, predictions)
    assert got == pytest.approx(expected, abs=1e-12)
    assert task_scores(spec, predictions, labels) == pytest.approx(got)
