"""The two-tower cloze generator: no peeking at x_t, padding-invariant, learns, and round-trips through disk."""

from __future__ import annotations

import pytest
import torch

from electra.generators.noise import sample_noise
from electra.generators.two_tower import TwoTowerGenerator, tower_masks
from electra.nn.masking import candidate_mask
from electra.objectives import build_config


def _config(**overrides):
    base = dict(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        num_attention_heads=2,
        embedding_size=16,
        max_position_embeddings=32,
        max_seq_length=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        generator_hidden_multiplier=0.5,
    )
    base.update(overrides)
    return build_config("tiny", overrides=base)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_prediction_at_t_ignores_x_t(impl):
    torch.manual_seed(0)
    model = TwoTowerGenerator(_config(attn_implementation=impl)).eval()
    ids = torch.randint(5, 50, (1, 12))
    base = model(ids)
    for t in range(1, 11):
        changed = ids.clone()
        changed[0, t] = (ids[0, t] + 7 - 5) % 45 + 5
        out = model(changed)
        assert torch.allclose(out[0, t], base[0, t], atol=1e-5), t
        # ...while its neighbours do see it: the towers are not trivially blind.
        assert not torch.allclose(out[0, t + 1], base[0, t + 1], atol=1e-5)


def test_right_padding_does_not_change_real_positions():
    torch.manual_seed(0)
    model = TwoTowerGenerator(_config()).eval()
    ids = torch.randint(5, 50, (1, 9))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 9), torch.zeros(1, 4)], dim=1).long()
    short = model(ids)
    long = model(padded, attention_mask=mask)
    assert torch.isfinite(long).all()
    assert torch.allclose(short, long[:, :9], atol=1e-5)


def test_sdpa_and_eager_masks_agree():
    mask = torch.tensor([[1, 1, 1, 0]])
    ltr_b, rtl_b = tower_masks(mask, "sdpa", torch.float32)
    ltr_f, rtl_f = tower_masks(mask, "eager", torch.float32)
    assert torch.equal(ltr_b, ltr_f == 0) and torch.equal(rtl_b, rtl_f == 0)
    # Real token 1 sees 0,1 leftwards and 1,2 rightwards (never the pad at 3).
    assert ltr_b[0, 0, 1].tolist() == [True, True, False, False]
    assert rtl_b[0, 0, 1].tolist() == [False, True, True, False]


def test_positions_select_the_same_logits():
    torch.manual_seed(0)
    model = TwoTowerGenerator(_config()).eval()
    ids = torch.randint(5, 50, (2, 8))
    positions = torch.tensor([[1, 3], [6, 2]])
    full = model(ids)
    picked = model(ids, positions=positions)
    assert torch.allclose(picked[0], full[0, [1, 3]]) and torch.allclose(picked[1], full[1, [6, 2]])


def test_the_head_at_picked_rows_equals_the_full_head_picked():
    """`head_at` runs the head's dense layer, GELU and LayerNorm on the picked rows only (they work row by row):
    its states, and their gradients into the towers, equal the full head's at those rows to fp32 rounding."""
    from electra.nn.masking import Picked

    torch.manual_seed(0)
    model = TwoTowerGenerator(_config())
    ids = torch.randint(5, 50, (3, 9))
    attention = torch.ones_like(ids)
    attention[2, 6:] = 0
    picked = Picked.from_mask(torch.rand(ids.shape) < 0.3)
    fast = model.head_at(ids, attention, None, picked).contexts
    fast_grads = torch.autograd.grad(fast.square().sum(), list(model.parameters()), allow_unused=True)
    slow = picked.rows(model.contexts(ids, attention, None))
    slow_grads = torch.autograd.grad(slow.square().sum(), list(model.parameters()), allow_unused=True)
    assert fast.shape == slow.shape and torch.allclose(fast, slow, atol=1e-6, rtol=1e-5)
    for a, b in zip(fast_grads, slow_grads):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-6, rtol=1e-5))


