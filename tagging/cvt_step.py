"""One step of the CVT loop (`electra.tagging.cvt_train`): the batch streams, the SGD update with its clip and
its weight average, and a step's labeled update followed by its unlabeled one.

One update is one minibatch: labeled and unlabeled updates alternate 1:1 under CVT (after `cvt_start` labeled
updates alone), and the learning-rate schedule counts both kinds, as the reference code's global step does. The
exponential moving average of the weights is the model that is evaluated and kept; its decay is
min(decay, (1+n)/(10+n)) after n updates (TensorFlow's `num_updates` form), so a short run's average is not mostly
its random start.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from electra.tagging.cvt_checkpoint import Progress
from electra.tagging.cvt_model import CvtEncoder, Vocabulary, make_batch
from electra.tagging.cvt_settings import CvtTrainingSettings
from electra.tagging.cvt_task import CvtTask

SHARED = ("word_embeddings", "char_cnn", "lstm1", "lstm2")  # the encoder's parts every module reads


def batches(items: Sequence, batch_size: int, rng: random.Random) -> Iterator[list]:
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


@dataclass
class Streams:
    """The labeled batch stream and, under CVT, the unlabeled one; both draw from one seeded generator."""

    labeled: Iterator[list]
    unlabeled: Iterator[list] | None

    def replay(self, labeled_updates: int, cvt_start: int) -> None:
        """Draw again, in order, the batches a resumed run already trained on."""
        for step in range(1, labeled_updates + 1):
            next(self.labeled)
            if self.unlabeled is not None and step > cvt_start:
                next(self.unlabeled)


class WeightAverage:
    """An exponential moving average of a model's weights, kept in a copy of the model (the one evaluated)."""

    def __init__(self, model: CvtEncoder, decay: float):
        self.model = copy.deepcopy(model)
        self.decay = decay
        self.updates = 0

    @torch.no_grad()
    def update(self, model: CvtEncoder) -> None:
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for average, current in zip(self.model.parameters(), model.parameters()):
            average.lerp_(current, 1.0 - decay)


class Updater:
    """The model, its SGD optimizer (with momentum) and its weight average; `shared` are the parameters of the
    encoder's parts every module reads (`SHARED`), whose gradient norm the evaluation rows report."""

    def __init__(self, model: CvtEncoder, settings: CvtTrainingSettings):
        self.model = model
        self.settings = settings
        self.shared = [p for name, p in model.named_parameters() if name.split(".")[0] in SHARED]
        self.average = WeightAverage(model, settings.ema_decay)
        self.optimizer = torch.optim.SGD(
            model.parameters(), lr=settings.learning_rate, momentum=settings.momentum
        )

    def update(self, loss: torch.Tensor, kind: str, progress: Progress) -> None:
        """One SGD step on `loss` of a `kind` of batch (labeled, unlabeled); the shared encoder's gradient norm,
        before clipping, is summed for the evaluation rows."""
        settings = self.settings
        progress.updates += 1
        for group in self.optimizer.param_groups:
            group["lr"] = settings.rate(progress.updates)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad.norm() for p in self.shared if p.grad is not None]
        norm = float(torch.stack(grads).norm()) if grads else 0.0
        progress.sums[f"grad_{kind}"] = progress.sums.get(f"grad_{kind}", 0.0) + norm
        if kind == "unlabeled" and settings.unlabeled_trains == "modules":
            for parameter in self.shared:  # no gradient: SGD leaves them (and their momentum) alone this step
                parameter.grad = None
        if settings.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), settings.max_grad_norm)
        self.optimizer.step()
        self.average.update(self.model)


def train_step(
    task: CvtTask, updater: Updater, streams: Streams, vocab: Vocabulary, progress: Progress
) -> None:
    """One labeled update, then (under CVT, past `cvt_start` labeled updates) one unlabeled update; their losses
    are summed in `progress` for the next evaluation row."""
    model, settings = updater.model, updater.settings
    progress.labeled += 1
    model.train()
    words, targets = zip(*next(streams.labeled))
    batch = make_batch(words, vocab, model.config.max_word_length)
    loss = task.labeled_loss(model, batch, targets, vocab, settings)
    updater.update(loss, "labeled", progress)
    progress.sums["labeled"] += float(loss.detach())
    progress.sums["n"] += 1
    if streams.unlabeled is not None and progress.labeled > settings.cvt_start:
        loss = task.unlabeled_loss(
            model, make_batch(next(streams.unlabeled), vocab, model.config.max_word_length), settings
        )
        updater.update(loss, "unlabeled", progress)
        progress.sums["unlabeled"] += float(loss.detach())
        progress.sums["m"] = progress.sums.get("m", 0) + 1
