"""The small value types every floor above passes around: the tokenizer's special ids and a step's output."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class SpecialIds:
    """[PAD] [CLS] [SEP] [MASK]: the ids masking and corruption must never pick or propose."""

    pad: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> SpecialIds:
        return cls(
            tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id
        )

    def as_list(self) -> list[int]:
        return [self.pad, self.cls, self.sep, self.mask]


@dataclass
class StepOutput:
    """One forward of a training step: the loss to backpropagate and named scalar metrics (detached tensors).

    Metrics stay tensors on the device, so a step never waits for the device; the engine averages them over a
    logging window and reads them once per window.
    """

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


# The pretraining model's forward returns the same thing; the name says where it came from.
PretrainingOutput = StepOutput
