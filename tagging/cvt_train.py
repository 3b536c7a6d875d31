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

This loop is not `electra.training.engine`: that engine's optimizer is AdamW with a linear schedule and it keeps no
weight average, while CVT's recipe is SGD with momentum, its own schedule, an EMA and two kinds of batches.
"""

from __future__ import annotations

import copy
import math
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from electra.core.errors import UserError
from electra.core.files import read_json_record, write_json_atomically
from electra.finetune.seeds import SeedJob, run_seeds
from electra.tagging.conll import Sentence, is_span_scheme, read_conll, to_bio, to_bioes, write_conll
from electra.tagging.cvt_checkpoint import CHECKPOINT_FILE, Progress, load_checkpoint, save_checkpoint
from electra.tagging.cvt_model import (
    Batch,
    CvtEncoder,
    CvtTagger,
    CvtTaggerConfig,
    Vocabulary,
    build_vocabulary,
    cvt_loss,
    make_batch,
    primary_argmax,
    save_tagger,
    supervised_loss,
)
from electra.tagging.cvt_settings import CvtSettings, CvtTrainingSettings
from electra.tagging.spans import score_tags
from electra.tagging.unlabeled import read_unlabeled
from electra.tagging.word_vectors import read_word_vectors

RESULTS_FILE = "results.json"
SCORES = ("f1", "accuracy", "uas", "las")  # the scores kept at each evaluation and summarized over seeds
SHARED = ("word_embeddings", "char_cnn", "lstm1", "lstm2")  # the encoder's parts every module reads
TEACHER_SAMPLE = 500  # unlabeled sentences whose teacher predictions each evaluation row summarizes


class CvtTask(Protocol):
    """What the loop needs to know of a task (tagging here, parsing in `electra.tagging.parse_task`): its model,
    its labeled loss, how it is scored and how predictions are written. A split's items are (words, target)."""

    metric: str  # the score that picks the best evaluation ("f1", "accuracy", "las", "uas")

    def labels(self, targets: Sequence) -> list[str]: ...

    def training_target(self, target: Any) -> Any: ...

    def new_model(self, config: dict) -> CvtEncoder: ...

    def labeled_loss(
        self,
        model: CvtEncoder,
        batch: Batch,
        targets: Sequence,
        vocab: Vocabulary,
        settings: CvtTrainingSettings,
    ) -> torch.Tensor: ...

    def unlabeled_loss(
        self, model: CvtEncoder, batch: Batch, settings: CvtTrainingSettings
    ) -> torch.Tensor: ...

    def evaluate(
        self, model: CvtEncoder, pairs: Sequence, vocab: Vocabulary, settings: CvtTrainingSettings
    ) -> tuple[dict[str, float], list]: ...

    def write_predictions(self, path: Path, sentences: Sequence[Sentence], predictions: list) -> None: ...


@dataclass
class TaggingData:
    """Words and targets of each split (tags, or trees for the parser); `test_sentences` keeps the test file's
    rows for writing predictions back; `task` is what the items are and how they are scored."""

    train: list[tuple[list[str], Any]]
    dev: list[tuple[list[str], Any]]
    test: list[tuple[list[str], Any]]
    test_sentences: list[Sentence]
    unlabeled: list[list[str]]
    task: CvtTask
    vectors: tuple[list[str], torch.Tensor] | None = None  # `--word-vectors`: (normalized words, vectors)


def load_data(
    settings: CvtSettings,
    train: str | Path,
    test: str | Path | None,
    dev: str | Path | None = None,
    unlabeled: str | Path | None = None,
    columns: str | None = None,
    label: str | None = None,
) -> TaggingData:
    """Read the column files (`electra.tagging.conll`) and the unlabeled corpus; the splits are `hold_out`'s."""
    train_sentences = read_conll(train, columns, label)
    dev_pairs = None if dev is None else [(s.words, s.labels) for s in read_conll(dev, columns, label)]
    pairs, dev_pairs = hold_out([(s.words, s.labels) for s in train_sentences], dev_pairs, settings, train)
    test_sentences = read_conll(test, columns, label) if test is not None else []
    test_pairs = [(s.words, s.labels) for s in test_sentences]
    spans = is_span_scheme(tag for _, tags in pairs for tag in tags)
    task = TaggingTask(spans, settings.tag_scheme == "bioes")
    corpus = read_corpus(settings, unlabeled)
    return TaggingData(pairs, dev_pairs, test_pairs, test_sentences, corpus, task, read_vectors(settings))


