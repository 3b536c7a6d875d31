"""Training a CVT tagger: supervised, or Cross-View Training with unlabeled text (`--cvt`), as the reference does it.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from electra.core.errors import UserError
from electra.core.files import write_json_atomically
from electra.tagging.conll import Sentence, is_span_scheme, read_conll, to_bio, to_bioes, write_conll
from electra.tagging.cvt_model import (
    CvtTagger,
    CvtTaggerConfig,
    Vocabulary,
    build_vocabulary,
    cvt_loss,
    make_batch,
    save_tagger,
    supervised_loss,
)
from electra.tagging.cvt_settings import CvtSettings
from electra.tagging.spans import score_tags
from electra.tagging.unlabeled import read_unlabeled


@dataclass
class TaggingData:
    """Words and tags of each split; `source` keeps the test file's sentences for writing predictions back."""

    train: list[tuple[list[str], list[str]]]
    dev: list[tuple[list[str], list[str]]]
    test: list[tuple[list[str], list[str]]]
    test_sentences: list[Sentence]
    unlabeled: list[list[str]]
    spans: bool


def load_data(
    settings: CvtSettings,
    train: str | Path,
    test: str | Path | None,
    dev: str | Path | None = None,
    unlabeled: str | Path | None = None,
    columns: str | None = None,
    label: str | None = None,
) -> TaggingData:
    """Read the column files (`electra.tagging.conll`) and the unlabeled corpus. Without `dev`, the first
    `dev_sentences` of a seed-0 shuffle of train are the dev set (the reference's chunking split); then the first
    `train_fraction` of the rest (same shuffle) are the training sentences, the same subset for every seed."""
    train_sentences = read_conll(train, columns, label)
    pairs = [(s.words, s.labels) for s in train_sentences]
    if dev is None:
        if settings.dev_sentences >= len(pairs):
            raise UserError(
                f"--dev-sentences {settings.dev_sentences} leaves nothing of the {len(pairs)} in {train} to train on; "
                "hold out fewer, or give --dev FILE."
            )
        order = list(range(len(pairs)))
        random.Random(0).shuffle(order)
        dev_pairs = [pairs[i] for i in order[: settings.dev_sentences]]
        pairs = [pairs[i] for i in order[settings.dev_sentences :]]
    else:
        dev_pairs = [(s.words, s.labels) for s in read_conll(dev, columns, label)]
        order = list(range(len(pairs)))
        random.Random(0).shuffle(order)
        pairs = [pairs[i] for i in order]
    pairs = pairs[: max(1, math.ceil(settings.train_fraction * len(pairs)))]
    test_sentences = read_conll(test, columns, label) if test is not None else []
    test_pairs = [(s.words, s.labels) for s in test_sentences]
    spans = is_span_scheme(tag for _, tags in pairs for tag in tags)
    corpus = (
        read_unlabeled(unlabeled, settings.max_unlabeled) if settings.cvt and unlabeled is not None else []
    )
    return TaggingData(pairs, dev_pairs, test_pairs, test_sentences, corpus, spans)


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
    model.eval()
    tags: list[list[str]] = []
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    by_index: dict[int, list[str]] = {}
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = make_batch([sentences[i] for i in chunk], vocab, model.config.max_word_length)
            best = model(batch)["primary"].argmax(-1)
            for row, i in enumerate(chunk):
                by_index[i] = [vocab.labels[j] for j in best[row, 1 : len(sentences[i]) + 1].tolist()]
    tags = [by_index[i] for i in range(len(sentences))]
    return tags


def evaluate(
    model: CvtTagger,
    pairs: Sequence[tuple[list[str], list[str]]],
    vocab: Vocabulary,
    settings: CvtSettings,
    spans: bool,
) -> tuple[dict[str, float], list[list[str]]]:
    """Scores against the file's own tags (span F1 for span tags, token accuracy always) and the predictions,
    converted back to BIO when trained as BIOES."""
    predicted = predict(model, [w for w, _ in pairs], vocab, settings.eval_batch_size)
    if spans:
        predicted = [to_bio(tags) for tags in predicted]
    return score_tags([t for _, t in pairs], predicted, spans), predicted


