"""From raw documents to padded pretraining batches.

Examples are built as ELECTRA's pretraining-data builder builds them: the sentences of one document are packed
greedily up to a target length and cut into segments A and B (`[CLS] A [SEP] B [SEP]`); about 10% of examples are a
single segment and about 5% aim at a random shorter length. The result is an Arrow dataset (memory-mapped through
`datasets`), built with `num_proc` workers and cached under a key of the inputs and settings, so a second run with
the same corpus, tokenizer and settings starts at once, and a change of any of them rebuilds. A cache directory is
renamed into place only when complete, so an interrupted build is never trusted.
"""

from __future__ import annotations

import errno
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled
from electra.data.corpus import corpus_fingerprint, read_documents, split_sentences
from electra.data.progress import PackingProgress, corpus_size
from electra.data.word_pieces import WordPieceEncoder

BUILDER_VERSION = 3  # bump when the example format or packing rule changes: old caches then rebuild
EXAMPLES_FILE = "examples.arrow"  # an Arrow stream file, memory-mapped by `datasets.Dataset.from_file`
EXAMPLES_RECORD = "electra_examples.json"  # written last: a cache entry without it is never read


@dataclass(frozen=True)
class ExampleSettings:
    max_seq_length: int = 128
    single_segment_prob: float = 0.1
    short_seq_prob: float = 0.05
    seed: int = 12345


def example_settings(config: Any) -> ExampleSettings:
    """The packing settings of a pretraining config."""
    return ExampleSettings(
        max_seq_length=config.max_seq_length,
        single_segment_prob=config.single_segment_prob,
        short_seq_prob=config.short_seq_prob,
    )


class ExampleBuilder:
    """Greedy sentence packing with ELECTRA's segment and length randomisation; one instance per worker batch."""

    def __init__(self, settings: ExampleSettings, cls_id: int, sep_id: int, rng: random.Random):
        self.max_length = settings.max_seq_length
        self.settings = settings
        self.cls_id, self.sep_id = cls_id, sep_id
        self.rng = rng
        self.target_length = self.max_length
        self.sentences: list[list[int]] = []
        self.length = 0

    def add_sentence(self, token_ids: list[int]) -> list[tuple[list[int], list[int]]]:
        """Add one tokenised sentence; return the examples it completes.

        A sentence longer than an example is not cut to fit (the reference drops the rest): the pending sentences
        are flushed, its full-length pieces become single-segment examples, and its remainder carries on.
        """
        examples = []
        piece = self.max_length - 2
        if len(token_ids) > piece:
            examples += self.end_document()
            while len(token_ids) > piece:
                chunk, token_ids = token_ids[:piece], token_ids[piece:]
                examples.append(([self.cls_id, *chunk, self.sep_id], [0] * (len(chunk) + 2)))
        if token_ids:
            self.sentences.append(token_ids)
            self.length += len(token_ids)
            if self.length >= self.target_length:
                examples.append(self._create_example())
        return examples

    def end_document(self) -> list[tuple[list[int], list[int]]]:
        return [self._create_example()] if self.sentences else []

    def _create_example(self) -> tuple[list[int], list[int]]:
        if self.rng.random() < self.settings.single_segment_prob:
            first_target = 10**9
        else:
            first_target = (self.target_length - 3) // 2
        first: list[int] = []
        second: list[int] = []
        for sentence in self.sentences:
            # First segment while it is empty, while the sentence fits, or (half the time) for one overflowing
            # sentence before the second segment starts.
            if (
                not first
                or len(first) + len(sentence) < first_target
                or (not second and len(first) < first_target and self.rng.random() < 0.5)
            ):
                first += sentence
            else:
                second += sentence
        first = first[: self.max_length - 2]
        second = second[: max(0, self.max_length - len(first) - 3)]
        self.sentences, self.length = [], 0
        if self.rng.random() < self.settings.short_seq_prob:
            self.target_length = self.rng.randint(5, self.max_length)
        else:
            self.target_length = self.max_length
        input_ids = [self.cls_id, *first, self.sep_id]
        token_type_ids = [0] * len(input_ids)
        if second:
            input_ids += [*second, self.sep_id]
            token_type_ids += [1] * (len(second) + 1)
        return input_ids, token_type_ids


