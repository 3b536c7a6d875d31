"""A pretraining run's data: its vocabulary (`--vocab`, or the one of the checkpoint it continues), its tokenizer and
packed examples, the held-out split, and where its batches come from (the cached examples in a resumable order, or
a `--streaming` corpus read window by window). `electra.training.pretraining` runs the whole run around them.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled
from electra.data.packing import (
    CachedSource,
    PretrainingCollator,
    ResumableBatchOrder,
    build_pretraining_dataset,
    example_settings,
    token_counts,
)
from electra.data.streaming import (
    LEDGER_FOLDER,
    StreamedBatches,
    StreamedSource,
    StreamSpec,
    first_window_examples,
    held_out_count,
    require_windows,
    stream_token_counts,
    stream_window_chars,
)
from electra.data.tokenization import load_or_train_tokenizer, load_saved_tokenizer, load_vocab_tokenizer
from electra.export.layout import masked_lm_dir
from electra.training.continued import init_vocabulary
from electra.training.processes import main_process_first


def run_vocabulary(config: PretrainConfig, vocab: str | None) -> str | None:
    """The vocabulary a run uses: `--vocab`, or the one of the checkpoint it continues or of its frozen generator
    (token ids must keep their meaning), which a differing `--vocab` may not replace."""
    for name, directory in (("init_from", config.init_from), ("generator_from", config.generator_from)):
        if directory is None:
            continue
        own = init_vocabulary(directory) if name == "init_from" else masked_lm_dir(directory)
        if not ((own / "vocab.txt").is_file() or (own / "tokenizer.json").is_file()):
            continue
        if vocab is None:
            vocab = str(own)
        elif load_vocab_tokenizer(vocab).get_vocab() != load_vocab_tokenizer(own).get_vocab():
            raise UserError(
                f"{spelled(RunInputs, 'vocab')} {vocab}: differs from the vocabulary of "
                f"{spelled(PretrainConfig, name)} {directory} ({own}); omit {spelled(RunInputs, 'vocab')} to use "
                "that one."
            )
    return vocab


def loader_workers(config: PretrainConfig) -> int:
    """Data-loader worker processes a process runs: the config's, else none on a CPU and, beside a GPU, 2 (4 when
    streaming, up to the cores but one: a worker packs ~4,000 examples of 128 tokens a second, about what
    ELECTRA-Small consumes on one H100)."""
    if config.dataloader_workers is not None:
        return config.dataloader_workers
    if not torch.cuda.is_available():
        return 0
    return max(2, min(4, (os.cpu_count() or 1) - 1)) if config.streaming else 2


def split_held_out(dataset, config: PretrainConfig):
    """(training examples, held-out examples or None): the last `eval_fraction` of the examples (at most
    `eval_examples`, at least one), never trained on."""
    n = len(dataset)
    if config.eval_fraction <= 0 or n < 2:
        return dataset, None
    held = min(config.eval_examples, max(1, int(n * config.eval_fraction)), n - 1)
    return dataset.select(range(n - held)), dataset.select(range(n - held, n))


def tokenizer_and_examples(
    config: PretrainConfig, inputs: RunInputs, accelerator: Any, resumed: bool
) -> tuple[Any, Any]:
    """The run's tokenizer (a resumed run's own, saved: token ids must keep their meaning; else loaded or trained)
    and its packed examples, built by the main process first so the others read its cache (None when streaming)."""
    with main_process_first(accelerator):
        if resumed:
            tokenizer = load_saved_tokenizer(inputs.output_dir / "tokenizer")
        else:
            tokenizer = load_or_train_tokenizer(
                run_vocabulary(config, inputs.vocab),
                inputs.corpus,
                config.tokenizer_vocab_size,
                config.lowercase,
                _sub(inputs.cache_dir, "tokenizers"),
                strict_utf8=inputs.strict_utf8,
                text_form=config.text_form,
                text_field=inputs.text_field,
            )
        if config.streaming:
            return tokenizer, None
        dataset = build_pretraining_dataset(
            inputs.corpus,
            tokenizer,
            config,
            cache_dir=_sub(inputs.cache_dir, "examples"),
            num_proc=inputs.num_proc,
            doc_boundary=inputs.doc_boundary,
            show_progress=accelerator.is_main_process,
            strict_utf8=inputs.strict_utf8,
            text_field=inputs.text_field,
        )
    return tokenizer, dataset


def batch_source(
    config: PretrainConfig,
    inputs: RunInputs,
    tokenizer: Any,
    dataset: Any,
    collate: PretrainingCollator,
    micro_batch: int,
    where: tuple[int, int, int],
) -> tuple[Any, Any, Any]:
    """Where the run's batches come from (streamed, or the cached examples in a resumable order), the held-out
    examples, and the token counts a unigram generator samples from (None for any other generator). `where` is
    (this process, the number of processes, loader workers)."""
    if config.streaming:
        return _streamed_examples(config, inputs, tokenizer, collate, micro_batch, where)
    dataset, held_out = split_held_out(dataset, config)
    counts = token_counts(dataset, len(tokenizer)) if config.generator == "unigram" else None
    order = ResumableBatchOrder(
        len(dataset), micro_batch, config.seed, where[0], where[1], config.gradient_accumulation_steps
    )
    return CachedSource(dataset, collate, order, where[2]), held_out, counts


def _streamed_examples(
    config: PretrainConfig,
    inputs: RunInputs,
    tokenizer: Any,
    collate: PretrainingCollator,
    micro_batch: int,
    where: tuple[int, int, int],
) -> tuple[StreamedSource, Any, Any]:
    """A `--streaming` run's source, its held-out examples (the start of its first window) and, for the unigram generator,
    token counts of the first windows."""
    from datasets import Dataset

    spec = StreamSpec(
        corpus=str(inputs.corpus),
        doc_boundary=inputs.doc_boundary,
        strict_utf8=inputs.strict_utf8,
        text_field=inputs.text_field,
        tokenizer_json=tokenizer.backend_tokenizer.to_str(),
        cls_id=tokenizer.cls_token_id,
        sep_id=tokenizer.sep_token_id,
        settings=example_settings(config),
        seed=config.seed,
        window_chars=stream_window_chars(),
        ledger_dir=str(inputs.output_dir / LEDGER_FOLDER),
    )
    rank, world, workers = where
    spec = spec.planned()
    require_windows(spec, world * max(1, workers))
    window, first = first_window_examples(spec)
    held = held_out_count(len(first), config.eval_examples, config.eval_fraction)
    spec = replace(spec, held_out=held, held_out_window=window)
    held_out = Dataset.from_list(first[:held]) if held else None
    counts = stream_token_counts(spec, len(tokenizer)) if config.generator == "unigram" else None
    batches = StreamedBatches(spec, collate, micro_batch, rank, world, workers)
    return StreamedSource(batches, first[:2]), held_out, counts


def _sub(root: str | None, name: str) -> str | None:
    return str(Path(root) / name) if root else None
