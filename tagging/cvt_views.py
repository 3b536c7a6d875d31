"""Cross-View Training on a pretrained Transformer (`electra tag --cvt --unlabeled CORPUS`).

The BiLSTM of the dissertation's chapter 4 gets its restricted views for free: the forward LSTM's state at t has
read words 1..t, the backward one's words t..n. A Transformer encoder attends both ways in every layer, so the
views are made: the encoder's lower `view_layers` layers run twice more with the same weights, once under a
left-to-right mask (a piece attends to itself and the pieces before it) and once under a right-to-left one. Four
auxiliary modules (a hidden layer and a softmax each, as in the paper) read, for a word whose pieces run from f to l:

    fwd     the left-to-right state at l      (the word and the words before it)
    bwd     the right-to-left state at f      (the word and the words after it)
    future  the left-to-right state at f - 1  (the words before it only: the word itself is hidden)
    past    the right-to-left state at l + 1  (the words after it only)

([CLS] and [SEP] stand for the word before the first and after the last.) On unlabeled sentences each module learns
the primary tagger's distribution at the word's first piece, computed with dropout off and without gradient: the
only way to lower that loss is to change the shared lower layers and embeddings so that restricted views predict what
the full model predicts, which is CVT's whole mechanism. The primary tagger (`TaggerModel`, the export) gets no
gradient from it. Labeled batches train the primary tagger as plain fine-tuning does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from electra.generators.two_tower import tower_masks
from electra.tagging.model import TaggerModel
from electra.tagging.settings import VIEW_MODULES


def word_bounds(word_starts: torch.Tensor, sep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, L] last piece of the word starting at each position, [B, L] the position after it): a word ends one
    piece before the next word's start or [SEP]. Read only where `word_starts` is true."""
    batch, length = word_starts.shape
    positions = torch.arange(length, device=word_starts.device).expand(batch, length)
    beyond = torch.full_like(positions, length - 1)
    marks = torch.where(word_starts | sep, positions, beyond)
    # the first boundary strictly after each position: a reversed running minimum of the marks shifted by one
    shifted = torch.cat([marks[:, 1:], beyond[:, :1]], dim=1)
    following = shifted.flip(1).cummin(1).values.flip(1)
    return following - 1, following


class TransformerCvtTagger(nn.Module):
    """A `TaggerModel` (the primary module, what is exported) and the auxiliary modules of the restricted views."""

    def __init__(
        self,
        tagger: TaggerModel,
        sep_token_id: int,
        view_layers: int,
        modules: Sequence[str] = VIEW_MODULES,
    ):
        super().__init__()
        self.tagger = tagger
        self.sep_token_id, self.view_layers = sep_token_id, view_layers
        config = tagger.encoder.config
        width, labels = config.hidden_size, len(tagger.labels)
        self.auxiliary = nn.ModuleDict(
            {
                name: nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, labels))
                for name in modules
            }
        )

    def forward(self, **batch: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        return self.tagger(**batch)

    def view_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, L, H] states of the lower `view_layers` layers under the left-to-right and right-to-left masks."""
        encoder = self.tagger.encoder
        hidden = encoder.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        if hasattr(encoder, "embeddings_project"):  # ELECTRA-Small's embeddings are narrower than its layers
            hidden = encoder.embeddings_project(hidden)
        masks = tower_masks(attention_mask, encoder.config._attn_implementation, hidden.dtype)
        states = []
        for mask in masks:
            state = hidden
            for layer in encoder.encoder.layer[: self.view_layers]:
                state = layer(state, mask)
                state = state[0] if isinstance(state, tuple) else state
            states.append(state)
        return states[0], states[1]

    def module_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        word_starts: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """Each auxiliary module's logits [B, L, labels], meaningful at word starts."""
        left, right = self.view_states(input_ids, attention_mask, token_type_ids)
        last, after = word_bounds(word_starts, input_ids == self.sep_token_id)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        reads = {
            "fwd": (left, last),
            "bwd": (right, positions),
            "future": (left, (positions - 1).clamp(min=0)),
            "past": (right, after),
        }
        out = {}
        for name, module in self.auxiliary.items():
            states, index = reads[name]
            picked = states.gather(1, index[..., None].expand(-1, -1, states.shape[-1]))
            out[name] = module(picked)
        return out

    def unlabeled_loss(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        word_starts: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(sum over modules of the mean cross-entropy from the primary's soft predictions, per-module losses)."""
        training = self.training
        self.eval()  # the teacher: no dropout, no gradient
        with torch.no_grad():
            _, logits = self.tagger(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
        self.train(training)
        starts = word_starts.bool()
        target = logits[starts].float().softmax(-1)
        losses = {}
        for name, student in self.module_logits(input_ids, attention_mask, token_type_ids, starts).items():
            log_q = F.log_softmax(student[starts].float(), dim=-1)
            losses[name] = -(target * log_q).sum(-1).mean()
        return sum(losses.values()), losses