def pack_documents(
    first_index: int,
    documents: Sequence[str],
    encoder: WordPieceEncoder,
    settings: ExampleSettings,
    cls_id: int,
    sep_id: int,
) -> tuple[list[list[int]], list[list[int]]]:
    """The examples (input ids, token type ids) of consecutive documents, the first of which is the corpus's
    document `first_index`. Each document gets its own builder seeded by (seed, document index), so the examples
    are the same however the corpus is cut into chunks and however many processes pack them."""
    per_document = [
        [sentence for paragraph in document.split("\n") for sentence in split_sentences(paragraph)]
        for document in documents
    ]
    encodings = iter(encoder.encode([sentence for sentences in per_document for sentence in sentences]))
    out_ids: list[list[int]] = []
    out_types: list[list[int]] = []
    for offset, sentences in enumerate(per_document):
        rng = random.Random(settings.seed * 1_000_003 + first_index + offset)
        builder = ExampleBuilder(settings, cls_id, sep_id, rng)
        examples = []
        for _ in sentences:
            ids = next(encodings)
            if ids:
                examples += builder.add_sentence(ids)
        examples += builder.end_document()
        for ids, types in examples:
            out_ids.append(ids)
            out_types.append(types)
    return out_ids, out_types


def examples_batch(ids: list[list[int]], types: list[list[int]], id_type: Any) -> Any:
    """Examples as one Arrow record batch: ids as `id_type` (uint16 for vocabularies that fit: a quarter of
    int64's disk and page cache), segment ids as int8."""
    import pyarrow as pa

    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    flat_ids = np.fromiter(chain.from_iterable(ids), dtype=id_type.to_pandas_dtype(), count=total)
    flat_types = np.fromiter(chain.from_iterable(types), dtype=np.int8, count=total)
    return pa.RecordBatch.from_arrays(
        [pa.ListArray.from_arrays(offsets, flat_ids), pa.ListArray.from_arrays(offsets, flat_types)],
        names=["input_ids", "token_type_ids"],
    )


def default_cache_root() -> Path:
    return Path(os.environ.get("ELECTRA_CACHE", Path.home() / ".cache" / "electra"))


