"""ELECTRA's discriminator: an encoder plus a per-token sigmoid head deciding "original" vs "replaced"."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import ElectraForPreTraining


class ReplacedTokenDiscriminator(nn.Module):
    """Holds a `transformers.ElectraForPreTraining`, so `save_pretrained` writes exactly the layout users load."""

    def __init__(self, hf_config):
        super().__init__()
        self.model = ElectraForPreTraining(hf_config)

    @property
    def encoder(self):
        return self.model.electra

    def forward(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        hidden = self.model.electra(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        return self.model.discriminator_predictions(hidden)


def replaced_token_loss(
    logits: torch.Tensor, is_replaced: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Mean binary cross-entropy over the real (non-padding) tokens, as the reference implementation averages."""
    weights = attention_mask.to(logits.dtype)
    per_token = F.binary_cross_entropy_with_logits(logits.float(), is_replaced.float(), reduction="none")
    return (per_token * weights).sum() / weights.sum().clamp_min(1.0)
