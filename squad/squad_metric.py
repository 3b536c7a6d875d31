"""SQuAD 1.1 and 2.0 as an `evaluate` metric: `evaluate.load("<this file>", "2.0")`, offline.

Inputs follow the hub's `squad` / `squad_v2` metrics: predictions `{"id", "prediction_text"}` (plus
`"no_answer_probability"` for 2.0), references `{"id", "answers": {"text": [...], "answer_start": [...]}}`. The
result is the official evaluation scripts' (`electra.squad.metrics`, tested against them): `exact_match`/`f1` for 1.1;
`exact`, `f1`, HasAns/NoAns and the best thresholds for 2.0, in percent. `compute(..., na_prob_thresh=t)` sets
2.0's no-answer threshold (the official script's default, 1.0).
"""

import datasets
import evaluate

from electra.squad.metrics import evaluate_v1, evaluate_v2

_DESCRIPTION = "The official SQuAD v1.1 / v2.0 evaluation (electra's electra.squad.metrics)."
_CITATION = "Rajpurkar et al., 2016 and 2018. SQuAD: 100,000+ Questions; Know What You Don't Know."
_KWARGS = "predictions: {id, prediction_text[, no_answer_probability]}; references: {id, answers}; config: 1.1 or 2.0."
VERSIONS = ("1.1", "2.0")


class Squad(evaluate.Metric):
    def _info(self):
        if self.config_name not in VERSIONS:
            raise KeyError(f"{self.config_name!r}: give the SQuAD version, 1.1 or 2.0.")
        prediction = {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")}
        if self.config_name == "2.0":
            prediction["no_answer_probability"] = datasets.Value("float64")  # thresholds are compared exactly
        answers = datasets.Sequence(
            {"text": datasets.Value("string"), "answer_start": datasets.Value("int32")}
        )
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS,
            features=datasets.Features(
                {
                    "predictions": prediction,
                    "references": {"id": datasets.Value("string"), "answers": answers},
                }
            ),
        )

    def _compute(self, predictions, references, na_prob_thresh: float = 1.0):
        golds = {ref["id"]: list(ref["answers"]["text"]) for ref in references}
        texts = {pred["id"]: pred["prediction_text"] for pred in predictions}
        if self.config_name == "1.1":
            return evaluate_v1(golds, texts)
        na_probs = {pred["id"]: float(pred["no_answer_probability"]) for pred in predictions}
        return evaluate_v2(golds, texts, na_probs, na_prob_thresh)
