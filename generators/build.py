"""Build the generator a config names, wired to the discriminator's embeddings (or whole encoder) as configured."""

from __future__ import annotations

from typing import Any

from torch import nn

from electra.core.config import PretrainConfig
from electra.core.outputs import SpecialIds
from electra.generators.base import Generator
from electra.generators.gdes import share_gdes
from electra.generators.masked_lm import MaskedLMGenerator
from electra.generators.two_tower import TwoTowerGenerator
from electra.generators.unigram import UnigramGenerator
from electra.nn.hf_configs import generator_hf_config


def build_generator(
    config: PretrainConfig, special: SpecialIds, discriminator_encoder: nn.Module, token_counts: Any = None
) -> Generator:
    """`config.generator` (mlm | unigram | two-tower) sharing `config.embedding_sharing` with the encoder.

    `gdes` builds the generator with its own embeddings, then gives the discriminator a detached view of the
    generator's word embeddings plus a zero-initialised residual (`electra.generators.gdes`).
    """
    sharing = config.embedding_sharing
    shared = discriminator_encoder.embeddings if sharing in ("embeddings", "all") else None
    if config.generator == "unigram":
        if token_counts is None:
            raise ValueError("the unigram generator needs corpus token counts")
        return UnigramGenerator(token_counts, special.as_list())
    if config.generator == "two-tower":
        generator = TwoTowerGenerator(config, shared_embeddings=shared)
    else:
        encoder = discriminator_encoder if sharing == "all" else None
        generator = MaskedLMGenerator(
            generator_hf_config(config, special.pad), shared_embeddings=shared, shared_encoder=encoder
        )
    if sharing == "gdes":
        share_gdes(discriminator_encoder, generator)
    return generator
