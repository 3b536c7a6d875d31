"""Translate our flat PretrainConfig into `transformers.ElectraConfig`s for the discriminator and generator.

Keeping this in one place is what guarantees that exports load in `transformers` with no conversion step.
"""

from __future__ import annotations

from transformers import ElectraConfig

from electra.core.config import PretrainConfig
from electra.nn.lane_attention import attention_name


def discriminator_hf_config(config: PretrainConfig, pad_token_id: int = 0) -> ElectraConfig:
    return _hf_config(
        config,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_attention_heads=config.num_attention_heads,
        num_hidden_layers=config.num_hidden_layers,
        pad_token_id=pad_token_id,
    )


def generator_hf_config(config: PretrainConfig, pad_token_id: int = 0) -> ElectraConfig:
    """The generator's shape: the configured fraction of the discriminator's width, heads and FFN."""
    return _hf_config(
        config,
        hidden_size=config.generator_hidden_size,
        intermediate_size=config.generator_intermediate_size,
        num_attention_heads=config.generator_num_attention_heads,
        num_hidden_layers=config.generator_layers,
        pad_token_id=pad_token_id,
    )


def _hf_config(config: PretrainConfig, **shape) -> ElectraConfig:
    hf = ElectraConfig(
        vocab_size=config.vocab_size,
        embedding_size=config.embedding_size,
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        hidden_act="gelu",
        hidden_dropout_prob=config.hidden_dropout_prob,
        attention_probs_dropout_prob=config.attention_probs_dropout_prob,
        layer_norm_eps=config.layer_norm_eps,
        initializer_range=config.initializer_range,
        **shape,
    )
    hf._attn_implementation = attention_name(config.attn_implementation, config.cpu_dropout)
    return hf
