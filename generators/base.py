"""The seam every generator plugs into: propose token distributions at chosen positions."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from electra.nn.masking import Picked


class LinearHead(NamedTuple):
    """A vocabulary head's last layer at the picked rows: logits = contexts · weightᵀ + bias."""

    contexts: torch.Tensor  # [B·K, E]
    weight: torch.Tensor  # [V, E]
    bias: torch.Tensor  # [V]


class Generator(nn.Module):
    """A noise distribution over tokens at selected positions.

    `needs_masked_input` says whether the generator reads the masked sequence (a masked LM) or the original one (a
    two-tower cloze model, whose prediction at t never sees x_t). `trainable` is False for fixed distributions
    (unigram), which then contribute no loss. Logits are computed only at the selected positions: the vocabulary
    projection is most of a small generator's cost, so full-sequence logits would waste it.
    """

    needs_masked_input: bool = True
    trainable: bool = True

    def logits_at(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        positions: Picked,
    ) -> torch.Tensor:
        """Logits [B·K, vocab] at the K slots per row of `positions` (fillers included: callers weight them out)."""
        raise NotImplementedError

    def sampling_temperature(self, default: float) -> float | torch.Tensor:
        """The temperature of this forward's samples: the configured one, unless the generator schedules its own."""
        return default

    def head_at(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        positions: Picked,
    ) -> LinearHead | None:
        """`logits_at` stopped before its last layer, where that layer is linear: the corruption then takes the
        loss, the samples and the metrics from row chunks without building the logits (`generators/fused_nll.py`).
        Where it is not None, `F.linear(*head_at(...))` must equal `logits_at(...)`. None for generators without
        such a head (their callers use `logits_at`)."""
        return None
