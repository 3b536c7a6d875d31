"""Pretraining examples packed on the fly (`--streaming`): training starts at once on a corpus of any size.

The corpus is cut into pieces (`electra.data.corpus_pieces`: whole files, or byte ranges of large text and JSON-lines
files cut at document boundaries) and each piece into windows of about `window_chars` of text. Each process of a
run has `workers` data-loader workers, which makes `slots` = processes x workers readers. With at least as many
pieces as slots, each slot reads only its own pieces (balanced by bytes), so a pass over the corpus reads every
byte once whatever the number of slots; with fewer pieces, the slots that share a piece read it and take turns at
its windows. A slot packs its windows by the cached path's rule (`pack_documents`, seeded per document, here by
the document's piece and place in it), shuffles each window's examples by (seed, epoch, piece, window) and yields
micro-batches, epoch after epoch, forever. The pieces, and so the examples of one pass, do not depend on the
number of slots.

A data loader takes batches from its workers in turn, so micro-batch m of a process comes from its slot
m mod workers, and the position of every slot after any step follows from the step alone. Resuming there means
skipping that many examples in each slot. A slot skips a window without tokenizing it, and a whole piece without
reading it, when it knows how many examples they give: it writes each window's count to its ledger
(`slot-S-of-N.txt` in the run's `stream/` folder) the first time it packs the window, and packs a window it has no
count for. The counts depend only on the corpus, tokenizer and packing settings, which a resume must keep, so a
ledger line is never stale.

Held-out examples for evaluation are the first ones (in corpus order) of the first piece's first window; the slot
that reads it never trains on them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path

import numpy as np
import torch

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled, spelling
from electra.data.corpus_pieces import Piece, piece_documents, plan_pieces
from electra.data.packing import ExampleSettings, PretrainingCollator, document_chunks, pack_documents
from electra.data.word_pieces import WordPieceEncoder

cfg = spelling(PretrainConfig)  # --streaming on the command line, streaming in Python

STREAM_WINDOW_CHARS = 4_000_000  # ~8,000 examples of 128 tokens: the span the order is shuffled over
LEDGER_FOLDER = "stream"
PIECE_DOCUMENTS = 1 << 32  # a document's packing seed is piece x this + its place in the piece


def stream_window_chars() -> int:
    """Characters of text a window holds: STREAM_WINDOW_CHARS, or ELECTRA_STREAM_WINDOW (a test's small corpus
    cut into several windows)."""
    return int(os.environ.get("ELECTRA_STREAM_WINDOW", STREAM_WINDOW_CHARS))


@dataclass(frozen=True)
class StreamSpec:
    """What every slot needs to produce its examples: plain values, so a worker process builds its own reader.
    `pieces` is the corpus's plan (`planned` fills it once, so the workers do not plan again)."""

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
    held_out: int = 0  # examples at the start of the first window kept for evaluation
    held_out_window: tuple[int, int] = (0, 0)  # that window: (piece, window in the piece)
    ledger_dir: str | None = None
    pieces: tuple[Piece, ...] = ()

    def planned(self) -> StreamSpec:
        """This spec with the corpus's pieces planned."""
        if self.pieces:
            return self
        return replace(self, pieces=tuple(plan_pieces(self.corpus, self.doc_boundary, self.window_chars)))

    def piece_windows(self, piece: int) -> Iterator[tuple[int, int, list[str]]]:
        """(window number in the piece, packing index of its first document, documents) of piece `piece`."""
        documents = piece_documents(self.planned().pieces[piece], self.strict_utf8, self.text_field)
        for number, (first, chunk) in enumerate(document_chunks(documents, size=self.window_chars)):
            yield number, piece * PIECE_DOCUMENTS + first, chunk

    def windows(self) -> Iterator[tuple[tuple[int, int], int, list[str]]]:
        """((piece, window), packing index of its first document, documents) over the corpus once, in order."""
        spec = self.planned()
        for piece in range(len(spec.pieces)):
            for number, first, chunk in spec.piece_windows(piece):
                yield (piece, number), first, chunk


def slot_share(pieces: tuple[Piece, ...], slot: int, slots: int) -> tuple[list[int], int, int]:
    """(the pieces slot `slot` of `slots` reads, in corpus order; g; r): it keeps window w of each when
    w mod g == r. With at least as many pieces as slots each piece goes to one slot, the largest first to the
    slot with the fewest bytes so far (g = 1); with fewer, slot s shares piece s mod pieces with the g - 1 other
    slots that do, as turn r."""
    if len(pieces) >= slots:
        load = [0] * slots
        owner = [0] * len(pieces)
        for index in sorted(range(len(pieces)), key=lambda i: -pieces[i].size):
            owner[index] = min(range(slots), key=lambda s: load[s])
            load[owner[index]] += pieces[index].size
        return [index for index in range(len(pieces)) if owner[index] == slot], 1, 0
    piece = slot % len(pieces)
    return [piece], len(range(piece, slots, len(pieces))), slot // len(pieces)


