"""Span-prediction heads: ELECTRA's XLNet-style head (the paper's) and a plain independent start/end head.

XLNet-style ("joint") head, as ELECTRA uses it:
- start logits from a linear layer over each token;
- end logits from gelu(W [h_start; h_j]) with a 512-wide hidden layer, where h_start is the gold start token's state
  during training and each of the top-k starts at inference (beam search: k starts x k ends, k = 20);
- for SQuAD 2.0 an answerability classifier on [h_CLS; sum_j softmax(start)_j h_j] (512-wide gelu layer), trained
  with binary cross-entropy on "is impossible" at weight 0.5. Its logit is the no-answer score.
Only context tokens and [CLS] can be starts or ends (the reference's answer mask).

Both heads return the same inference tensors (top-k start scores/indices, k x k end scores/indices and a null
score), so post-processing does not care which head made them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

HEAD_KINDS = ("xlnet", "plain")
_NEG = -10000.0  # additive mask; representable in fp16 and bf16


@dataclass
class HeadConfig:
    kind: str = "xlnet"
    answerable: bool = False  # the answerability classifier (SQuAD 2.0)
    answerable_weight: float = 0.5
    beam_size: int = 20  # start_n_top = end_n_top
    inner_size: int = 512

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class QAOutput:
    loss: torch.Tensor | None = None
    start_top_scores: torch.Tensor | None = None  # (B, k)
    start_top_index: torch.Tensor | None = None  # (B, k)
    end_top_scores: torch.Tensor | None = None  # (B, k, k)
    end_top_index: torch.Tensor | None = None  # (B, k, k)
    null_score: torch.Tensor | None = None  # (B,) higher = more likely no answer in this window
    has_classifier: bool = False
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


def _masked(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return logits + _NEG * (1.0 - mask.to(logits.dtype))


class _Answerability(nn.Module):
    """[CLS] state and the start-probability-weighted state -> one logit for "this question is unanswerable"."""

    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.dense = nn.Linear(2 * hidden, inner)
        self.out = nn.Linear(inner, 1)

    def forward(self, hidden_states: torch.Tensor, start_logits: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(start_logits.float(), dim=-1).to(hidden_states.dtype)
        start_repr = torch.einsum("bl,blh->bh", weights, hidden_states)
        features = torch.cat([hidden_states[:, 0], start_repr], dim=-1)
        return self.out(F.gelu(self.dense(features))).squeeze(-1)


class SpanHead(nn.Module):
    """Either head; `config.kind` picks the end-logit model."""

    def __init__(self, hidden_size: int, config: HeadConfig):
        super().__init__()
        if config.kind not in HEAD_KINDS:
            raise ValueError(f"head kind {config.kind!r} is not one of {HEAD_KINDS}")
        self.config = config
        self.start = nn.Linear(hidden_size, 1)
        if config.kind == "xlnet":
            # W [h_start; h_j] split in two halves, so the start half is computed once per start, not per token.
            self.end_from_start = nn.Linear(hidden_size, config.inner_size)
            self.end_from_token = nn.Linear(hidden_size, config.inner_size, bias=False)
            self.end_out = nn.Linear(config.inner_size, 1)
        else:
            self.end = nn.Linear(hidden_size, 1)
        self.answerable = _Answerability(hidden_size, config.inner_size) if config.answerable else None

    # ---- end logits -------------------------------------------------------------------------------------
    def _end_logits(
        self, token_part: torch.Tensor, start_states: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """End logits (B, L) given one start state per row (B, H) and the precomputed token half (B, L, inner)."""
        hidden = F.gelu(token_part + self.end_from_start(start_states).unsqueeze(1))
        return _masked(self.end_out(hidden).squeeze(-1), mask)

    def forward(
        self,
        hidden_states: torch.Tensor,
        answer_mask: torch.Tensor,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        is_impossible: torch.Tensor | None = None,
    ) -> QAOutput:
        start_logits = _masked(self.start(hidden_states).squeeze(-1), answer_mask)
        if self.config.kind == "xlnet":
            token_part = self.end_from_token(hidden_states)
        answerable_logit = (
            self.answerable(hidden_states, start_logits) if self.answerable is not None else None
        )

        if start_positions is not None and end_positions is not None:
            if self.config.kind == "xlnet":
                gold_start = hidden_states[torch.arange(hidden_states.size(0)), start_positions]
                end_logits = self._end_logits(token_part, gold_start, answer_mask)
            else:
                end_logits = _masked(self.end(hidden_states).squeeze(-1), answer_mask)
            start_loss = F.cross_entropy(start_logits.float(), start_positions, reduction="none")
            end_loss = F.cross_entropy(end_logits.float(), end_positions, reduction="none")
            loss = (start_loss + end_loss) / 2
            metrics = {"start_loss": start_loss.mean().detach(), "end_loss": end_loss.mean().detach()}
            if answerable_logit is not None:
                if is_impossible is None:
                    raise ValueError("the answerability classifier needs is_impossible labels")
                ans_loss = F.binary_cross_entropy_with_logits(
                    answerable_logit.float(), is_impossible.float(), reduction="none"
                )
                loss = loss + self.config.answerable_weight * ans_loss
                metrics["answerable_loss"] = ans_loss.mean().detach()
            return QAOutput(loss=loss.mean(), metrics=metrics, has_classifier=answerable_logit is not None)

        return self._infer(hidden_states, answer_mask, start_logits, answerable_logit)

    @torch.no_grad()
    def _infer(
        self,
        hidden_states: torch.Tensor,
        answer_mask: torch.Tensor,
        start_logits: torch.Tensor,
        answerable_logit: torch.Tensor | None,
    ) -> QAOutput:
        k = min(self.config.beam_size, hidden_states.size(1))
        batch = torch.arange(hidden_states.size(0), device=hidden_states.device)
        if self.config.kind == "xlnet":
            start_log_probs = torch.log_softmax(start_logits.float(), dim=-1)
            start_scores, start_index = start_log_probs.topk(k, dim=-1)
            token_part = self.end_from_token(hidden_states)
            end_scores, end_index = [], []
            for beam in range(k):  # one start at a time keeps memory at B x L x inner
                starts = hidden_states[batch, start_index[:, beam]]
                end_log_probs = torch.log_softmax(
                    self._end_logits(token_part, starts, answer_mask).float(), -1
                )
                top = end_log_probs.topk(k, dim=-1)
                end_scores.append(top.values)
                end_index.append(top.indices)
            end_scores_t = torch.stack(end_scores, dim=1)
            end_index_t = torch.stack(end_index, dim=1)
            if answerable_logit is None:  # score of the null span (start = end = [CLS])
                cls_end = self._end_logits(token_part, hidden_states[:, 0], answer_mask).float()
                null = start_log_probs[:, 0] + torch.log_softmax(cls_end, dim=-1)[:, 0]
        else:
            end_logits = _masked(self.end(hidden_states).squeeze(-1), answer_mask).float()
            start_scores, start_index = start_logits.float().topk(k, dim=-1)
            top_end = end_logits.topk(k, dim=-1)
            end_scores_t = top_end.values.unsqueeze(1).expand(-1, k, -1)
            end_index_t = top_end.indices.unsqueeze(1).expand(-1, k, -1)
            null = start_logits[:, 0].float() + end_logits[:, 0]
        return QAOutput(
            start_top_scores=start_scores,
            start_top_index=start_index,
            end_top_scores=end_scores_t,
            end_top_index=end_index_t,
            null_score=answerable_logit.float() if answerable_logit is not None else null,
            has_classifier=answerable_logit is not None,
        )
