"""A frozen, already trained masked LM as the generator (Fast-ELECTRA, Dong et al., ICLR 2024).

Training the generator beside the discriminator costs a backward pass and a loss whose weight must be tuned; a
frozen existing LM costs one forward. Its samples are too easy at first for a fresh discriminator, which is why
Fast-ELECTRA samples at a temperature above 1 early on and lowers it to 1 over training: the distribution starts
flatter (more obvious replacements) and sharpens as the discriminator learns.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from electra.generators.base import Generator


def temperature_at(progress: torch.Tensor, start: float, end: float = 1.0) -> torch.Tensor:
    """Linear fall from `start` to `end` as `progress` goes 0 -> 1 (clamped)."""
    return start + (end - start) * progress.clamp(0.0, 1.0)


class FrozenMaskedLMGenerator(Generator):
    """Any `transformers` masked LM, never updated; its sampling temperature follows `temperature_at`.

    `calls` counts training forwards (micro-batches) in a persistent buffer, so a resumed run continues the
    schedule where it stopped; it stays on the device, so reading the temperature costs no host synchronisation.
    """

    needs_masked_input = True
    trainable = False

    def __init__(self, hf_model: Any, temperature_start: float, total_calls: int):
        super().__init__()
        self.model = hf_model
        self.model.requires_grad_(False)
        self.model.eval()
        self.temperature_start = float(temperature_start)
        self.total_calls = max(1, int(total_calls))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def train(self, mode: bool = True) -> FrozenMaskedLMGenerator:
        super().train(mode)
        self.model.eval()  # no dropout: the noise distribution is the LM's, not a perturbed one
        return self

    def sampling_temperature(self, default: float) -> torch.Tensor:
        temperature = temperature_at(self.calls.float() / self.total_calls, self.temperature_start)
        if self.training:
            self.calls += 1
        return temperature

    def logits_at(self, input_ids, attention_mask, token_type_ids, positions) -> torch.Tensor:
        with torch.no_grad():
            base = getattr(self.model, "electra", None)
            if base is not None and hasattr(self.model, "generator_predictions"):
                # ELECTRA's masked LM: run the vocabulary head at the picked rows only.
                hidden = base(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state
                hidden = positions.rows(hidden)
                return self.model.generator_lm_head(self.model.generator_predictions(hidden))
            kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
            return positions.rows(logits)

    def hf_model(self) -> nn.Module:
        return self.model