def tokenizer_fingerprint(tokenizer) -> str:
    """SHA-256 of what decides a tokenizer's output, equal for a freshly trained tokenizer and the same one saved
    and loaded again. (Their serialisations differ: the reload writes BERT's `strip_accents` as None, meaning "as
    `lowercase`", where training writes True; hashing the raw serialisation would make a first run build its
    example cache twice.)"""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    normalizer = spec.get("normalizer") or {}
    if normalizer.get("type") == "BertNormalizer" and normalizer.get("strip_accents") is None:
        normalizer["strip_accents"] = normalizer.get("lowercase")
    for volatile in ("truncation", "padding", "added_tokens"):
        spec.pop(volatile, None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def examples_cache_key(corpus: str | Path, tokenizer, settings: ExampleSettings, doc_boundary: str) -> str:
    vocab_hash = tokenizer_fingerprint(tokenizer)
    payload = json.dumps(
        {
            "version": BUILDER_VERSION,
            "corpus": corpus_fingerprint(corpus),
            "tokenizer": vocab_hash,
            "settings": settings.__dict__,
            "doc_boundary": doc_boundary,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def build_pretraining_dataset(
    corpus_path: str | Path,
    tokenizer,
    config=None,
    cache_dir: str | Path | None = None,
    num_proc: int | None = None,
    doc_boundary: str = "auto",
    settings: ExampleSettings | None = None,
    show_progress: bool = True,
    strict_utf8: bool = False,
    text_field: str = "text",
):
    """The packed, tokenised examples of a corpus as a memory-mapped `datasets.Dataset` (cached; see module doc).

    The corpus is read as a stream in this process and packed in chunks by `num_proc` worker processes (default:
    every core), a bounded number of chunks at a time, and the examples are written to one Arrow file as they come:
    memory stays flat whatever the corpus size."""
    from datasets import Dataset

    if settings is None:
        settings = example_settings(config)
    if settings.max_seq_length < 8:
        raise UserError(
            f"max_seq_length={settings.max_seq_length} is too short to hold [CLS] A [SEP] B [SEP]."
        )
    root = Path(cache_dir) if cache_dir else default_cache_root() / "examples"
    reading = f"{doc_boundary}/strict={strict_utf8}" + (
        f"/field={text_field}" if text_field != "text" else ""
    )
    key = examples_cache_key(corpus_path, tokenizer, settings, reading)
    final = root / key
    if (final / EXAMPLES_RECORD).is_file():
        return Dataset.from_file(str(final / EXAMPLES_FILE))
    documents = read_documents(corpus_path, doc_boundary, strict_utf8, text_field)
    first = next(documents, None)
    if first is None:
        raise UserError(f"corpus {corpus_path} is empty: it holds no text; give a corpus with text in it.")
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    try:
        progress = PackingProgress(corpus_size(corpus_path), show_progress)
        count = _write_examples(
            chain([first], documents), tokenizer, settings, work / EXAMPLES_FILE, num_proc, progress
        )
        progress.close()
        if count == 0:
            raise UserError(f"corpus {corpus_path} produced no examples (no tokens after tokenization).")
        record = {"corpus": str(corpus_path), "settings": settings.__dict__, "examples": count}
        (work / EXAMPLES_RECORD).write_text(json.dumps(record))
        os.replace(work, final)  # the cache entry appears whole, or not at all
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise UserError(
                f"the disk holding {root} is full while writing the examples of {corpus_path}; nothing was kept. "
                f"Free space, or give {spelled(RunInputs, 'cache_dir')} (or ELECTRA_CACHE) on a larger disk."
            ) from None
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Dataset.from_file(str(final / EXAMPLES_FILE))


def _write_examples(documents, tokenizer, settings, path: Path, num_proc: int | None, progress) -> int:
    """Pack `documents` in chunks on `num_proc` processes, keeping at most two chunks a process in flight, and
    append their examples to the Arrow stream file `path` in corpus order. Returns the number of examples."""
    import pyarrow as pa

    workers = max(1, num_proc if num_proc is not None else os.cpu_count() or 1)
    id_type = pa.uint16() if len(tokenizer) <= 65536 else pa.int32()
    schema = pa.schema([("input_ids", pa.list_(id_type)), ("token_type_ids", pa.list_(pa.int8()))])
    worker_args = (
        tokenizer.backend_tokenizer.to_str(),
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        settings,
    )
    count = 0
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:

        def write(batch) -> None:
            nonlocal count
            writer.write_batch(batch)
            count += batch.num_rows
            progress.examples(batch.num_rows)

        chunks = document_chunks(documents, progress)
        if workers == 1:
            _start_packer(*worker_args)
            for chunk in chunks:
                write(_pack_chunk(chunk, id_type))
            return count
        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        with context.Pool(workers, initializer=_start_packer, initargs=worker_args) as pool:
            pending: deque = deque()
            for chunk in chunks:
                pending.append(pool.apply_async(_pack_chunk, (chunk, id_type)))
                if len(pending) >= 2 * workers:
                    write(pending.popleft().get())
            while pending:
                write(pending.popleft().get())
    return count


CHUNK_CHARS = 1_000_000  # text a worker packs per task: its examples are ~2 MB of Arrow
_PACKER: dict[str, Any] = {}


def document_chunks(
    documents: Iterator[str], progress=None, size: int = CHUNK_CHARS
) -> Iterator[tuple[int, list[str]]]:
    """(index of the first document, documents) of about `size` characters of text each, in corpus order."""
    chunk: list[str] = []
    chars = first = 0
    for index, document in enumerate(documents):
        chunk.append(document)
        chars += len(document)
        if chars >= size:
            if progress is not None:
                progress.read(len(chunk), chars)
            yield first, chunk
            chunk, chars, first = [], 0, index + 1
    if chunk:
        if progress is not None:
            progress.read(len(chunk), chars)
        yield first, chunk


def _start_packer(tokenizer_json: str, cls_id: int, sep_id: int, settings: ExampleSettings) -> None:
    """A packing process's tokenizer, rebuilt from its serialisation (cheap, and nothing unpickled).

    SIGTERM takes its default action here: the pool ends its workers with SIGTERM, and a forked worker that kept the
    command line's Python handler could sit in a queue lock without ever running it, so the pool's exit waited for
    it forever (seen as a hang of a whole test run)."""
    from tokenizers import Tokenizer

    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    _PACKER.update(
        encoder=WordPieceEncoder(Tokenizer.from_str(tokenizer_json)),
        cls_id=cls_id,
        sep_id=sep_id,
        settings=settings,
    )


def _pack_chunk(chunk: tuple[int, list[str]], id_type: Any) -> Any:
    first, documents = chunk
    ids, types = pack_documents(
        first, documents, _PACKER["encoder"], _PACKER["settings"], _PACKER["cls_id"], _PACKER["sep_id"]
    )
    return examples_batch(ids, types, id_type)


class PretrainingCollator:
    """Pads a list of examples to the longest (or a fixed length, which `torch.compile` prefers)."""

    def __init__(self, pad_token_id: int, pad_to: int | None = None, pad_to_multiple_of: int = 8):
        self.pad_token_id = pad_token_id
        self.pad_to = pad_to
        self.multiple = pad_to_multiple_of

    def __call__(self, examples: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(example["input_ids"]) for example in examples)
        return pad_batch(
            examples, self.pad_token_id, self.pad_to or -(-longest // self.multiple) * self.multiple
        )


def pad_batch(
    rows: Sequence[dict[str, Any]], pad_token_id: int, length: int | None = None
) -> dict[str, torch.Tensor]:
    """input_ids, token_type_ids and attention_mask of `rows`, right-padded to `length` (default: the longest).

    The one padding routine of pretraining, GLUE and SQuAD batches; callers add their own label columns.
    """
    length = length or max(len(row["input_ids"]) for row in rows)
    # Filled through numpy: a Python list converts into a numpy row ~15x faster than through torch.as_tensor,
    # which decides whether the host keeps a GPU fed (a 128 x 128 batch: ~1 ms instead of ~17 ms on 2 cores).
    input_ids = np.full((len(rows), length), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((len(rows), length), dtype=np.int64)
    attention_mask = np.zeros((len(rows), length), dtype=np.int64)
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        input_ids[i, :n] = row["input_ids"]
        token_type_ids[i, :n] = row["token_type_ids"]
        attention_mask[i, :n] = 1
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "token_type_ids": torch.from_numpy(token_type_ids),
    }


class ResumableBatchOrder:
    """A seeded shuffled order of micro-batches, sharded over processes, that can restart at any global step.

    The order of epoch e is a permutation drawn from (seed, e); process r of w takes every w-th micro-batch. An
    epoch holds whole updates, and update u of an epoch reads its examples u·G to (u+1)·G, G the global batch
    (micro-batch x accumulation x processes), however G is shared out: so a run resumed on another number of
    processes with the same G reads the same examples at every update. Resuming at micro-batch s means
    recomputing the order and skipping s micro-batches, which needs no saved iterator state.
    """

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        accumulation: int = 1,
    ):
        self.num_examples = num_examples
        self.batch_size = batch_size
        self.seed = seed
        self.rank, self.world = rank, world_size
        self.batches_per_epoch = num_examples // (batch_size * accumulation * world_size) * accumulation
        if self.batches_per_epoch == 0:
            raise UserError(
                f"the corpus gives {num_examples} examples, fewer than one global batch ({batch_size} x "
                f"{accumulation} accumulation x {world_size} processes); use a bigger corpus or a smaller "
                f"{spelled(PretrainConfig, 'train_batch_size')}."
            )

    def batches(self, start_step: int = 0) -> Iterator[list[int]]:
        """Index lists for this process, from global step `start_step` on, forever (epoch after epoch)."""
        epoch, offset = divmod(start_step, self.batches_per_epoch)
        while True:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
            size = self.batch_size
            for b in range(offset, self.batches_per_epoch):
                start = (b * self.world + self.rank) * size
                yield order[start : start + size].tolist()
            epoch, offset = epoch + 1, 0


class _MicroBatches:
    """A DataLoader batch sampler over the resumable order, starting at a given micro-batch."""

    def __init__(self, order: ResumableBatchOrder, start: int):
        self.order, self.start = order, start

    def __iter__(self):
        return self.order.batches(self.start)


class CachedSource:
    """The examples of a run packed ahead into the cache, as `PretrainingTask` reads them: `loader(start)` gives
    this process's micro-batches from number `start` on, forever; `rows(n)` the first examples; `examples` their
    number (None for a stream, `electra.data.streaming.StreamedSource`)."""

    def __init__(self, dataset: Any, collate: PretrainingCollator, order: ResumableBatchOrder, workers: int):
        self.dataset, self.collate, self.order, self.workers = dataset, collate, order, workers
        self.examples: int | None = len(dataset)

    def loader(self, start: int) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=_MicroBatches(self.order, start),
            collate_fn=self.collate,
            num_workers=self.workers,
            pin_memory=torch.cuda.is_available(),  # lets the engine's non_blocking copy overlap the step
        )

    def rows(self, count: int) -> list[dict[str, Any]]:
        return [self.dataset[i] for i in range(min(count, len(self.dataset)))]

    def describe(self) -> str:
        return f"{len(self.dataset):,} examples"


def token_counts(dataset, vocab_size: int, max_examples: int = 200_000) -> np.ndarray:
    """Token frequencies over (a prefix of) the examples, for the unigram generator."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    subset = dataset.select(range(min(len(dataset), max_examples))).select_columns(["input_ids"])
    for table in subset.with_format("arrow").iter(batch_size=2000):
        flat = table["input_ids"].combine_chunks().flatten().to_numpy().astype(np.int64)
        counts += np.bincount(flat, minlength=vocab_size)[:vocab_size]
    return counts
