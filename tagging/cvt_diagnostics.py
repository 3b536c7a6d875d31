"""What each evaluation of a CVT run records and says (`electra.tagging.cvt_train`): the row of losses,
gradient norms and dev scores, the label shares that show a tagger stuck on one label, and the one line a run logs
when it is.

Each row logs the shared encoder's gradient norm per kind of update, the dev label share and the teacher's label
share on unlabeled text; a tagger that labels every dev word alike past its warm-up is said in one line.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

from electra.tagging.cvt_checkpoint import Progress
from electra.tagging.cvt_data import TaggingData
from electra.tagging.cvt_model import CvtEncoder, Vocabulary, primary_argmax
from electra.tagging.cvt_settings import CvtTrainingSettings
from electra.tagging.cvt_task import CvtTask, TaggingTask

TEACHER_SAMPLE = 500  # unlabeled sentences whose teacher predictions each evaluation row summarizes


def evaluation_row(
    task: CvtTask,
    model: CvtEncoder,
    teacher: CvtEncoder,
    data: TaggingData,
    vocab: Vocabulary,
    settings: CvtTrainingSettings,
    progress: Progress,
    started: float,
) -> dict:
    """One evaluation's row: where the run is, its mean losses since the last row, the mean gradient norm of each
    kind of update on the shared encoder (embeddings, character CNN, LSTMs; before clipping), the dev score of the
    weight average `model`; for a tagger, the dev label it gives most and that label's share of the dev words, and
    under CVT the share of the unlabeled words (the first `TEACHER_SAMPLE` sentences) that the `teacher` (the
    current weights) gives its own most frequent label."""
    sums = progress.sums
    scores, predicted = task.evaluate(model, data.dev, vocab, settings)
    row = {
        "step": progress.labeled,
        "updates": progress.updates,
        "seconds": round(time.perf_counter() - started, 1),
        "loss": sums["labeled"] / sums["n"],
        f"dev_{task.metric}": scores[task.metric],
        "grad_labeled": sums.get("grad_labeled", 0.0) / sums["n"],
    }
    if settings.cvt:
        unlabeled_updates = sums.get("m", 0)
        row["cvt_loss"] = sums["unlabeled"] / unlabeled_updates if unlabeled_updates else 0.0
        row["grad_unlabeled"] = (
            sums.get("grad_unlabeled", 0.0) / unlabeled_updates if unlabeled_updates else 0.0
        )
    if isinstance(task, TaggingTask):
        row["dev_top"], row["dev_top_share"] = top_share(tag for tags in predicted for tag in tags)
        if settings.cvt:
            sample = data.unlabeled[:TEACHER_SAMPLE]
            ids = primary_argmax(teacher, sample, vocab, settings.eval_batch_size)
            row["teacher_top"], row["teacher_top_share"] = top_share(vocab.labels[i] for s in ids for i in s)
    return row


def format_row(row: dict) -> str:
    """An evaluation row as one log line: each name and value, floats to four places."""
    return " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())


def top_share(labels: Iterable[str]) -> tuple[str, float]:
    """The most frequent of `labels` and its share of them (("", 0.0) when there are none)."""
    counts = Counter(labels)
    if not counts:
        return "", 0.0
    label, count = counts.most_common(1)[0]
    return label, count / sum(counts.values())


def labels_one(row: dict) -> bool:
    """Whether the evaluated tagger gave every dev word one label in this row."""
    return row.get("dev_top_share") == 1.0


def one_label_warning(seed: int, row: dict, metric: str, end: bool = False) -> str:
    """The one line a run logs when, past its warm-up, the evaluated tagger gives every dev word one label (a
    supervised run may still leave that state; a CVT run that stays in it teaches it to its auxiliary modules);
    `end`: the line of a run that finished in it."""
    when = "finished" if end else f"is past its warm-up at labeled update {row['step']}"
    return (
        f"seed {seed}: warning: the tagger {when} and labels every dev word {row['dev_top']!r} (dev {metric} "
        f"{row[f'dev_{metric}']:.4f}); if that lasts, see --cvt-start and --word-vectors in the tagging docs."
    )
