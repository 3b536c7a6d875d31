"""Electric's two-tower cloze generator: q(x_t | x_\\t) for every position in one pass.

A masked LM sees the context of one position only when that position is hidden, so it needs a forward per
position. Two causal Transformers — one reading left to right, one right to left — see the whole input at once:
the left tower's state at t-1 has read x_<t and the right tower's state at t+1 has read x_>t, so their
concatenation predicts x_t without ever seeing it. That is what makes Electric's noise distribution cheap and what
ELECTRA-TT's likelihood estimate needs.

The right-to-left tower uses an anti-causal attention mask instead of flipping the sequence, so right padding
needs no per-sequence reversal: a real token only ever attends to itself and real tokens after it.

With `cloze_span=word` (objective=cloze) the head reads the right tower where the next word starts instead of at
t+1, so a piece is predicted without the rest of its word and a sentence's score sums log q(word | other words).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import ElectraConfig
from transformers.models.electra.modeling_electra import (
    ElectraEmbeddings,
    ElectraEncoder,
    ElectraGeneratorPredictions,
)

from electra.core.errors import UserError
from electra.core.files import read_safetensors
from electra.generators import fused_nll
from electra.generators.base import Generator, LinearHead
from electra.generators.noise import LogQ
from electra.nn.lane_attention import attention_name
from electra.nn.masking import Picked

CONFIG_NAME = "two_tower_config.json"
WEIGHTS_NAME = "model.safetensors"


def _loss_weights(attention_mask: torch.Tensor, loss_mask: torch.Tensor | None) -> torch.Tensor:
    """[B·L] float: 1 where a position's likelihood counts (`loss_mask`, else every real token), 0 elsewhere."""
    return (loss_mask if loss_mask is not None else attention_mask).reshape(-1).float()


def generator_electra_config(config: Any, attn_implementation: str | None = None) -> ElectraConfig:
    """An HF ElectraConfig at the generator's width (embedding size and vocabulary stay the discriminator's)."""
    hf = ElectraConfig(
        vocab_size=config.vocab_size,
        embedding_size=config.embedding_size,
        hidden_size=config.generator_hidden_size,
        num_hidden_layers=config.generator_layers,
        num_attention_heads=config.generator_num_attention_heads,
        intermediate_size=config.generator_intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        hidden_dropout_prob=config.hidden_dropout_prob,
        attention_probs_dropout_prob=config.attention_probs_dropout_prob,
        layer_norm_eps=config.layer_norm_eps,
        initializer_range=config.initializer_range,
    )
    hf._attn_implementation = attn_implementation or attention_name(
        getattr(config, "attn_implementation", "sdpa"), getattr(config, "cpu_dropout", "lanes")
    )
    return hf


