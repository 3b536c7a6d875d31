"""Word error rate as an `evaluate` metric: `evaluate.load("<this file>")`, offline.

The number `electra rescore` reports (`electra.pll.wer.corpus_wer`): jiwer's corpus WER (total edits over total reference
words) after lowercasing and splitting on whitespace. The hub's `wer` metric is jiwer without the lowercasing.
"""

import datasets
import evaluate

from electra.pll.wer import corpus_wer

_DESCRIPTION = "Corpus word error rate, case-insensitive (electra's electra.pll.wer, computed by jiwer)."
_KWARGS = "predictions: hypothesis strings; references: reference strings, in the same order."


class WordErrorRate(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
        )

    def _compute(self, predictions, references):
        return {"wer": corpus_wer(references, predictions)}
