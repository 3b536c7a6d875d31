"""ELECTRA's replaced-token loss against a computation written here, from tensors this test builds.

The generator and the discriminator are replaced by fixed outputs: the generator puts almost all of its mass
(a logit 30 above the rest) on a token the test chose for each position, so its samples are known in advance
(the chance of any other token is under 1e-11 per draw), and the discriminator returns logits the test drew.
Everything between them is the library's: which positions are picked and how many, what the generator reads, how
its samples replace the picked tokens, the labels (a sample equal to the original is "original"), the binary
cross-entropy averaged over the real tokens (padding excluded, [CLS] and [SEP] included), the generator's NLL at
the picked positions and the 50x weight. Each is recomputed below in float64 from the definitions, not from the
library's helpers.
"""

from __future__ import annotations

import math

import pytest
import torch

from electra.core.outputs import SpecialIds
from electra.objectives import build_config
from electra.training.model import PretrainingModel

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIAL = SpecialIds(pad=PAD, cls=CLS, sep=SEP, mask=MASK)
VOCAB = 50
LENGTH = 44
# Candidates per row (real tokens other than [CLS]/[SEP]) and the number picked: round(0.15 n), at least one.
# Worked by hand: 0.15 * 3 = 0.45 -> 1 (the floor of one), 7 -> 1.05 -> 1, 12 -> 1.8 -> 2, 20 -> 3,
# 27 -> 4.05 -> 4, 37 -> 5.55 -> 6, 41 -> 6.15 -> 6.
CANDIDATES_AND_PICKS = ((3, 1), (7, 1), (12, 2), (20, 3), (27, 4), (37, 6), (41, 6))
ROWS = 70  # the seven shapes ten times each: 290 picks, enough to see the [MASK] share
DISCRIMINATOR_WEIGHT = 50.0  # the paper's lambda
MASK_TOKEN_SHARE = (
    0.85  # of the picked positions, the share the generator sees as [MASK]; the rest keep their token
)


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows `[CLS] a.. [SEP] b.. [SEP] [PAD]..`: ids, attention, token types, and each row's expected pick count."""
    draw = torch.Generator().manual_seed(11)
    ids = torch.full((ROWS, LENGTH), PAD)
    attention = torch.zeros(ROWS, LENGTH, dtype=torch.long)
    types = torch.zeros(ROWS, LENGTH, dtype=torch.long)
    picks = torch.zeros(ROWS, dtype=torch.long)
    for row in range(ROWS):
        n, k = CANDIDATES_AND_PICKS[row % len(CANDIDATES_AND_PICKS)]
        first = max(1, n // 2)
        words = torch.randint(4, VOCAB, (n,), generator=draw)
        tokens = [CLS, *words[:first].tolist(), SEP, *words[first:].tolist()] + ([SEP] if n > first else [])
        ids[row, : len(tokens)] = torch.tensor(tokens)
        attention[row, : len(tokens)] = 1
        types[row, first + 2 : len(tokens)] = 1
        picks[row] = k
    return ids, attention, types, picks


def _model() -> PretrainingModel:
    micro = dict(
        hidden_size=32,
        num_hidden_layers=1,
        intermediate_size=64,
        num_attention_heads=2,
        embedding_size=16,
        max_position_embeddings=64,
        max_seq_length=LENGTH,
        vocab_size=VOCAB,
    )
    torch.manual_seed(0)
    return PretrainingModel(build_config("tiny", overrides=micro), SPECIAL).train()


def test_the_electra_loss_equals_the_one_computed_by_hand(monkeypatch):
    ids, attention, types, expected_picks = _batch()
    draw = torch.Generator().manual_seed(5)
    # The token the generator samples at each position: the original at every third position (its sample must be
    # labelled original), another ordinary token elsewhere.
    shifted = (ids - 4 + 1 + torch.randint(0, VOCAB - 5, ids.shape, generator=draw)) % (VOCAB - 4) + 4
    positions = torch.arange(LENGTH).expand(ROWS, LENGTH)
    chosen = torch.where(positions % 3 == 0, ids, shifted)
    generator_logits = torch.randn(ROWS, LENGTH, VOCAB, generator=draw)
    generator_logits.scatter_add_(2, chosen[..., None], torch.full((ROWS, LENGTH, 1), 30.0))
    discriminator_logits = 2.0 * torch.randn(ROWS, LENGTH, generator=draw)
    seen: dict[str, torch.Tensor] = {}

    def generator(generator_input, attention_mask, token_type_ids, picked):
        seen["generator_input"], seen["picked"] = generator_input.clone(), picked.mask.clone()
        return generator_logits.gather(1, picked.index[..., None].expand(-1, -1, VOCAB)).reshape(-1, VOCAB)

    def discriminator(input_ids, attention_mask, token_type_ids):
        seen["corrupted"] = input_ids.clone()
        return discriminator_logits.clone()

    model = _model()
    monkeypatch.setattr(model.generator, "head_at", lambda *args: None)  # logits, not the fused CPU head
    monkeypatch.setattr(model.generator, "logits_at", generator)
    monkeypatch.setattr(model.discriminator, "forward", discriminator)
    torch.manual_seed(1)
    out = model(ids, attention, types)

    # Masking: round(0.15 n) positions per row, all of them ordinary real tokens.
    picked = seen["picked"]
    ordinary = attention.bool() & (ids > MASK)
    assert not (picked & ~ordinary).any(), "a special token or padding was picked"
    assert picked.sum(1).tolist() == expected_picks.tolist()
    # The generator reads [MASK] at about 85% of the picked positions and the original token everywhere else.
    generator_input = seen["generator_input"]
    masked = generator_input == MASK
    assert not (masked & ~picked).any()
    assert torch.equal(generator_input[~masked], ids[~masked])
    share = masked.sum().item() / picked.sum().item()
    assert abs(share - MASK_TOKEN_SHARE) < 0.07, share  # 290 picks: 3.4 standard deviations

    # Sampling and labels: the picked positions hold the generator's choice, the rest the input.
    corrupted = torch.where(picked, chosen, ids)
    assert torch.equal(seen["corrupted"], corrupted)
    replaced = picked & (chosen != ids)
    assert 0 < replaced.sum() < picked.sum()  # both kinds of pick are in the batch

    # Binary cross-entropy over the real tokens: -[y log s(z) + (1 - y) log(1 - s(z))], padding left out.
    z, y = discriminator_logits.double(), replaced.double()
    log_sigmoid = -torch.log1p(torch.exp(-z))
    log_one_minus = -torch.log1p(torch.exp(z))
    per_token = -(y * log_sigmoid + (1 - y) * log_one_minus)
    real = attention.double()
    disc = (per_token * real).sum() / real.sum()
    # The generator's NLL of the original token at each picked position: logsumexp(logits) - logit[original].
    logits = generator_logits.double()
    nll = torch.logsumexp(logits, -1) - logits.gather(2, ids[..., None]).squeeze(-1)
    gen = nll[picked].sum() / picked.sum()
    total = DISCRIMINATOR_WEIGHT * disc + gen

    assert out.metrics["discriminator_loss"].item() == pytest.approx(disc.item(), rel=1e-6)
    assert out.metrics["generator_loss"].item() == pytest.approx(gen.item(), rel=1e-6)
    assert out.loss.item() == pytest.approx(total.item(), rel=1e-6)
    assert out.metrics["replaced_fraction"].item() == pytest.approx(
        replaced.sum().item() / real.sum().item(), rel=1e-6
    )
    assert math.isfinite(total.item()) and disc.item() > 0.1 and gen.item() > 0.1
