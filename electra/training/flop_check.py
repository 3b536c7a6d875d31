"""`electra flops --measure`: one real training step of the library's own model for a config, on a synthetic
batch, through the same start-up check every pretraining run makes. It builds the objective's model, so it lives
on the objectives' floor, above `electra.flops.measured`, whose counters the components share."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from electra.core.outputs import SpecialIds
from electra.flops.measured import startup_check, synthetic_batch
from electra.generators.fused_nll import plain_head
from electra.objectives import get_objective
from electra.training.model import PretrainingModel


def build_objective_model(config: Any, special: Any = None) -> nn.Module:
    """The library's pretraining model for `config` (random weights), as `electra pretrain` builds it, without
    a tokenizer or corpus: special ids 0/2/3/4 ([PAD] [CLS] [SEP] [MASK]), every piece a word start when
    `cloze_span=word`, uniform counts for a unigram generator. None of these changes a matmul's shape."""
    special = special or SpecialIds(0, 2, 3, 4)
    word_starts = torch.ones(config.vocab_size, dtype=torch.bool) if config.cloze_span == "word" else None
    counts = torch.ones(config.vocab_size) if config.generator == "unigram" else None
    return PretrainingModel(config, special, token_counts=counts, word_starts=word_starts)


def measure_objective_step(
    config: Any,
    seq_len: int | None = None,
    batch_size: int = 2,
    lengths: list[int] | None = None,
    device: str = "cpu",
    seed: int = 0,
) -> dict[str, Any]:
    """The start-up check (`startup_check`) of the library's own model on a synthetic batch, forward and backward:
    what `electra flops --measure` prints. It runs the objective's real training step (masking, sampling and
    all) on `device`, so unlike `matmul_flops_of_config` it needs real kernels (a CPU suffices for tiny to base).
    Counts are per sequence; the objective's RNG state is left as it was."""
    seq_len = config.max_seq_length if seq_len is None else int(seq_len)
    objective = get_objective(config.objective)
    plan = objective.flop_plan(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_objective_model(config).to(device).train()
        special = model.special
        batch = synthetic_batch(config, special, seq_len, batch_size, lengths, seed)
        with plain_head():
            check = startup_check(
                model, {k: v.to(device) for k, v in batch.items()}, config, plan, backward=True
            )
    return {
        "seq_len": seq_len,
        "device": device,
        "attn_implementation": config.attn_implementation,
        "batch_size": batch_size,
        "predicted_positions": check["predicted_positions"],
        "measured_forward": check["measured_forward"] / batch_size,
        "measured_backward": check["measured_backward"] / batch_size,
        "analytic_forward": check["analytic_forward"] / batch_size,
        "ratio": check["ratio"],
        "ok": check["ok"],
        "backward_to_forward": check["backward_to_forward"],
        "startup_flop_check": objective.startup_flop_check,
    }
