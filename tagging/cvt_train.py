"""Training a CVT model, the tagger or the parser (a `CvtTask` says which): supervised, or Cross-View Training with
unlabeled text (`--cvt`), as the reference does it.

One update is one minibatch: labeled and unlabeled updates alternate 1:1 under CVT, so a run of N labeled updates
makes 2N updates in all, and the learning-rate schedule counts both kinds, as the reference code's global step does.
The supervised arm is the same model and the same loop with the unlabeled updates left out. What the reference
sets beyond the text (tensorflow/models `research/cvt_text`, see ../shared/docs/REFERENCE.md):

- labeled updates: dropout 0.5, label smoothing 0.1 on the primary module; unlabeled updates: dropout 0.2, the
  auxiliary modules toward the primary module's predictions made without dropout and without gradient;
- SGD with momentum 0.9, rate 0.5·min(1, t/warmup)/(1 + 0.005·√t) (t: updates so far), global-norm clip 1.0;
- an exponential moving average of the weights (0.998) is the model that is evaluated and kept; its decay is
  min(0.998, (1+n)/(10+n)) after n updates (TensorFlow's `num_updates` form), so a short run's average is not
  mostly its random start;
- the dev set is scored every `eval_every` labeled updates and the best-scoring average is the result;
- chunking and NER train on BIOES tags (converted from the file's BIO), decode greedily (per-word argmax, no CRF)
  and are scored as spans on the tags converted back; other tags (part of speech) by accuracy.

Beyond the reference, for few-label runs and for finding out why one fails: `--cvt-start N` makes the first N
labeled updates alone (unlabeled ones start after them), `--unlabeled-trains modules` keeps the unlabeled updates
off the shared encoder (a diagnostic), and each evaluation row logs the encoder's gradient norm per kind of update,
the dev label share and the teacher's label share on unlabeled text; a tagger that labels every dev word alike past
its warm-up is said in one line.

The parts live beside this loop: the task (`cvt_task`), the data (`cvt_data`), one step (`cvt_step`), each
evaluation's row and warning (`cvt_diagnostics`), checkpoints (`cvt_checkpoint`) and the seeds (`cvt_seeds`).

This loop is not `electra.training.engine`: that engine's optimizer is AdamW with a linear schedule and it keeps no
weight average, while CVT's recipe is SGD with momentum, its own schedule, an EMA and two kinds of batches.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from electra.core.errors import UserError
from electra.core.files import write_json_atomically
from electra.tagging.cvt_checkpoint import CHECKPOINT_FILE, Progress, load_checkpoint, save_checkpoint
from electra.tagging.cvt_data import TaggingData
from electra.tagging.cvt_diagnostics import evaluation_row, format_row, labels_one, one_label_warning
from electra.tagging.cvt_model import CvtEncoder, Vocabulary, build_vocabulary, save_tagger
from electra.tagging.cvt_settings import CvtTrainingSettings
from electra.tagging.cvt_step import Streams, Updater, batches, train_step

RESULTS_FILE = "results.json"
SCORES = ("f1", "accuracy", "uas", "las")  # the scores kept at each evaluation and summarized over seeds


def train_one(
    settings: CvtTrainingSettings,
    data: TaggingData,
    seed: int,
    output: Path | None = None,
    log: Callable[[str], None] = print,
    resume: bool = False,
) -> dict:
    """Train one seed; return its record: the best dev score, the test score of that same weight average, the
    step it came at, the wall time, and the evaluation history. With `output`, the best average is saved there
    (`save_tagger`) with the test predictions (`test_predictions.txt`: the test file's columns plus the
    prediction), and with `save_every` a checkpoint every so many labeled updates, which `resume` continues from
    (`electra.tagging.cvt_checkpoint`)."""
    torch.manual_seed(seed)
    rng = random.Random(seed)  # the batch streams' only source of randomness: a resume replays it
    task = data.task
    train = [(w, task.training_target(t)) for w, t in data.train]
    labels = task.labels([t for _, t in train])
    vocab, model = _vocabulary_and_model(settings, data, train, labels)
    updater = Updater(model, settings)
    unlabeled = batches(data.unlabeled, settings.batch_size, rng) if settings.cvt else None
    streams = Streams(batches(train, settings.batch_size, rng), unlabeled)
    if settings.cvt and not data.unlabeled:
        raise UserError("--cvt needs unlabeled text: pass --unlabeled CORPUS.")

    checkpoint = None if output is None else output / CHECKPOINT_FILE
    identity = asdict(settings) | {"seed": seed, "train": len(train), "unlabeled": len(data.unlabeled)}
    identity |= {"words": len(vocab.words), "labels": labels}
    progress, best_state = Progress(), None
    if resume and checkpoint is not None and checkpoint.is_file():
        progress, best_state = _resume(checkpoint, updater, streams, identity)
        log(f"seed {seed}: resumed from {checkpoint} at labeled update {progress.labeled}")
    started = time.perf_counter() - progress.seconds
    key = task.metric
    warned = False
    while progress.labeled < settings.max_steps:
        train_step(task, updater, streams, vocab, progress)
        if progress.labeled % settings.eval_every == 0 or progress.labeled == settings.max_steps:
            row = evaluation_row(task, updater.average.model, model, data, vocab, settings, progress, started)
            progress.sums = {"labeled": 0.0, "unlabeled": 0.0, "n": 0}
            if not warned and labels_one(row) and progress.updates >= settings.warmup_steps:
                warned = True
                log(one_label_warning(seed, row, key))
            if progress.best is None or row[f"dev_{key}"] > progress.best[f"dev_{key}"]:
                best_state = _keep_best(row, updater.average.model, data, vocab, settings)
                progress.best = row
            progress.history.append(row)
            log(format_row(row))
        if checkpoint is not None and settings.save_every and progress.labeled % settings.save_every == 0:
            progress.seconds = time.perf_counter() - started
            _save_checkpoint(checkpoint, updater, best_state, progress, identity)

    assert best_state is not None and progress.best is not None
    if progress.history and labels_one(progress.history[-1]):
        log(one_label_warning(seed, progress.history[-1], key, end=True))
    model.load_state_dict(best_state)
    record = {
        "seed": seed,
        "best": progress.best,
        "seconds": round(time.perf_counter() - started, 1),
        "history": progress.history,
    }
    if output is not None:
        _save_result(output, model, vocab, record, data, settings)
    return record


def _vocabulary_and_model(
    settings: CvtTrainingSettings, data: TaggingData, train: list, labels: list[str]
) -> tuple[Vocabulary, CvtEncoder]:
    """The vocabulary of the text the run trains on (the labeled sentences, and the unlabeled ones under CVT; the
    pretrained vectors' words first) and a new model of the task, its embeddings started from those vectors."""
    text = [w for w, _ in train] + (data.unlabeled if settings.cvt else [])
    vector_words = data.vectors[0] if data.vectors is not None else ()
    vocab = build_vocabulary(text, labels, settings.min_word_count, settings.max_words, vector_words)
    model = data.task.new_model(_model_shape(settings, vocab))
    if data.vectors is not None:
        start_from_vectors(model, vocab, *data.vectors)
    return vocab, model


def _resume(
    checkpoint: Path, updater: Updater, streams: Streams, identity: dict
) -> tuple[Progress, dict[str, torch.Tensor] | None]:
    """Load the checkpoint into the model, its average and its optimizer (refused when `identity` differs) and
    draw again the batches already trained on; return the run's progress and its best average so far."""
    progress, updater.average.updates, best_state = load_checkpoint(
        checkpoint, updater.model, updater.average.model, updater.optimizer, identity
    )
    streams.replay(progress.labeled, updater.settings.cvt_start)
    return progress, best_state


def _save_checkpoint(
    checkpoint: Path,
    updater: Updater,
    best_state: dict[str, torch.Tensor] | None,
    progress: Progress,
    identity: dict,
) -> None:
    """Save the model, its average, its optimizer, the best average so far and the progress (`resume` reads it)."""
    average = updater.average
    save_checkpoint(
        checkpoint,
        updater.model,
        average.model,
        average.updates,
        updater.optimizer,
        best_state,
        progress,
        identity,
    )


def _keep_best(
    row: dict, average: CvtEncoder, data: TaggingData, vocab: Vocabulary, settings: CvtTrainingSettings
) -> dict[str, torch.Tensor]:
    """A new best dev row: add the test scores of the same weight average to `row` (scored only where dev
    improves: the figure reported is test at best dev) and return a copy of that average's weights."""
    if data.test:
        test_scores = data.task.evaluate(average, data.test, vocab, settings)[0]
        row |= {f"test_{name}": value for name, value in test_scores.items() if name in SCORES}
    return {k: v.detach().clone() for k, v in average.state_dict().items()}


def start_from_vectors(
    model: CvtEncoder, vocab: Vocabulary, words: Sequence[str], vectors: torch.Tensor
) -> int:
    """Copy pretrained `vectors` (rows of `words`, normalized) into the word embeddings of the words the
    vocabulary holds; the others keep their random start. Returns how many rows were set."""
    ids = {w: i for i, w in enumerate(vocab.words)}
    rows = [(ids[w], j) for j, w in enumerate(words) if w in ids]
    if rows:
        target, source = zip(*rows)
        with torch.no_grad():
            model.word_embeddings.weight[list(target)] = vectors[list(source)].to(
                model.word_embeddings.weight
            )
    return len(rows)


def _model_shape(settings: CvtTrainingSettings, vocab: Vocabulary) -> dict:
    """The model's configuration from the settings and the vocabulary (a task adds its own fields)."""
    return {
        "vocab_words": len(vocab.words),
        "vocab_chars": len(vocab.chars),
        "num_labels": len(vocab.labels),
        "word_dim": settings.word_dim,
        "char_dim": settings.char_dim,
        "char_filters": settings.char_filters,
        "lstm1": settings.lstm1,
        "lstm2": settings.lstm2,
        "projection": settings.projection,
        "modules": settings.module_names,
    }


def _save_result(
    output: Path,
    model: CvtEncoder,
    vocab: Vocabulary,
    record: dict,
    data: TaggingData,
    settings: CvtTrainingSettings,
) -> None:
    """The kept model (`save_tagger`), its test predictions, and the run's record (written last: a seed with a
    results file is finished)."""
    save_tagger(model, vocab, output, {"settings": asdict(settings), "seed": record["seed"]})
    if data.test:
        _, predicted = data.task.evaluate(model, data.test, vocab, settings)
        data.task.write_predictions(output / "test_predictions.txt", data.test_sentences, predicted)
    write_json_atomically(output / RESULTS_FILE, record, indent=2)