@pytest.mark.parametrize("rows", [1, 3, 7, 512])
def test_log_q_equals_the_log_softmax_of_the_projection(rows):
    """The buffered scoring head gives log_softmax(project(c))[target] for every row, whatever the chunking."""
    torch.manual_seed(0)
    model = TwoTowerGenerator(_config()).eval()
    with torch.no_grad():
        model.output_bias.normal_()  # a bias that matters, so a dropped one would show
    contexts, targets = torch.randn(7, 16), torch.randint(0, 50, (7,))
    with torch.no_grad():
        expected = torch.log_softmax(model.project(contexts), -1)[torch.arange(7), targets]
    got = model.log_q(contexts, targets, rows=rows)
    assert got.dtype == torch.float32 and got.shape == (7,)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    assert model.log_q(contexts[:0], targets[:0]).shape == (0,)


def test_shared_embeddings_are_the_same_module_and_tied():
    from transformers import ElectraConfig
    from transformers.models.electra.modeling_electra import ElectraEmbeddings

    cfg = _config(embedding_size=32)  # generator width 16 < embedding 32: needs the projection
    shared = ElectraEmbeddings(ElectraConfig(vocab_size=50, embedding_size=32, max_position_embeddings=32))
    model = TwoTowerGenerator(cfg, shared_embeddings=shared)
    assert model.embeddings is shared
    assert (
        model.embeddings_project.in_features == 32
        and model.embeddings_project.out_features == cfg.generator_hidden_size
    )
    ids = torch.randint(5, 50, (1, 6))
    model(ids).sum().backward()
    assert shared.word_embeddings.weight.grad is not None


def test_mle_loss_falls_and_round_trip(tmp_path):
    torch.manual_seed(0)
    model = TwoTowerGenerator(_config())
    # A deterministic language: token t+1 = token t + 1, so both contexts pin each token down.
    starts = torch.randint(5, 30, (16, 1))
    ids = starts + torch.arange(10)[None]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        loss, logits = model.mle_loss(ids)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert logits.shape == (ids.numel(), 50)
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    model.save_pretrained(tmp_path)
    again = TwoTowerGenerator.from_pretrained(tmp_path).eval()
    assert torch.allclose(model(ids), again(ids), atol=1e-6)
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob("*.pt"))


def test_sample_noise_replaces_k_candidates_and_reports_log_q():
    torch.manual_seed(0)
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 15, 16, 3, 0], [2, 20, 21, 3, 0, 0, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    cand = candidate_mask(ids, mask, torch.tensor([0, 2, 3]))
    logits = torch.randn(2, 10, 50)
    gen = torch.Generator().manual_seed(1)
    noise = sample_noise(logits, ids, cand, mask_prob=0.15, generator=gen)
    assert noise.n.tolist() == [7, 2] and noise.k.tolist() == [2, 1]  # ceil(1.05) = 2, ceil(0.3) = 1
    assert noise.replaced_mask.sum(-1).tolist() == [2, 1]
    assert not (noise.replaced_mask & ~cand).any()
    assert torch.equal(noise.input_ids[~noise.replaced_mask], ids[~noise.replaced_mask])
    expected = torch.log_softmax(logits, -1).gather(-1, noise.input_ids[..., None]).squeeze(-1)
    assert torch.allclose(noise.log_q[cand], expected[cand]) and (noise.log_q[~cand] == 0).all()


def test_samples_follow_q():
    # q puts 0.9 on token 7 at every position: about 90% of the replacements must be 7.
    ids = torch.full((400, 6), 5)
    cand = torch.ones_like(ids, dtype=torch.bool)
    logits = torch.full((ids.numel(), 10), -10.0)
    logits[:, 7] = 0.0
    logits[:, 8] = -2.1972  # log(0.1 / 0.9)
    noise = sample_noise(logits, ids, cand, mask_prob=0.5, generator=torch.Generator().manual_seed(0))
    sampled = noise.input_ids[noise.replaced_mask]
    assert sampled.numel() == 400 * 3
    assert abs((sampled == 7).float().mean().item() - 0.9) < 0.03


@pytest.mark.parametrize("size", ["tiny", "mini", "small", "base", "large"])
def test_saved_shape_config_derives_the_same_generator_shape(size):
    from electra.generators.two_tower import _SAVED_FIELDS, _ShapeConfig

    cfg = build_config(size)
    shape = _ShapeConfig(**{k: v for k, v in cfg.to_dict().items() if k in _SAVED_FIELDS})
    for name in (
        "generator_hidden_size",
        "generator_intermediate_size",
        "generator_num_attention_heads",
        "generator_layers",
    ):
        assert getattr(shape, name) == getattr(cfg, name), name
