"""Gradient-disentangled embedding sharing (GDES, DeBERTa-v3): the discriminator reads the generator's word
embeddings without pulling on them.

With plain sharing (`embedding_sharing=embeddings`) the replaced-token loss and the generator's masked-LM loss pull
one table in opposite directions (the MLM loss gathers similar words together, the discriminator's pushes apart
the words a generator confuses), a "tug of war" DeBERTa-v3 measured. GDES gives the discriminator
`stop_gradient(E_generator) + E_residual`, with the residual starting at zero: the generator's loss alone moves the
shared table, the discriminator's loss alone the residual. The export folds the two into one ordinary embedding
matrix (`as_plain_module`), so a fine-tuner sees a plain `transformers` model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GdesWordEmbeddings(nn.Module):
    """Stands in for the discriminator's `word_embeddings`: shared table (detached) plus its own residual.

    The shared `nn.Embedding` belongs to the generator and is deliberately not registered here: a registered copy
    would appear twice in every state dict, and safetensors refuses tensors that share memory.
    """

    def __init__(self, shared: nn.Embedding):
        super().__init__()
        object.__setattr__(self, "_shared", shared)  # a reference, not a submodule (see the class docstring)
        self.residual = nn.Parameter(torch.zeros_like(shared.weight))
        self.padding_idx = shared.padding_idx
        self.num_embeddings, self.embedding_dim = shared.weight.shape

    @property
    def shared(self) -> nn.Embedding:
        return self._shared

    @property
    def weight(self) -> torch.Tensor:
        """The effective table (what the export writes); `transformers` reads `.weight` for dtype and size."""
        return self._shared.weight.detach() + self.residual

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # Two gathers cost less than materialising the full summed table at every step.
        return F.embedding(input_ids, self._shared.weight).detach() + F.embedding(input_ids, self.residual)

    def as_plain_module(self) -> nn.Embedding:
        """One `nn.Embedding` holding shared + residual: the layout `transformers` loads."""
        plain = nn.Embedding(self.num_embeddings, self.embedding_dim, padding_idx=self.padding_idx)
        plain = plain.to(device=self.residual.device, dtype=self.residual.dtype)
        with torch.no_grad():
            plain.weight.copy_(self.weight)
        return plain


def generator_word_embeddings(generator: nn.Module) -> nn.Embedding:
    """The generator's own word-embedding table (a masked LM's or the two-tower model's)."""
    hf_model = getattr(generator, "model", None)
    if hf_model is not None and hasattr(hf_model, "get_input_embeddings"):
        return hf_model.get_input_embeddings()
    embeddings = getattr(generator, "embeddings", None)
    if embeddings is None:
        raise TypeError(f"{type(generator).__name__} has no word embeddings to share")
    return embeddings.word_embeddings


def share_gdes(discriminator_encoder: nn.Module, generator: nn.Module) -> GdesWordEmbeddings:
    """Replace the discriminator's word embeddings by GDES over the generator's; returns the new module."""
    gdes = GdesWordEmbeddings(generator_word_embeddings(generator))
    discriminator_encoder.embeddings.word_embeddings = gdes
    return gdes
