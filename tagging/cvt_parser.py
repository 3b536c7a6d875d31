"""Cross-View Training's graph-based dependency parser (Clark's dissertation, section 4.2.3), on the tagger's
CNN-BiLSTM encoder (`electra.tagging.cvt_model.CvtEncoder`).

Each word t (a dependent) gets one distribution over every candidate edge (u, t, r) that could enter it: a head u,
which is ROOT or another word of the sentence, and a relation r. Dependency parsing is so a classification task, as
in the paper (and Dozat and Manning's parser, which it follows): the argmax is the prediction, no tree decoding.

A module's score of an edge is a bilinear form of the head's and the dependent's representations, each through its
own ReLU hidden layer: s(u, t, r) = head_u · (W + W_r) · q_t / √a, where W is shared by all relations and W_r is
the relation's own, and q_t projects the dependent's hidden vector to a width a (`arc_dim`; the reference's
memory-saving factorization, whose √a scaling keeps the dot products in range). ROOT is a learned vector in place
of an encoder state, scored as any other head (section 4.3.1). Candidates that cannot be heads (padding, the
`<end>` frame, the word itself) are masked out of the softmax.

Modules. The primary one reads both layers ([h1; h2]) for both head and dependent; so does `full`, a student with
dropout. The four restricted views read the first layer's directions, the head's view first: `fwd-bwd` scores
(u, t) from fwd1[u] and bwd1[t], so it never sees the words strictly between a head u and a dependent t to its
right. On unlabeled sentences each restricted module learns the primary module's distribution over edges, made
without dropout and without gradient (`parse_cvt_loss`), so the primary module never learns from unlabeled text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from electra.tagging.cvt_model import (
    Batch,
    CvtEncoder,
    CvtTaggerConfig,
    Vocabulary,
    load_cvt_model,
    primary_argmax,
    soft_cross_entropy,
    teacher_probabilities,
)
from electra.tagging.cvt_settings import PARSER_MODULES

PARSER_TYPE = "electra-cvt-parser"
MASKED = -1e9  # a finite "impossible": 0 · log p stays 0 where -inf would make it NaN


@dataclass
class CvtParserConfig(CvtTaggerConfig):
    """The parser's shape: the tagger's encoder sizes, `num_labels` relations, and the bilinear projection width
    `arc_dim` (the reference's 128)."""

    modules: tuple[str, ...] = PARSER_MODULES
    model_type: str = field(default=PARSER_TYPE)
    arc_dim: int = 128
    known_modules: ClassVar[tuple[str, ...]] = PARSER_MODULES


class ArcScorer(nn.Module):
    """Scores [B, L, L, R] of every edge (head u -> dependent t, relation r) from head-side and dependent-side
    representations [B, L, D] of the framed sentence; position 0 (`<start>`) is replaced by ROOT on the head side."""

    def __init__(self, head_inputs: int, dependent_inputs: int, hidden: int, arc_dim: int, relations: int):
        super().__init__()
        self.root = nn.Parameter(torch.randn(head_inputs) * head_inputs**-0.5)
        self.head_hidden = nn.Linear(head_inputs, hidden)
        self.dependent_hidden = nn.Linear(dependent_inputs, hidden)
        self.query = nn.Linear(hidden, arc_dim)
        self.shared = nn.Parameter(torch.empty(hidden, arc_dim))
        self.per_relation = nn.Parameter(torch.zeros(relations, hidden, arc_dim))
        nn.init.xavier_uniform_(self.shared)

    def forward(self, heads: torch.Tensor, dependents: torch.Tensor, dropout: float) -> torch.Tensor:
        drop = self.training and dropout > 0
        heads = torch.cat([self.root.expand(heads.shape[0], 1, -1), heads[:, 1:]], dim=1)
        h = F.dropout(torch.relu(self.head_hidden(heads)), dropout, drop)  # [B, L, hidden]
        d = F.dropout(torch.relu(self.dependent_hidden(dependents)), dropout, drop)
        keys = torch.einsum("buh,rha->bura", h, self.shared + self.per_relation)  # [B, L, R, a]
        return torch.einsum("bta,bura->btur", self.query(d), keys) / math.sqrt(keys.shape[-1])


def candidate_mask(batch: Batch) -> torch.Tensor:
    """[B, L, L] True where position u may head position t: u is ROOT (0) or a real word, and u is not t."""
    words = batch.token_mask()
    heads = words.clone()
    heads[:, 0] = True
    eye = torch.eye(words.shape[1], dtype=torch.bool, device=words.device)
    return heads.unsqueeze(1) & ~eye


class CvtParser(CvtEncoder):
    """The CNN-BiLSTM encoder with the parser's prediction modules; `forward` returns, for each module asked, the
    edge logits [B, L, L·R] of every framed position t (the dependent) over (head u, relation r) at index u·R + r."""

    def __init__(self, config: CvtParserConfig):
        super().__init__(config)
        c, both, half = config, self.both_width, config.first_width

        def scorer(inputs: int) -> ArcScorer:
            return ArcScorer(inputs, inputs, c.projection, c.arc_dim, c.num_labels)

        self.primary = scorer(both)
        self.auxiliary = nn.ModuleDict({name: scorer(both if name == "full" else half) for name in c.modules})

    def forward(
        self, batch: Batch, dropout: float = 0.0, modules: Sequence[str] = ()
    ) -> dict[str, torch.Tensor]:
        h1, h2 = self.encode(batch, dropout)
        both = torch.cat([h1, h2], dim=-1)
        half = self.config.first_width
        views = {"fwd": h1[..., :half], "bwd": h1[..., half:]}
        allowed = candidate_mask(batch).unsqueeze(-1)
        out = {}
        for name in ("primary", *modules):
            module = self.primary if name == "primary" else self.auxiliary[name]
            if name in ("primary", "full"):
                scores = module(both, both, dropout)
            else:
                head_view, dependent_view = name.split("-")
                scores = module(views[head_view], views[dependent_view], dropout)
            scores = scores.masked_fill(~allowed, MASKED)
            out[name] = scores.flatten(2)
        return out


def edge_targets(
    heads: Sequence[Sequence[int]], relations: Sequence[Sequence[int]], width: int, num_relations: int
) -> torch.Tensor:
    """[B, L] the gold edge's index u·R + r at each framed word position (1..n), -1 elsewhere."""
    targets = torch.full((len(heads), width), -1, dtype=torch.long)
    for i, (sentence_heads, sentence_relations) in enumerate(zip(heads, relations)):
        edges = [h * num_relations + r for h, r in zip(sentence_heads, sentence_relations)]
        targets[i, 1 : len(edges) + 1] = torch.tensor(edges, dtype=torch.long)
    return targets


def parse_supervised_loss(
    model: CvtParser, batch: Batch, targets: torch.Tensor, dropout: float, smoothing: float
) -> torch.Tensor:
    """The primary module's cross-entropy to the gold edges (`edge_targets`), averaged over the words; with
    `smoothing` ε the target is (1-ε)·one-hot plus ε spread over the edges that are possible."""
    logits = model(batch, dropout)["primary"]
    words = batch.token_mask()
    if smoothing == 0:
        return F.cross_entropy(logits[words].float(), targets[words])
    possible = candidate_mask(batch).unsqueeze(-1).expand(-1, -1, -1, model.config.num_labels).flatten(2)
    possible = possible.float()
    spread = possible / possible.sum(-1, keepdim=True)
    one_hot = F.one_hot(targets.clamp(min=0), logits.shape[-1]).float()
    return soft_cross_entropy(logits, (1 - smoothing) * one_hot + smoothing * spread, words)


def parse_cvt_loss(
    model: CvtParser, batch: Batch, dropout: float, modules: Sequence[str] | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The CVT loss of an unlabeled batch: the plain sum over the auxiliary modules of their cross-entropy to the
    primary module's edge distribution (made in evaluation mode, without gradient), at every word. Returns the loss
    and each module's share (floats, for logs)."""
    modules = tuple(model.config.modules if modules is None else modules)
    targets = teacher_probabilities(model, batch)
    out = model(batch, dropout, modules)
    words = batch.token_mask()
    losses = {name: soft_cross_entropy(out[name], targets, words) for name in modules}
    total = sum(losses.values(), torch.zeros((), device=targets.device))
    return total, {name: float(value.detach()) for name, value in losses.items()}


def parse(
    model: CvtParser, sentences: Sequence[Sequence[str]], vocab: Vocabulary, batch_size: int
) -> list[tuple[list[int], list[str]]]:
    """Each sentence's predicted (heads, relations): at each word the primary module's most probable edge."""
    relations = model.config.num_labels
    return [
        ([e // relations for e in edges], [vocab.labels[e % relations] for e in edges])
        for edges in primary_argmax(model, sentences, vocab, batch_size)
    ]


def load_parser(directory: str | Path) -> tuple[CvtParser, Vocabulary]:
    """The parser and vocabulary `save_tagger` wrote for a `CvtParser` (safetensors, no pickle), in evaluation
    mode; a folder that is not one is one UserError naming the file."""
    return load_cvt_model(directory, CvtParserConfig, CvtParser, "CVT parser", "electra parse-bilstm")