def _train_tags(tags: list[str], settings: CvtSettings, spans: bool) -> list[str]:
    return to_bioes(tags) if spans and settings.tag_scheme == "bioes" else tags


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
    settings: CvtSettings,
    data: TaggingData,
    seed: int,
    output: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Train one seed; return its record: the best dev score, the test score of that same weight average, the
    step it came at, the wall time, and the evaluation history. With `output`, the best average is saved there
    (`save_tagger`) with the test predictions (`test_predictions.txt`, CoNLL columns plus the predicted tag)."""
    random.seed(seed)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    spans = data.spans
    train = [(w, _train_tags(t, settings, spans)) for w, t in data.train]
    labels = sorted({tag for _, tags in train for tag in tags})
    labels = (["O"] if "O" in labels else []) + [t for t in labels if t != "O"]
    text = [w for w, _ in train] + (data.unlabeled if settings.cvt else [])
    vocab = build_vocabulary(text, labels, settings.min_word_count, settings.max_words)
    config = CvtTaggerConfig(
        len(vocab.words),
        len(vocab.chars),
        len(labels),
        word_dim=settings.word_dim,
        char_dim=settings.char_dim,
        char_filters=settings.char_filters,
        lstm1=settings.lstm1,
        lstm2=settings.lstm2,
        projection=settings.projection,
        modules=settings.module_names,
    )
    model = CvtTagger(config)
    average = WeightAverage(model, settings.ema_decay)
    optimizer = torch.optim.SGD(model.parameters(), lr=settings.learning_rate, momentum=settings.momentum)
    labeled = _batches(train, settings.batch_size, rng)
    unlabeled = _batches(data.unlabeled, settings.batch_size, rng) if settings.cvt else None
    if settings.cvt and not data.unlabeled:
        raise UserError("--cvt needs unlabeled text: pass --unlabeled CORPUS.")

    step = 0
    sums = {"labeled": 0.0, "unlabeled": 0.0, "n": 0}
    history: list[dict] = []
    best: dict | None = None
    best_state: dict[str, torch.Tensor] | None = None
    started = time.perf_counter()

    def update(loss: torch.Tensor) -> None:
        nonlocal step
        step += 1
        for group in optimizer.param_groups:
            group["lr"] = settings.rate(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if settings.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        average.update(model)

    for labeled_step in range(1, settings.max_steps + 1):
        model.train()
        words, tags = zip(*next(labeled))
        batch = make_batch(words, vocab, config.max_word_length)
        loss = supervised_loss(
            model,
            batch,
            _label_tensor(tags, vocab, batch.words.shape[1]),
            settings.labeled_dropout,
            settings.label_smoothing,
        )
        update(loss)
        sums["labeled"] += float(loss.detach())
        sums["n"] += 1
        if unlabeled is not None:
            batch = make_batch(next(unlabeled), vocab, config.max_word_length)
            loss, _ = cvt_loss(model, batch, settings.unlabeled_dropout, config.modules)
            update(loss)
            sums["unlabeled"] += float(loss.detach())
        if labeled_step % settings.eval_every == 0 or labeled_step == settings.max_steps:
            key = "f1" if spans else "accuracy"
            dev_scores, _ = evaluate(average.model, data.dev, vocab, settings, spans)
            row = {
                "step": labeled_step,
                "updates": step,
                "seconds": round(time.perf_counter() - started, 1),
                "loss": sums["labeled"] / sums["n"],
                f"dev_{key}": dev_scores[key],
            }
            if settings.cvt:
                row["cvt_loss"] = sums["unlabeled"] / sums["n"]
            if best is None or row[f"dev_{key}"] > best[f"dev_{key}"]:
                if data.test:  # scored only where dev improves: the figure reported is test at best dev
                    row[f"test_{key}"] = evaluate(average.model, data.test, vocab, settings, spans)[0][key]
                best = row
                best_state = {k: v.detach().clone() for k, v in average.model.state_dict().items()}
            sums = {"labeled": 0.0, "unlabeled": 0.0, "n": 0}
            history.append(row)
            log(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))

    assert best_state is not None and best is not None
    model.load_state_dict(best_state)
    record = {
        "seed": seed,
        "best": best,
        "seconds": round(time.perf_counter() - started, 1),
        "history": history,
    }
    if output is not None:
        save_tagger(model, vocab, output, {"settings": asdict(settings), "seed": seed})
        if data.test:
            _, predicted = evaluate(model, data.test, vocab, settings, spans)
            write_conll(output / "test_predictions.txt", data.test_sentences, predicted)
        write_json_atomically(output / "results.json", record, indent=2)
    return record


def train_seeds(
    settings: CvtSettings, data: TaggingData, output: Path | None = None, log: Callable[[str], None] = print
) -> dict:
    """`settings.seeds` runs (seed, seed+1, ...), each saved under `output`/seed-N; the summary has each metric's
    median, min and max over the seeds (test scores at each seed's best dev evaluation)."""
    runs = []
    for seed in range(settings.seed, settings.seed + settings.seeds):
        log(f"seed {seed}: {'CVT' if settings.cvt else 'supervised'}, {len(data.train)} labeled sentences")
        runs.append(train_one(settings, data, seed, None if output is None else output / f"seed-{seed}", log))
    key = "f1" if data.spans else "accuracy"
    summary: dict = {
        "cvt": settings.cvt,
        "labeled_sentences": len(data.train),
        "unlabeled_sentences": len(data.unlabeled),
    }
    for split in ("dev", "test"):
        values = [run["best"][f"{split}_{key}"] for run in runs if f"{split}_{key}" in run["best"]]
        if values:
            summary[f"{split}_{key}"] = {
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