def tower_masks(
    attention_mask: torch.Tensor, implementation: str, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    """[B,1,L,L] masks for the left-to-right and right-to-left towers.

    Every query may attend to itself (the diagonal), which keeps padded query rows from being fully masked —
    a fully masked row gives NaN in SDPA, and NaN times a zero attention weight still poisons real rows.
    """
    length = attention_mask.shape[-1]
    idx = torch.arange(length, device=attention_mask.device)
    keys = attention_mask.bool()[:, None, None, :]
    diag = (idx[:, None] == idx[None, :])[None, None]
    ltr = ((idx[None, :] <= idx[:, None])[None, None] & keys) | diag
    rtl = ((idx[None, :] >= idx[:, None])[None, None] & keys) | diag
    return as_attention_mask(ltr, implementation, dtype), as_attention_mask(rtl, implementation, dtype)


def as_attention_mask(allowed: torch.Tensor, implementation: str, dtype: torch.dtype) -> torch.Tensor:
    """A bool [B,1,L,L] "may attend" mask in the form the encoder's attention takes: SDPA (and its lane-dropout
    variant, `electra.nn.lane_attention`) reads it as it is, the eager path adds a large negative number where
    attention is not allowed."""
    if implementation != "eager":
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


class TwoTowerGenerator(Generator):
    """Two causal towers over shared embeddings, with an output projection tied to the word embeddings.

    `shared_embeddings` is the discriminator's `ElectraEmbeddings` when sharing embeddings (the ELECTRA recipe);
    the generator then projects embedding_size -> its own hidden width with `embeddings_project`, as HF does.
    It reads the ORIGINAL sequence (`needs_masked_input = False`): its prediction at t never sees x_t.
    """

    needs_masked_input = False
    trainable = True

    def __init__(
        self,
        config: Any,
        shared_embeddings: ElectraEmbeddings | None = None,
        word_starts: torch.Tensor | None = None,
    ):
        super().__init__()
        self.config = config
        self.cloze_span = getattr(config, "cloze_span", "piece")
        if self.cloze_span == "word":
            # [vocabulary] bool, saved with the weights so an export scores the same spans without its tokenizer
            # (`electra.data.tokenization.word_start_flags`); all True until a training run or a checkpoint sets it.
            starts = torch.ones(config.vocab_size, dtype=torch.bool) if word_starts is None else word_starts
            if starts.shape != (config.vocab_size,):
                raise UserError(
                    f"word_starts has {tuple(starts.shape)} entries for a vocabulary of {config.vocab_size}."
                )
            self.register_buffer("word_starts", starts.to(torch.bool).clone())
        hf = generator_electra_config(config)
        self.hf_config = hf
        self.embeddings = shared_embeddings if shared_embeddings is not None else ElectraEmbeddings(hf)
        if hf.embedding_size != hf.hidden_size:
            self.embeddings_project = nn.Linear(hf.embedding_size, hf.hidden_size)
        self.ltr = ElectraEncoder(hf)
        self.rtl = ElectraEncoder(hf)
        # The prediction head reads [left state at t-1 ; right state at t+1], so its input is twice as wide.
        head_config = ElectraConfig(**{**hf.to_dict(), "hidden_size": 2 * hf.hidden_size})
        self.predictions = ElectraGeneratorPredictions(head_config)
        self.output_bias = nn.Parameter(torch.zeros(hf.vocab_size))
        self._init_weights(include_embeddings=shared_embeddings is None)

    def _init_weights(self, include_embeddings: bool) -> None:
        std = self.hf_config.initializer_range
        for name, module in self.named_modules():
            if name.startswith("embeddings") and name != "embeddings_project" and not include_embeddings:
                continue
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=std)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def contexts(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, L, embedding_size]: the head's state at each position t, built from x_<t and x_>t only.

        Positions 0 and L-1 get zeros for the missing side (never wrap around, which would leak x_t).
        """
        return self.predictions(self.tower_states(input_ids, attention_mask, token_type_ids))

    def tower_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, L, 2 x hidden]: the two towers' states beside position t, before the head's dense layer (which works
        row by row, so a caller that needs a few positions runs it on those rows alone)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        if hasattr(self, "embeddings_project"):
            hidden = self.embeddings_project(hidden)
        ltr_mask, rtl_mask = tower_masks(attention_mask, self.hf_config._attn_implementation, hidden.dtype)
        left = self.ltr(hidden, attention_mask=ltr_mask).last_hidden_state
        right = self.rtl(hidden, attention_mask=rtl_mask).last_hidden_state
        # Zero the states of padding, so the last real token's missing right context is the same zeros as an
        # unpadded sequence's last position (keeps scores independent of how a batch is padded).
        real = attention_mask[..., None].to(left.dtype)
        left, right = left * real, right * real
        left = F.pad(left[:, :-1], (0, 0, 1, 0))  # position t reads the left tower at t-1
        if self.cloze_span == "piece":
            right = F.pad(right[:, 1:], (0, 0, 0, 1))  # position t reads the right tower at t+1
        else:
            sources = self.right_sources(input_ids)  # index L: past the end, the zero state
            right = F.pad(right, (0, 0, 0, 1)).gather(1, sources[..., None].expand(-1, -1, right.shape[-1]))
        return torch.cat([left, right], dim=-1)

    def right_sources(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[..., L] long: the position whose right-tower state the prediction at t reads (L: none, past the end).

        With `cloze_span=piece` that is t+1. With `word` it is where the next word starts, so the rest of x_t's
        word is hidden too and the pieces of a word chain into log q(word | the other words): without that, the
        pieces of a rare word predict each other and a misspelt or made-up word scores almost as well as a real
        one (the "inflated PLL" of multi-piece words that Kauf & Ivanova 2023 describe for masked LMs)."""
        length = input_ids.shape[-1]
        idx = torch.arange(length, device=input_ids.device)
        if self.cloze_span == "piece":
            return (idx + 1).expand_as(input_ids)
        # starts[t]: t+1 if a word starts at t+1, else L
        starts = torch.where(self.word_starts[input_ids], idx, length)[..., 1:]
        starts = torch.cat([starts, torch.full_like(starts[..., :1], length)], dim=-1)
        return starts.flip(-1).cummin(-1).values.flip(-1)  # the first word start after t

    def project(self, contexts: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits of head states [..., embedding_size]: the expensive part, so callers select first."""
        return F.linear(contexts, self.word_embeddings.weight, self.output_bias)

    @torch.no_grad()
    def log_q(self, contexts: torch.Tensor, targets: torch.Tensor, rows: int = 512) -> torch.Tensor:
        """log q(targets[i] | contexts[i]) in fp32, for scoring many head states [N, embedding_size] without grad.

        A few hundred rows of vocabulary logits at a time go through two buffers that are reused: on a CPU a fresh
        64 MB logits tensor per chunk costs a page fault per 4 KB, and the fused log-softmax reads the logits once
        where `logsumexp` builds temporaries. On this repository's 2-core hosts that halves the head's time."""
        count, vocab = contexts.shape[0], self.word_embeddings.weight.shape[0]
        out = torch.empty(count, dtype=torch.float32, device=contexts.device)
        height = max(1, min(rows, count))
        logits = contexts.new_empty((height, vocab))
        log_probs = torch.empty((height, vocab), dtype=torch.float32, device=contexts.device)
        for begin in range(0, count, height):
            end = min(count, begin + height)
            chunk_logits, chunk_log_probs = logits[: end - begin], log_probs[: end - begin]
            torch.addmm(
                self.output_bias, contexts[begin:end], self.word_embeddings.weight.t(), out=chunk_logits
            )
            torch.log_softmax(chunk_logits.float(), dim=-1, out=chunk_log_probs)
            out[begin:end] = chunk_log_probs.gather(-1, targets[begin:end, None]).squeeze(-1)
        return out

    def logits_at(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        positions: Picked,
    ) -> torch.Tensor:
        """The `Generator` seam: logits [B·K, V] at the slots of `positions`."""
        return self.project(self.head_at(input_ids, attention_mask, token_type_ids, positions).contexts)

    def head_at(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        positions: Picked,
    ) -> LinearHead:
        # The head's dense layer, GELU and LayerNorm at the picked rows only: at every position they cost as much
        # as the rows the head is asked for again, and the FLOP count charges them at the picked rows.
        contexts = self.predictions(
            positions.rows(self.tower_states(input_ids, attention_mask, token_type_ids))
        )
        return LinearHead(contexts, self.word_embeddings.weight, self.output_bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits of q(x_t | x_\\t): [B, L, V], or [B, P, V] at the indices `positions` [B, P]."""
        contexts = self.contexts(input_ids, attention_mask, token_type_ids)
        if positions is not None:
            contexts = torch.gather(contexts, 1, positions[..., None].expand(-1, -1, contexts.shape[-1]))
        return self.project(contexts)

    def mle_loss(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        loss_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean -log q(x_t | x_\\t) over the True entries of `loss_mask`, fp32 log-probabilities [B·L, V]).

        The log-probabilities are what Electric's noise sampling needs (`sample_noise`, after `.detach()`): the
        vocabulary projection and the full-vocabulary log-softmax, the two costliest parts of an Electric step,
        are paid once. They cover every position, so the step's shapes never depend on the data (selecting the
        candidates would cost a host synchronisation for ~2% fewer rows on packed text); rows off `loss_mask`
        weigh nothing. `loss_mask` defaults to every real token.
        """
        attention_mask, contexts = self._contexts_with_mask(input_ids, attention_mask, token_type_ids)
        return self._mle_loss_of(contexts, input_ids, attention_mask, loss_mask)

    def _contexts_with_mask(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(the attention mask, all ones when none is given; `contexts`): what every loss method starts from."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return attention_mask, self.contexts(input_ids, attention_mask, token_type_ids)

    def _mle_loss_of(
        self,
        contexts: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        loss_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weights = _loss_weights(attention_mask, loss_mask)
        log_probs = torch.log_softmax(self.project(contexts.reshape(-1, contexts.shape[-1])).float(), dim=-1)
        nll = F.nll_loss(log_probs, input_ids.reshape(-1), reduction="none")
        loss = (nll * weights).sum() / weights.sum().clamp(min=1)
        return loss, log_probs

    def _fused_head(
        self,
        contexts: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        loss_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`fused_nll` over every position of the batch, weighted as `mle_loss` weighs them."""
        weights = _loss_weights(attention_mask, loss_mask)
        return fused_nll.fused_nll(
            contexts.reshape(-1, contexts.shape[-1]),
            self.word_embeddings.weight,
            self.output_bias,
            input_ids.reshape(-1),
            weights / weights.sum().clamp(min=1),
        )

    def mle_loss_and_hits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        loss_mask: torch.Tensor | None,
        at: Picked,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(`mle_loss`'s loss, [B·K] whether q's most likely token is x_t at the slots `at`), for callers that need
        no log-probabilities: on a CPU the head's logits then never exist whole (`generators/fused_nll.py`)."""
        attention_mask, contexts = self._contexts_with_mask(input_ids, attention_mask, token_type_ids)
        if not fused_nll.applies(contexts):
            loss, log_probs = self._mle_loss_of(contexts, input_ids, attention_mask, loss_mask)
            picked = at.rows(log_probs.detach().view(*input_ids.shape, -1))  # an argmax at the slots only
            return loss, picked.argmax(-1) == at.rows(input_ids)
        loss, hits, _ = self._fused_head(contexts, input_ids, attention_mask, loss_mask)
        return loss, at.rows(hits.view_as(input_ids))

    def mle_loss_and_log_q(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        loss_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, LogQ]:
        """(`mle_loss`'s loss, q's log-probabilities as `sample_noise` reads them). On a CPU the [B·L, V]
        log-probabilities never exist (`generators/fused_nll.py`): the fused head gives log q of every token, and
        the rows the noise is drawn from are projected again, without gradient, at those few positions only."""
        attention_mask, contexts = self._contexts_with_mask(input_ids, attention_mask, token_type_ids)
        if not fused_nll.applies(contexts):
            loss, log_probs = self._mle_loss_of(contexts, input_ids, attention_mask, loss_mask)
            return loss, LogQ.of(log_probs, input_ids)
        loss, _, token_log_q = self._fused_head(contexts, input_ids, attention_mask, loss_mask)
        detached = contexts.detach()

        def rows_at(slots: Picked) -> torch.Tensor:
            with torch.no_grad():
                return torch.log_softmax(self.project(slots.rows(detached)).float(), dim=-1)

        return loss, LogQ(token_log_q.view_as(input_ids), rows_at)

    # ---- persistence: safetensors + JSON, no pickles ----
    def save_pretrained(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        fields = {k: v for k, v in _config_dict(self.config).items() if k in _SAVED_FIELDS}
        meta = {"model_type": "electra-two-tower", "config": fields}
        (directory / CONFIG_NAME).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        # Embeddings are saved even when shared, so the generator directory scores on its own.
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(directory / WEIGHTS_NAME), metadata={"format": "pt"})

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, map_location: str | torch.device = "cpu"
    ) -> TwoTowerGenerator:
        directory = Path(directory)
        if not is_two_tower_dir(directory):
            raise UserError(f"{directory}: no {CONFIG_NAME}; it does not hold a two-tower generator.")
        meta = json.loads((directory / CONFIG_NAME).read_text())
        model = cls(_ShapeConfig(**meta["config"]))
        state = read_safetensors(directory / WEIGHTS_NAME, device=str(map_location))
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.endswith("position_ids") and not k.endswith("token_type_ids")]
        if missing or unexpected:
            raise UserError(
                f"{directory}: weights do not match the config (missing {missing[:3]}, extra {unexpected[:3]})."
            )
        return model


