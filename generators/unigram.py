"""A generator with no context: samples replacements from corpus token frequencies (the paper's weakest noise)."""

from __future__ import annotations

import numpy as np
import torch

from electra.generators.base import Generator


class UnigramGenerator(Generator):
    needs_masked_input = True
    trainable = False

    def __init__(
        self, token_counts: np.ndarray | torch.Tensor, special_ids: list[int], smoothing: float = 0.0
    ):
        super().__init__()
        counts = torch.as_tensor(np.asarray(token_counts), dtype=torch.float64) + smoothing
        counts[list(special_ids)] = 0.0  # never propose [CLS], [SEP], [PAD] or [MASK]
        if counts.sum() <= 0:
            raise ValueError("unigram generator needs at least one non-special token count")
        self.register_buffer("log_probs", torch.log(counts / counts.sum()).float())

    def logits_at(self, input_ids, attention_mask, token_type_ids, positions):
        return self.log_probs.unsqueeze(0).expand(positions.index.numel(), -1)
