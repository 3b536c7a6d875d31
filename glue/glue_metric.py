"""GLUE as an `evaluate` metric: `evaluate.load("<this file>", "mrpc")`, offline (see electra.core.local_metrics).

Inputs are label indices (the task's label order, as the hub's `glue` metric takes them), floats for STS-B. The
result is `electra.glue.metrics.compute_metrics`: CoLA `mcc` and `accuracy`, MRPC/QQP `accuracy` and `f1` of class "1",
STS-B `pearson` and `spearman`, `accuracy` elsewhere, as fractions; the values equal the hub metric's
(`matthews_correlation`, `spearmanr`: the same numbers under the names the fine-tuner's tables use).
"""

import datasets
import evaluate

from electra.glue.metrics import compute_metrics
from electra.glue.tasks import TASKS, get_task

_DESCRIPTION = "GLUE dev metrics as the ELECTRA paper reports them (electra's electra.glue.metrics)."
_CITATION = "Wang et al., 2019. GLUE: A Multi-Task Benchmark and Analysis Platform for Natural Language Understanding."
_KWARGS = "predictions: label indices (floats for stsb); references: the same; config name: a GLUE task."


class Glue(evaluate.Metric):
    def _info(self):
        if self.config_name not in TASKS and self.config_name.lower() not in (
            "mnli_matched",
            "mnli_mismatched",
        ):
            raise KeyError(f"{self.config_name!r} is not a GLUE task; give one of {', '.join(TASKS)}.")
        kind = "float64" if get_task(self.config_name).is_regression else "int64"
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS,
            features=datasets.Features(
                {"predictions": datasets.Value(kind), "references": datasets.Value(kind)}
            ),
        )

    def _compute(self, predictions, references):
        return compute_metrics(get_task(self.config_name), predictions, references)