def read_vectors(settings: CvtTrainingSettings) -> tuple[list[str], torch.Tensor] | None:
    """`--word-vectors`, read and checked once (`electra.tagging.word_vectors`; at most `max_vectors` of them)."""
    if settings.word_vectors is None:
        return None
    return read_word_vectors(settings.word_vectors, settings.word_dim, settings.max_vectors)


def read_corpus(settings: CvtTrainingSettings, unlabeled: str | Path | None) -> list[list[str]]:
    """The unlabeled sentences CVT learns from (none for a supervised run)."""
    if not settings.cvt or unlabeled is None:
        return []
    return read_unlabeled(unlabeled, settings.max_unlabeled)


def hold_out(
    pairs: list, dev: list | None, settings: CvtTrainingSettings, source: str | Path
) -> tuple[list, list]:
    """(train, dev): without `dev`, the first `dev_sentences` of a seed-0 shuffle of `pairs` are the dev set;
    then the first `train_fraction` of the rest (same shuffle) train, the same subset for every seed."""
    order = list(range(len(pairs)))
    random.Random(0).shuffle(order)
    if dev is None:
        if settings.dev_sentences >= len(pairs):
            raise UserError(
                f"--dev-sentences {settings.dev_sentences} leaves nothing of the {len(pairs)} in {source} to train "
                "on; hold out fewer, or give --dev FILE."
            )
        dev = [pairs[i] for i in order[: settings.dev_sentences]]
        order = order[settings.dev_sentences :]
    train = [pairs[i] for i in order]
    return train[: max(1, math.ceil(settings.train_fraction * len(train)))], dev


def _batches(items: Sequence, batch_size: int, rng: random.Random) -> Iterator[list]:
    """Endless minibatches: each epoch shuffled, then cut in runs of similar length (less padding)."""
    while True:
        order = list(range(len(items)))
        rng.shuffle(order)
        pool = batch_size * 20
        chunks = []
        for start in range(0, len(order), pool):
            block = sorted(order[start : start + pool], key=lambda i: len(_words(items[i])))
            chunks += [block[i : i + batch_size] for i in range(0, len(block), batch_size)]
        rng.shuffle(chunks)
        for chunk in chunks:
            yield [items[i] for i in chunk]


def _words(item) -> list[str]:
    return item[0] if isinstance(item, tuple) else item


def _label_tensor(tags: Sequence[Sequence[str]], vocab: Vocabulary, width: int) -> torch.Tensor:
    labels = torch.full((len(tags), width), -1, dtype=torch.long)
    for i, sentence in enumerate(tags):
        labels[i, 1 : len(sentence) + 1] = torch.tensor([vocab.label_ids[t] for t in sentence])
    return labels


def predict(
    model: CvtTagger, sentences: Sequence[Sequence[str]], vocab: Vocabulary, batch_size: int
) -> list[list[str]]:
    """Greedy tags of the primary module (the argmax at each word), in the model's label scheme."""
    return [[vocab.labels[j] for j in ids] for ids in primary_argmax(model, sentences, vocab, batch_size)]


@dataclass
class TaggingTask:
    """Tagging as a CVT task: span tags (chunks, entities) scored by span F1 and trained as BIOES when `bioes`;
    other tags (part of speech) by accuracy."""

    spans: bool
    bioes: bool = True

    @property
    def metric(self) -> str:
        return "f1" if self.spans else "accuracy"

    def training_target(self, tags: list[str]) -> list[str]:
        return to_bioes(tags) if self.spans and self.bioes else tags

    def labels(self, targets: Sequence[list[str]]) -> list[str]:
        labels = sorted({tag for tags in targets for tag in tags})
        return (["O"] if "O" in labels else []) + [t for t in labels if t != "O"]

    def new_model(self, config: dict) -> CvtTagger:
        return CvtTagger(CvtTaggerConfig(**config))

    def labeled_loss(
        self,
        model: CvtTagger,
        batch: Batch,
        targets: Sequence,
        vocab: Vocabulary,
        settings: CvtTrainingSettings,
    ) -> torch.Tensor:
        labels = _label_tensor(targets, vocab, batch.words.shape[1])
        return supervised_loss(model, batch, labels, settings.labeled_dropout, settings.label_smoothing)

    def unlabeled_loss(self, model: CvtTagger, batch: Batch, settings: CvtTrainingSettings) -> torch.Tensor:
        return cvt_loss(model, batch, settings.unlabeled_dropout, model.config.modules)[0]

    def evaluate(
        self, model: CvtTagger, pairs: Sequence, vocab: Vocabulary, settings: CvtTrainingSettings
    ) -> tuple[dict[str, float], list[list[str]]]:
        """Scores against the file's own tags (span F1 for span tags, token accuracy always) and the
        predictions, converted back to BIO when trained as BIOES."""
        predicted = predict(model, [w for w, _ in pairs], vocab, settings.eval_batch_size)
        if self.spans:
            predicted = [to_bio(tags) for tags in predicted]
        return score_tags([t for _, t in pairs], predicted, self.spans), predicted

    def write_predictions(self, path: Path, sentences: Sequence[Sentence], predictions: list) -> None:
        write_conll(path, sentences, predictions)


