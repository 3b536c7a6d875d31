"""Build the generator a config names, wired to the discriminator's embeddings (or whole encoder) as configured."""

from __future__ import annotations

from typing import Any

from torch import nn

from electra.config import PretrainConfig
from electra.hf_configs import generator_hf_config
from electra.outputs import SpecialIds
from generators.base import Generator
from generators.masked_lm import MaskedLMGenerator
from generators.two_tower import TwoTowerGenerator
from generators.unigram import UnigramGenerator


def build_generator(
    config: PretrainConfig, special: SpecialIds, discriminator_encoder: nn.Module, token_counts: Any = None
) -> Generator:
    """`config.generator` (mlm | unigram | two-tower) sharing `config.embedding_sharing` with the encoder."""
    shared = discriminator_encoder.embeddings if config.embedding_sharing != "none" else None
    if config.generator == "unigram":
        if token_counts is None:
            raise ValueError("the unigram generator needs corpus token counts")
        return UnigramGenerator(token_counts, special.as_list())
    if config.generator == "two-tower":
        return TwoTowerGenerator(config, shared_embeddings=shared)
    encoder = discriminator_encoder if config.embedding_sharing == "all" else None
    return MaskedLMGenerator(
        generator_hf_config(config, special.pad), shared_embeddings=shared, shared_encoder=encoder
    )
