"""The few numbers that decide a transformer encoder's cost, read from any config this library meets.

FLOP counting only needs widths, depths and the vocabulary, so every source (our `PretrainConfig`, a
`transformers` ElectraConfig/BertConfig, a plain dict) is reduced to an `EncoderShape` first. That keeps the
counting code free of config plumbing and lets GLUE/SQuAD helpers count a checkpoint they only have the HF config of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from electra.core.errors import UserError


@dataclass(frozen=True)
class EncoderShape:
    """One BERT-style encoder: embeddings (optionally factorised), `layers` blocks, nothing task-specific."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    embedding: int
    vocab: int
    type_vocab: int = 2
    max_positions: int = 512

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads

    @property
    def attention_width(self) -> int:
        """Width of the Q/K/V projections (heads x head size; equals `hidden` for every model here)."""
        return self.heads * self.head_size


def discriminator_shape(config: Any) -> EncoderShape:
    """The kept encoder of a `PretrainConfig` (the discriminator, or the MLM model for objective=mlm)."""
    return EncoderShape(
        hidden=config.hidden_size,
        layers=config.num_hidden_layers,
        intermediate=config.intermediate_size,
        heads=config.num_attention_heads,
        embedding=config.embedding_size,
        vocab=config.vocab_size,
        type_vocab=config.type_vocab_size,
        max_positions=config.max_position_embeddings,
    )


def generator_shape(config: Any) -> EncoderShape:
    """The generator tower of a `PretrainConfig`.

    With shared embeddings (sharing `embeddings` or `all`) the generator reads the discriminator's embedding table
    and projects it to its own width, so its embedding size is the discriminator's. Without sharing we still give it
    an embedding of `embedding_size` (the width `transformers.ElectraConfig` builds), which the counter then charges
    as a separate lookup and projection.
    """
    base = discriminator_shape(config)
    return replace(
        base,
        hidden=config.generator_hidden_size,
        layers=config.generator_layers,
        intermediate=config.generator_intermediate_size,
        heads=config.generator_num_attention_heads,
    )


def shape_from_any(config: Any) -> EncoderShape:
    """An `EncoderShape` from a PretrainConfig, a transformers PretrainedConfig, a dict, or an EncoderShape.

    BERT-like HF configs have no `embedding_size`: their embedding width is the hidden size.
    """
    if isinstance(config, EncoderShape):
        return config
    get = (
        config.get if isinstance(config, dict) else (lambda key, default=None: getattr(config, key, default))
    )
    missing = [
        k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size") if get(k) is None
    ]
    if missing:
        raise UserError(
            f"config: cannot count FLOPs, missing {', '.join(missing)}; pass a PretrainConfig or a BERT/ELECTRA "
            "transformers config."
        )
    hidden = int(get("hidden_size"))
    return EncoderShape(
        hidden=hidden,
        layers=int(get("num_hidden_layers")),
        intermediate=int(get("intermediate_size") or 4 * hidden),
        heads=int(get("num_attention_heads")),
        embedding=int(get("embedding_size") or hidden),
        vocab=int(get("vocab_size")),
        type_vocab=int(get("type_vocab_size") or 2),
        max_positions=int(get("max_position_embeddings") or 512),
    )


# How many positions of a sequence the masked-LM output head is charged for.
#   ceil      ceil(mask_prob * seq_len): 20 of 128 at 15%, the count the paper charges Small for (our default).
#   paper     a fixed 20/128 = 80/512 of the sequence whatever mask_prob is, as flops_computation.py does
#             (BERT's max_predictions_per_seq defaults); also used for Large although Large masks 25%.
#   reference int((mask_prob + 0.005) * seq_len), the reference pretraining code's max_predictions_per_seq
#             (19 of 128: one fewer than the FLOPs script charges).
#   all       every position (a left-to-right LM such as GPT, or a cloze model scoring every token).
OUTPUT_POSITION_RULES = ("ceil", "paper", "reference", "all")
PAPER_OUTPUT_FRACTION = 20 / 128


def predicted_positions(mask_prob: float, seq_len: int, rule: str | int | float = "ceil") -> float:
    """Positions per sequence whose output softmax is computed; an int/float is taken as the count itself."""
    if isinstance(rule, (int, float)) and not isinstance(rule, bool):
        if not 0 <= rule <= seq_len:
            raise UserError(f"output positions {rule} must be between 0 and the sequence length {seq_len}.")
        return float(rule)
    if rule == "ceil":
        # The tiny epsilon keeps 0.15 * 120 = 18.000000000000004 from becoming 19.
        return float(min(seq_len, math.ceil(mask_prob * seq_len - 1e-9)))
    if rule == "paper":
        return PAPER_OUTPUT_FRACTION * seq_len
    if rule == "reference":
        return float(int((mask_prob + 0.005) * seq_len))
    if rule == "all":
        return float(seq_len)
    raise UserError(
        f"output positions rule {rule!r} is not one of {', '.join(OUTPUT_POSITION_RULES)} or a number."
    )