class WeightAverage:
    """An exponential moving average of a model's weights, kept in a copy of the model (the one evaluated)."""

    def __init__(self, model: CvtTagger, decay: float):
        self.model = copy.deepcopy(model)
        self.decay = decay
        self.updates = 0

    @torch.no_grad()
    def update(self, model: CvtTagger) -> None:
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for average, current in zip(self.model.parameters(), model.parameters()):
            average.lerp_(current, 1.0 - decay)


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
    text = [w for w, _ in train] + (data.unlabeled if settings.cvt else [])
    vector_words = data.vectors[0] if data.vectors is not None else ()
    vocab = build_vocabulary(text, labels, settings.min_word_count, settings.max_words, vector_words)
    model = task.new_model(_model_shape(settings, vocab))
    if data.vectors is not None:
        start_from_vectors(model, vocab, *data.vectors)
    shared = [p for name, p in model.named_parameters() if name.split(".")[0] in SHARED]
    average = WeightAverage(model, settings.ema_decay)
    optimizer = torch.optim.SGD(model.parameters(), lr=settings.learning_rate, momentum=settings.momentum)
    labeled = _batches(train, settings.batch_size, rng)
    unlabeled = _batches(data.unlabeled, settings.batch_size, rng) if settings.cvt else None
    if settings.cvt and not data.unlabeled:
        raise UserError("--cvt needs unlabeled text: pass --unlabeled CORPUS.")

    checkpoint = None if output is None else output / CHECKPOINT_FILE
    identity = asdict(settings) | {"seed": seed, "train": len(train), "unlabeled": len(data.unlabeled)}
    identity |= {"words": len(vocab.words), "labels": labels}
    progress, best_state = Progress(), None
    if resume and checkpoint is not None and checkpoint.is_file():
        progress, average.updates, best_state = load_checkpoint(
            checkpoint, model, average.model, optimizer, identity
        )
        for step in range(1, progress.labeled + 1):  # the batches already trained on, drawn again in order
            next(labeled)
            if unlabeled is not None and step > settings.cvt_start:
                next(unlabeled)
        log(f"seed {seed}: resumed from {checkpoint} at labeled update {progress.labeled}")
    started = time.perf_counter() - progress.seconds
    key = task.metric
    warned = False

    def update(loss: torch.Tensor, kind: str) -> None:
        """One SGD step on `loss` of a `kind` of batch (labeled, unlabeled); the shared encoder's gradient norm,
        before clipping, is summed for the evaluation rows."""
        progress.updates += 1
        for group in optimizer.param_groups:
            group["lr"] = settings.rate(progress.updates)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad.norm() for p in shared if p.grad is not None]
        norm = float(torch.stack(grads).norm()) if grads else 0.0
        progress.sums[f"grad_{kind}"] = progress.sums.get(f"grad_{kind}", 0.0) + norm
        if kind == "unlabeled" and settings.unlabeled_trains == "modules":
            for parameter in shared:  # no gradient: SGD leaves them (and their momentum) alone this step
                parameter.grad = None
        if settings.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        average.update(model)

    while progress.labeled < settings.max_steps:
        progress.labeled += 1
        model.train()
        words, targets = zip(*next(labeled))
        batch = make_batch(words, vocab, model.config.max_word_length)
        loss = task.labeled_loss(model, batch, targets, vocab, settings)
        update(loss, "labeled")
        progress.sums["labeled"] += float(loss.detach())
        progress.sums["n"] += 1
        if unlabeled is not None and progress.labeled > settings.cvt_start:
            loss = task.unlabeled_loss(
                model, make_batch(next(unlabeled), vocab, model.config.max_word_length), settings
            )
            update(loss, "unlabeled")
            progress.sums["unlabeled"] += float(loss.detach())
            progress.sums["m"] = progress.sums.get("m", 0) + 1
        if progress.labeled % settings.eval_every == 0 or progress.labeled == settings.max_steps:
            row = _evaluation_row(task, average.model, model, data, vocab, settings, progress, started)
            progress.sums = {"labeled": 0.0, "unlabeled": 0.0, "n": 0}
            if not warned and row.get("dev_top_share") == 1.0 and progress.updates >= settings.warmup_steps:
                warned = True
                log(one_label_warning(seed, row, key))
            if progress.best is None or row[f"dev_{key}"] > progress.best[f"dev_{key}"]:
                if data.test:  # scored only where dev improves: the figure reported is test at best dev
                    test_scores = task.evaluate(average.model, data.test, vocab, settings)[0]
                    row |= {f"test_{name}": value for name, value in test_scores.items() if name in SCORES}
                progress.best = row
                best_state = {k: v.detach().clone() for k, v in average.model.state_dict().items()}
            progress.history.append(row)
            log(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
        if checkpoint is not None and settings.save_every and progress.labeled % settings.save_every == 0:
            progress.seconds = time.perf_counter() - started
            save_checkpoint(
                checkpoint, model, average.model, average.updates, optimizer, best_state, progress, identity
            )

    assert best_state is not None and progress.best is not None
    if progress.history and progress.history[-1].get("dev_top_share") == 1.0:
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


def one_label_warning(seed: int, row: dict, metric: str, end: bool = False) -> str:
    """The one line a run logs when, past its warm-up, the evaluated tagger gives every dev word one label (a
    supervised run may still leave that state; a CVT run that stays in it teaches it to its auxiliary modules);
    `end`: the line of a run that finished in it."""
    when = "finished" if end else f"is past its warm-up at labeled update {row['step']}"
    return (
        f"seed {seed}: warning: the tagger {when} and labels every dev word {row['dev_top']!r} (dev {metric} "
        f"{row[f'dev_{metric}']:.4f}); if that lasts, see --cvt-start and --word-vectors in the tagging docs."
    )


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


def _evaluation_row(
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


def top_share(labels: Iterable[str]) -> tuple[str, float]:
    """The most frequent of `labels` and its share of them (("", 0.0) when there are none)."""
    counts = Counter(labels)
    if not counts:
        return "", 0.0
    label, count = counts.most_common(1)[0]
    return label, count / sum(counts.values())


@dataclass
class CvtSeeds(SeedJob[dict]):
    """The seeds of `train_seeds`, for `electra.finetune.seeds.run_seeds`: each run's record is its result (no model
    is kept beyond each seed's own folder)."""

    settings: CvtTrainingSettings
    data: TaggingData
    output: Path | None
    log: Callable[[str], None]
    resume: bool

    def folder(self, seed: int) -> Path | None:
        return None if self.output is None else self.output / f"seed-{seed}"

    def finished(self, seed: int) -> dict | None:
        folder = self.folder(seed)
        finished = None if folder is None or not self.resume else read_json_record(folder / RESULTS_FILE)
        if finished is not None and finished.get("best", {}).get("step") is not None:
            self.log(f"seed {seed}: finished earlier, reusing {folder / RESULTS_FILE}")
            return finished
        return None

    def train(self, seed: int, first: bool) -> tuple[dict, None]:
        kind = "CVT" if self.settings.cvt else "supervised"
        self.log(f"seed {seed}: {kind}, {len(self.data.train)} labeled sentences")
        return train_one(self.settings, self.data, seed, self.folder(seed), self.log, self.resume), None

    def score(self, run: dict) -> float:
        return run["best"].get(f"dev_{self.data.task.metric}", math.nan)


def train_seeds(
    settings: CvtTrainingSettings,
    data: TaggingData,
    output: Path | None = None,
    log: Callable[[str], None] = print,
    resume: bool = False,
) -> dict:
    """`settings.seeds` runs (seed, seed+1, ...), each saved under `output`/seed-N; the summary has each metric's
    median, min and max over the seeds (test scores at each seed's best dev evaluation). With `resume`, a seed
    that finished earlier is read back and one that was cut short goes on from its checkpoint."""
    seeds = range(settings.seed, settings.seed + settings.seeds)
    runs, _ = run_seeds(CvtSeeds(settings, data, output, log, resume), seeds)
    summary: dict = {
        "cvt": settings.cvt,
        "labeled_sentences": len(data.train),
        "unlabeled_sentences": len(data.unlabeled),
        "metric": data.task.metric,
    }
    for name in (f"{split}_{score}" for split in ("dev", "test") for score in SCORES):
        values = [run["best"][name] for run in runs if name in run["best"]]
        if values:
            summary[name] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "values": values,
            }
    summary["seconds"] = sum(run["seconds"] for run in runs)
    summary["runs"] = [{k: v for k, v in run.items() if k != "history"} for run in runs]
    if output is not None:
        write_json_atomically(output / "summary.json", summary | {"settings": asdict(settings)}, indent=2)
    return summary


def log_to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
