"""GLUE's metrics, as the benchmark defines them (scikit-learn and scipy do the arithmetic).

CoLA: Matthews correlation. MRPC and QQP: F1 of the positive class ("1") and accuracy. STS-B: Pearson and Spearman
correlation (the ELECTRA paper reports Spearman). Everything else: accuracy. Scores are fractions in [0, 1] / [-1, 1];
tables multiply by 100 as the paper does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from electra.core.local_metrics import load_local_metric
from electra.glue.tasks import TaskSpec


def accuracy(predictions: Sequence, labels: Sequence) -> float:
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float((predictions == labels).mean())


def binary_f1(predictions: Sequence, labels: Sequence, positive=1) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(labels, predictions, pos_label=positive, average="binary", zero_division=0.0))


def matthews(predictions: Sequence, labels: Sequence) -> float:
    from sklearn.metrics import matthews_corrcoef

    return float(matthews_corrcoef(labels, predictions))


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    from scipy.stats import pearsonr

    if np.std(predictions) == 0 or np.std(labels) == 0:
        return (
            math.nan
        )  # undefined for a constant input; reported as such rather than as a warning-laden number
    return float(pearsonr(predictions, labels)[0])


def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
    from scipy.stats import spearmanr

    if np.std(predictions) == 0 or np.std(labels) == 0:
        return math.nan
    return float(spearmanr(predictions, labels)[0])


def compute_metrics(spec: TaskSpec, predictions: Sequence, labels: Sequence) -> dict[str, float]:
    """All of a task's GLUE metrics. Classification inputs are label indices into spec.labels; STS-B takes floats."""
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    if spec.is_regression:
        return {"pearson": pearson(predictions, labels), "spearman": spearman(predictions, labels)}
    result = {"accuracy": accuracy(predictions, labels)}
    if spec.primary_metric == "mcc":
        result = {"mcc": matthews(predictions, labels), **result}
    if spec.name in ("mrpc", "qqp"):
        result["f1"] = binary_f1(predictions, labels, positive=spec.labels.index("1"))
    return result


METRIC_SCRIPT = Path(__file__).with_name("glue_metric.py")


def task_scores(spec: TaskSpec, predictions: Sequence, labels: Sequence) -> dict[str, float]:
    """`compute_metrics` through the shipped `evaluate` module (what a user computes with `evaluate.load`)."""
    metric = load_local_metric(str(METRIC_SCRIPT), spec.name)
    values = [float(x) for x in predictions] if spec.is_regression else [int(x) for x in predictions]
    refs = [float(x) for x in labels] if spec.is_regression else [int(x) for x in labels]
    return metric.compute(predictions=values, references=refs)
