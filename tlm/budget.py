"""Compute budgets in the unit a comparison from a well-trained encoder is chosen in: epochs of fine-tuning alone.

Task-aware arms are compared at equal training FLOPs (the FLOP meter of `electra.tlm.model.FlopCounter`). From an
encoder that is already well trained, the budget that makes sense is the one at which fine-tuning alone has
converged on dev; it is found, and stated, in epochs of fine-tuning. `finetune_epoch_flops` turns one epoch into
the FLOPs the meter charges for it, so that every arm gets `epochs × finetune_epoch_flops(...)`.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from electra.tlm.model import analytic_flop_rates
from electra.tlm.settings import TASK_ONLY, TLMSettings, run_config
from electra.tlm.task_data import TaskCollator, batches_forever, encode_task, read_splits, run_tokenizer


def finetune_epoch_flops(settings: TLMSettings) -> float:
    """The training FLOPs the FLOP meter charges fine-tuning alone (`objective none`) for one pass over the training
    split of `settings`, at its batch size, sequence length and tokenizer (`init_from`'s, when given): the task rate
    per token times the tokens of the epoch's batches in the run's seeded order, padding included, as a training
    step is charged. Reads the splits and the tokenizer; trains and writes nothing."""
    settings, config = run_config(replace(settings, objective=TASK_ONLY))
    splits = read_splits(settings)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = run_tokenizer(settings, config, Path(scratch), splits.examples["train"], None)
    config.vocab_size = len(tokenizer)
    rows = encode_task(splits.examples["train"], splits.label_ids["train"], tokenizer, config.max_seq_length)
    batch_size = settings.batch_size or config.train_batch_size
    batches = batches_forever(rows, batch_size, settings.seed, TaskCollator(tokenizer.pad_token_id))
    steps = -(-len(rows) // batch_size)
    tokens = sum(next(batches)["input_ids"].numel() for _ in range(steps))
    task_rate, _ = analytic_flop_rates(config)
    return task_rate * tokens
