"""Pretraining examples packed on the fly (`--streaming`): training starts at once on a corpus of any size.

The corpus is read as one stream of documents (`electra.data.corpus.read_documents`) and cut into windows of about
`window_chars` of text. Each process of a run has `workers` data-loader workers, which makes `slots` = processes x
workers readers; slot s packs windows s, s + slots, s + 2 slots, ... by the cached path's rule (`pack_documents`:
the same examples, seeded per document), shuffles each window's examples by (seed, epoch, window) and yields
micro-batches, epoch after epoch, forever. Every slot reads the whole stream but tokenizes only its own windows
(reading runs at ~200 MB/s a core, packing at ~4.5 MB/s), so the slots pack disjoint shards of the corpus.

A data loader takes batches from its workers in turn, so micro-batch m of a process comes from its slot
m mod workers, and the position of every slot after any step follows from the step alone. Resuming there means
skipping that many examples in each slot. A slot skips a window by reading it, without tokenizing, when it knows how
many examples the window gives: it writes that count to its ledger (`slot-S-of-N.txt` in the run's `stream/`
folder) the first time it packs the window, and packs a window it has no count for. The counts depend only on the
corpus, tokenizer and packing settings, which a resume must keep, so a ledger line is never stale.

Held-out examples for evaluation are the first ones (in corpus order) of window 0; slot 0 never trains on them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import torch

from electra.core.errors import UserError
from electra.data.corpus import read_documents
from electra.data.packing import ExampleSettings, PretrainingCollator, document_chunks, pack_documents
from electra.data.word_pieces import WordPieceEncoder

STREAM_WINDOW_CHARS = 4_000_000  # ~8,000 examples of 128 tokens: the span the order is shuffled over
LEDGER_FOLDER = "stream"


def stream_window_chars() -> int:
    """Characters of text a window holds: STREAM_WINDOW_CHARS, or ELECTRA_STREAM_WINDOW (a test's small corpus
    cut into several windows)."""
    return int(os.environ.get("ELECTRA_STREAM_WINDOW", STREAM_WINDOW_CHARS))


@dataclass(frozen=True)
class StreamSpec:
    """What every slot needs to produce its examples: plain values, so a worker process builds its own reader."""

    corpus: str
    doc_boundary: str
    strict_utf8: bool
    text_field: str
    tokenizer_json: str
    cls_id: int
    sep_id: int
    settings: ExampleSettings
    seed: int
    window_chars: int = STREAM_WINDOW_CHARS
    held_out: int = 0  # examples at the start of window 0 kept for evaluation
    ledger_dir: str | None = None

    def windows(self) -> Iterator[tuple[int, int, list[str]]]:
        """(window number, index of its first document, documents) over the corpus once, in order."""
        documents = read_documents(self.corpus, self.doc_boundary, self.strict_utf8, self.text_field)
        for number, (first, chunk) in enumerate(document_chunks(documents, size=self.window_chars)):
            yield number, first, chunk


def held_out_count(first_window_examples: int, eval_examples: int, eval_fraction: float) -> int:
    """Examples of window 0 held out: `eval_examples` at most, never more than half the window, none when
    evaluation is off. (The corpus's size is unknown to a stream, so `eval_fraction` only turns it on or off.)"""
    if eval_fraction <= 0 or eval_examples <= 0 or first_window_examples < 2:
        return 0
    return min(eval_examples, first_window_examples // 2)


def require_windows(spec: StreamSpec, slots: int) -> None:
    """Refuse, before training, a corpus with fewer windows than streams: a stream without a window has nothing to
    give (reads at most `slots` windows)."""
    windows = sum(1 for _ in islice(spec.windows(), slots))
    if windows < slots:
        raise UserError(
            f"--streaming: {spec.corpus} holds {windows} window(s) of {spec.window_chars:,} characters, fewer than "
            f"the {slots} streams reading it (processes x data-loader workers); drop --streaming (the cached path "
            "suits a corpus this small) or use fewer data-loader workers (--set dataloader_workers=N)."
        )


class WindowPacker:
    """The examples of one window, as numpy arrays per example, with a tokenizer built in this process."""

    def __init__(self, spec: StreamSpec):
        from tokenizers import Tokenizer

        self.spec = spec
        self.encoder = WordPieceEncoder(Tokenizer.from_str(spec.tokenizer_json))

    def pack(self, first: int, documents: list[str]) -> tuple[list[list[int]], list[list[int]]]:
        s = self.spec
        return pack_documents(first, documents, self.encoder, s.settings, s.cls_id, s.sep_id)


def first_window_examples(spec: StreamSpec) -> list[dict[str, list[int]]]:
    """The examples of window 0 in corpus order: the held-out set is their start, and the FLOP check runs on them."""
    window = next(spec.windows(), None)
    if window is None:
        raise UserError(f"corpus {spec.corpus} is empty: it holds no text; give a corpus with text in it.")
    _, first, documents = window
    ids, types = WindowPacker(spec).pack(first, documents)
    if not ids:
        raise UserError(
            f"corpus {spec.corpus}: its first {spec.window_chars:,} characters produced no examples (no tokens "
            "after tokenization); check --text-field and the corpus's text."
        )
    return [{"input_ids": i, "token_type_ids": t} for i, t in zip(ids, types)]


class Ledger:
    """Examples per window of one slot (held-out ones excluded), appended as the slot first packs each window, and
    the corpus's number of windows once a pass has ended; a line cut by a kill is ignored when read back."""

    def __init__(self, folder: str | None, slot: int, slots: int):
        self.path = Path(folder) / f"slot-{slot}-of-{slots}.txt" if folder else None
        self.slot, self.slots = slot, slots
        self.counts: dict[int, int] = {}
        self.windows: int | None = None
        self.cut = False  # the file ends inside a line (a kill mid-write): the next line starts on a new one
        if self.path is not None and self.path.is_file():
            text = self.path.read_text()
            self.cut = bool(text) and not text.endswith("\n")
            for line in text.splitlines():
                first, _, second = line.partition(" ")
                if first == "end" and second.isdigit():
                    self.windows = int(second)
                elif first.isdigit() and second.isdigit():
                    self.counts[int(first)] = int(second)

    def epoch_examples(self) -> int | None:
        """Examples the slot gives in one pass over the corpus, when the ledger has seen a whole pass."""
        if self.windows is None:
            return None
        own = range(self.slot, self.windows, self.slots)
        if not all(window in self.counts for window in own):
            return None
        return sum(self.counts[window] for window in own)

    def record(self, window: int, examples: int) -> None:
        if window not in self.counts:
            self.counts[window] = examples
            self._append(f"{window} {examples}")

    def record_end(self, windows: int) -> None:
        if self.windows is None:
            self.windows = windows
            self._append(f"end {windows}")

    def _append(self, line: str) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as out:
                out.write(("\n" if self.cut else "") + line + "\n")
            self.cut = False


def slot_examples(
    spec: StreamSpec, slot: int, slots: int, skip: int = 0
) -> Iterator[tuple[list[int], list[int]]]:
    """(input ids, token type ids) of slot `slot` of `slots`, from its example number `skip` on, forever."""
    packer = WindowPacker(spec)
    ledger = Ledger(spec.ledger_dir, slot, slots)
    per_epoch = ledger.epoch_examples()
    epoch = 0
    if per_epoch:  # a resume some passes on: whole passes skipped without reading
        epoch, skip = divmod(skip, per_epoch)
    while True:
        produced = windows = 0
        for number, first, documents in spec.windows():
            windows = number + 1
            if number % slots != slot:
                continue
            known = ledger.counts.get(number)
            if known is not None and skip >= known:
                skip -= known
                produced += known
                continue
            ids, types = packer.pack(first, documents)
            if number == 0 and spec.held_out:
                ids, types = ids[spec.held_out :], types[spec.held_out :]
            ledger.record(number, len(ids))
            produced += len(ids)
            if skip >= len(ids):
                skip -= len(ids)
                continue
            order = np.random.default_rng([spec.seed, epoch, number]).permutation(len(ids))
            for index in order[skip:]:
                yield ids[index], types[index]
            skip = 0
        ledger.record_end(windows)
        if produced == 0:  # its windows hold no tokens (require_windows saw that they exist)
            raise UserError(
                f"--streaming: stream {slot} of {slots} found no examples in a whole pass over {spec.corpus}; drop "
                "--streaming or use fewer data-loader workers (--set dataloader_workers=N)."
            )
        epoch += 1 + skip // produced
        skip %= produced


class StreamedBatches(torch.utils.data.IterableDataset):
    """Micro-batches of one process, from its micro-batch number `start` on, forever; each data-loader worker is
    one slot (a process without workers is one slot)."""

    def __init__(
        self,
        spec: StreamSpec,
        collate: PretrainingCollator,
        batch_size: int,
        rank: int,
        world: int,
        workers: int,
        start: int = 0,
    ):
        self.spec, self.collate, self.batch_size = spec, collate, batch_size
        self.rank, self.world, self.loader_workers, self.start = rank, world, workers, start
        self.workers = max(1, workers)  # slots per process

    def starting_at(self, start: int) -> StreamedBatches:
        return StreamedBatches(
            self.spec, self.collate, self.batch_size, self.rank, self.world, self.loader_workers, start
        )

    def loader(self) -> torch.utils.data.DataLoader:
        """A DataLoader over these batches (its workers rebuild the tokenizer from JSON: nothing is unpickled)."""
        workers = self.loader_workers
        return torch.utils.data.DataLoader(
            self,
            batch_size=None,
            num_workers=workers,
            pin_memory=torch.cuda.is_available(),
            prefetch_factor=4 if workers else None,
        )

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        # The loader asks its workers in turn from worker 0, so worker w gives micro-batches start + w,
        # start + w + workers, ...: those of the slot whose turn comes at `start + w`.
        role = ((info.id if info is not None else 0) + self.start) % self.workers
        # micro-batches m < start with m % workers == role came from this slot before
        done = max(0, -(-(self.start - role) // self.workers))
        slot, slots = self.rank * self.workers + role, self.world * self.workers
        examples = slot_examples(self.spec, slot, slots, skip=done * self.batch_size)
        while True:
            rows = [{"input_ids": i, "token_type_ids": t} for i, t in islice(examples, self.batch_size)]
            yield self.collate(rows)


def stream_loader(
    spec: StreamSpec,
    collate: PretrainingCollator,
    batch_size: int,
    rank: int,
    world: int,
    workers: int,
    start: int,
) -> torch.utils.data.DataLoader:
    """The DataLoader of one process's micro-batches from number `start` on (`StreamedBatches.loader`)."""
    return StreamedBatches(spec, collate, batch_size, rank, world, workers, start).loader()


def stream_token_counts(spec: StreamSpec, vocab_size: int, windows: int = 4) -> np.ndarray:
    """Token frequencies over the first `windows` windows, for the unigram generator (a stream has no end to
    count to; ~16 MB of text gives every frequent piece its share)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    packer = WindowPacker(spec)
    for _, first, documents in islice(spec.windows(), windows):
        ids, _ = packer.pack(first, documents)
        if ids:
            counts += np.bincount(np.concatenate([np.asarray(i) for i in ids]), minlength=vocab_size)[
                :vocab_size
            ]
    return counts


class StreamedSource:
    """The examples of a `--streaming` run, as `PretrainingTask` reads them (see `CachedSource`)."""

    def __init__(self, batches: StreamedBatches, first_rows: list[dict[str, list[int]]]):
        self.batches, self.collate, self.first_rows = batches, batches.collate, first_rows
        self.examples: int | None = None  # a stream's length is not known ahead

    def loader(self, start: int) -> torch.utils.data.DataLoader:
        return self.batches.starting_at(start).loader()

    def rows(self, count: int) -> list[dict[str, list[int]]]:
        return self.first_rows[:count]

    def describe(self) -> str:
        slots = self.batches.world * self.batches.workers
        return (
            f"streaming ({slots} stream{'s' if slots != 1 else ''}, packed as it trains, shuffled within "
            f"{self.batches.spec.window_chars / 1e6:g} MB windows)"
        )
