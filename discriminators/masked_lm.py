"""A full-size masked LM in the discriminator's place (Replace MLM, All-Tokens MLM), and the copy mechanism's loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import ElectraForMaskedLM


class MaskedLMDiscriminator(nn.Module):
    """The kept model of Replace MLM and All-Tokens MLM: `transformers.ElectraForMaskedLM` (so it exports as one),
    with its output projection tied to the word embeddings, plus All-Tokens MLM's one-unit copy layer if asked
    (a pretraining-only head, not exported)."""

    def __init__(self, hf_config, copy_mechanism: bool = False):
        super().__init__()
        self.model = ElectraForMaskedLM(hf_config)
        self.model.generator_lm_head.weight = self.model.electra.embeddings.word_embeddings.weight
        self.copy_head = nn.Linear(hf_config.hidden_size, 1) if copy_mechanism else None

    @property
    def encoder(self) -> nn.Module:
        return self.model.electra

    def hidden_states(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        return self.model.electra(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state

    def token_logits(self, rows: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits for hidden-state rows [N, hidden] -> [N, vocab]."""
        return self.model.generator_lm_head(self.model.generator_predictions(rows))


def copy_mechanism_nll(
    token_logits: torch.Tensor, copy_logits: torch.Tensor, input_tokens: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Per-row -log p(target), p = D * 1[target == input] + (1 - D) * softmax(token_logits), D = sigmoid(copy),
    computed in log space (log-sum-exp of log D and log(1 - D) + log softmax where the input is the target)."""
    log_q = torch.log_softmax(token_logits.float(), dim=-1).gather(1, targets.unsqueeze(1)).squeeze(1)
    copy_logits = copy_logits.float()
    log_copy, log_generate = F.logsigmoid(copy_logits), F.logsigmoid(-copy_logits)
    generated = log_generate + log_q
    mixed = torch.logaddexp(log_copy, generated)
    return -torch.where(input_tokens == targets, mixed, generated)