def held_out_count(first_window_examples: int, eval_examples: int, eval_fraction: float) -> int:
    """Examples of window 0 held out: `eval_examples` at most, never more than half the window, none when
    evaluation is off. (The corpus's size is unknown to a stream, so `eval_fraction` only turns it on or off.)"""
    if eval_fraction <= 0 or eval_examples <= 0 or first_window_examples < 2:
        return 0
    return min(eval_examples, first_window_examples // 2)


def require_windows(spec: StreamSpec, slots: int) -> None:
    """Refuse, before training, a corpus with fewer windows than streams: a stream without a window has nothing to
    give. Only pieces that several streams share are counted (each up to the number sharing it)."""
    spec = spec.planned()
    if len(spec.pieces) >= slots:
        return
    for piece in range(len(spec.pieces)):
        sharing = len(range(piece, slots, len(spec.pieces)))
        windows = sum(1 for _ in islice(spec.piece_windows(piece), sharing))
        if windows < sharing:
            total = sum(1 for _ in spec.windows())
            raise UserError(
                f"{cfg('streaming')}: {spec.corpus} holds {total} window(s) of {spec.window_chars:,} characters, fewer "
                f"than the {slots} streams reading it (processes x data-loader workers); drop {cfg('streaming')} (the "
                "cached path suits a corpus this small) or use fewer data-loader workers "
                "(--set dataloader_workers=N)."
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


def first_window_examples(spec: StreamSpec) -> tuple[tuple[int, int], list[dict[str, list[int]]]]:
    """(the first window's key, its examples in corpus order): the held-out set is their start, and the FLOP check
    runs on them."""
    window = next(spec.windows(), None)
    if window is None:
        raise UserError(f"corpus {spec.corpus} is empty: it holds no text; give a corpus with text in it.")
    key, first, documents = window
    ids, types = WindowPacker(spec).pack(first, documents)
    if not ids:
        raise UserError(
            f"corpus {spec.corpus}: its first {spec.window_chars:,} characters produced no examples (no tokens "
            f"after tokenization); check {spelled(RunInputs, 'text_field')} and the corpus's text."
        )
    return key, [{"input_ids": i, "token_type_ids": t} for i, t in zip(ids, types)]


class Ledger:
    """Examples per window of one slot (held-out ones excluded), appended as the slot first packs each window, and
    each piece's number of windows once the slot has read it to its end; a line cut by a kill is ignored when read
    back. Lines: "PIECE WINDOW EXAMPLES" and "end PIECE WINDOWS"."""

    def __init__(self, folder: str | None, slot: int, slots: int):
        self.path = Path(folder) / f"slot-{slot}-of-{slots}.txt" if folder else None
        self.counts: dict[tuple[int, int], int] = {}
        self.ends: dict[int, int] = {}
        self.cut = False  # the file ends inside a line (a kill mid-write): the next line starts on a new one
        if self.path is not None and self.path.is_file():
            text = self.path.read_text()
            self.cut = bool(text) and not text.endswith("\n")
            for line in text.splitlines():
                fields = line.split(" ")
                if len(fields) != 3 or not all(f.isdigit() for f in fields[fields[0] == "end" :]):
                    continue
                if fields[0] == "end":
                    self.ends[int(fields[1])] = int(fields[2])
                else:
                    self.counts[(int(fields[0]), int(fields[1]))] = int(fields[2])

    def piece_examples(self, piece: int, group: int = 1, turn: int = 0) -> int | None:
        """Examples the slot takes from `piece` (its windows w with w mod group == turn), once known."""
        if piece not in self.ends:
            return None
        own = [(piece, w) for w in range(turn, self.ends[piece], group)]
        if not all(key in self.counts for key in own):
            return None
        return sum(self.counts[key] for key in own)

    def epoch_examples(self, pieces: list[int], group: int = 1, turn: int = 0) -> int | None:
        """Examples the slot gives in one pass over its `pieces`, when the ledger has seen them all."""
        counts = [self.piece_examples(piece, group, turn) for piece in pieces]
        return None if None in counts else sum(counts)

    def record(self, piece: int, window: int, examples: int) -> None:
        if (piece, window) not in self.counts:
            self.counts[(piece, window)] = examples
            self._append(f"{piece} {window} {examples}")

    def record_end(self, piece: int, windows: int) -> None:
        if piece not in self.ends:
            self.ends[piece] = windows
            self._append(f"end {piece} {windows}")

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
    spec = spec.planned()
    pieces, group, turn = slot_share(spec.pieces, slot, slots)
    packer = WindowPacker(spec)
    ledger = Ledger(spec.ledger_dir, slot, slots)
    per_epoch = ledger.epoch_examples(pieces, group, turn)
    epoch = 0
    if per_epoch:  # a resume some passes on: whole passes skipped without reading
        epoch, skip = divmod(skip, per_epoch)
    while True:
        produced = 0
        for piece in pieces:
            known = ledger.piece_examples(piece, group, turn)
            if known is not None and skip >= known:  # a piece read before: skipped without reading it
                skip -= known
                produced += known
                continue
            windows = 0
            for number, first, documents in spec.piece_windows(piece):
                windows = number + 1
                if number % group != turn:
                    continue
                counted = ledger.counts.get((piece, number))
                if counted is not None and skip >= counted:
                    skip -= counted
                    produced += counted
                    continue
                ids, types = packer.pack(first, documents)
                if (piece, number) == spec.held_out_window and spec.held_out:
                    ids, types = ids[spec.held_out :], types[spec.held_out :]
                ledger.record(piece, number, len(ids))
                produced += len(ids)
                if skip >= len(ids):
                    skip -= len(ids)
                    continue
                order = np.random.default_rng([spec.seed, epoch, piece, number]).permutation(len(ids))
                for index in order[skip:]:
                    yield ids[index], types[index]
                skip = 0
            ledger.record_end(piece, windows)
        if produced == 0:  # its windows hold no tokens (require_windows saw that they exist)
            raise UserError(
                f"{cfg('streaming')}: stream {slot} of {slots} found no examples in a whole pass over {spec.corpus}; "
                f"drop {cfg('streaming')} or use fewer data-loader workers ({cfg('dataloader_workers')}=N)."
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