_SAVED_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
    "embedding_size",
    "max_position_embeddings",
    "type_vocab_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "layer_norm_eps",
    "initializer_range",
    "generator_hidden_multiplier",
    "generator_num_layers",
    "mask_prob",
    "attn_implementation",
    "cloze_span",
)


def _config_dict(config: Any) -> dict[str, Any]:
    return config.to_dict() if hasattr(config, "to_dict") else dict(vars(config))


@dataclass
class _ShapeConfig:
    """The shape fields of a PretrainConfig, enough to rebuild the generator without the rest of the run config."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    embedding_size: int
    max_position_embeddings: int
    type_vocab_size: int
    hidden_dropout_prob: float
    attention_probs_dropout_prob: float
    layer_norm_eps: float
    initializer_range: float
    generator_hidden_multiplier: float
    generator_num_layers: int | None
    mask_prob: float = 0.15
    attn_implementation: str = "sdpa"
    cloze_span: str = "piece"

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))

    # Same derivations as electra.core.config.PretrainConfig (kept in step by tests/test_two_tower.py).
    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def generator_num_attention_heads(self) -> int:
        return max(1, round(self.num_attention_heads * self.generator_hidden_multiplier))

    @property
    def generator_hidden_size(self) -> int:
        return self.generator_num_attention_heads * self.head_size

    @property
    def generator_intermediate_size(self) -> int:
        return max(1, round(self.intermediate_size * self.generator_hidden_size / self.hidden_size))

    @property
    def generator_layers(self) -> int:
        return self.generator_num_layers or self.num_hidden_layers


def is_two_tower_dir(directory: str | Path) -> bool:
    return (Path(directory) / CONFIG_NAME).is_file()
