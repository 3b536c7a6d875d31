"""Lane dropout (`electra.nn.dropout`, `electra.nn.lane_attention`): the rate it claims, the expectation kept, torch's
numbers on a given mask, and torch's own path wherever the lanes do not apply."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from transformers import ElectraConfig
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.electra.modeling_electra import ElectraSelfAttention

from electra.core.outputs import SpecialIds
from electra.nn import dropout as lanes
from electra.nn import lane_attention
from electra.objectives import build_config
from electra.training.model import PretrainingModel

SPECIAL = SpecialIds(pad=0, cls=1, sep=2, mask=3)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.02])
def test_the_mask_keeps_the_stated_fraction_with_independent_lanes(p):
    torch.manual_seed(0)
    keep = lanes.keep_mask((1 << 22,), p)
    kept_rate = 1 - round(p * 65536) / 65536
    sigma = math.sqrt(kept_rate * (1 - kept_rate) / keep.numel())
    assert abs(keep.float().mean().item() - kept_rate) < 5 * sigma
    # the four lanes of one word, and neighbouring words, must not move together
    pairs = keep.view(-1, 4)
    for a, b in ((0, 1), (1, 2), (2, 3), (3, 0)):
        both = (pairs[:, a] & pairs[:, b]).float().mean().item()
        assert abs(both - kept_rate**2) < 5 * math.sqrt(kept_rate**2 * (1 - kept_rate**2) / pairs.shape[0])
    words = keep.view(-1, 4)[:, 3]
    both = (words[:-1] & words[1:]).float().mean().item()
    assert abs(both - kept_rate**2) < 5 * math.sqrt(kept_rate**2 * (1 - kept_rate**2) / words.shape[0])


def test_each_call_draws_a_new_mask_and_the_seed_repeats_it():
    torch.manual_seed(3)
    first, second = lanes.keep_mask((4096,), 0.1), lanes.keep_mask((4096,), 0.1)
    torch.manual_seed(3)
    assert torch.equal(first, lanes.keep_mask((4096,), 0.1))
    assert not torch.equal(first, second)


@pytest.mark.parametrize("p", [0.1, 0.0, 0.9999])
def test_the_mask_is_its_lanes_compared_with_the_threshold(p):
    """The CPU compares the lanes in numpy (faster than torch's int16 `ge`); the bools are torch's, lane for lane,
    including an odd count that uses part of the last word."""
    torch.manual_seed(5)
    keep = lanes.keep_mask((3, 7, 5), p)
    torch.manual_seed(5)
    lane_values = lanes.random_words(27).view(torch.int16)[:105]
    assert keep.dtype == torch.bool and keep.shape == (3, 7, 5)
    assert torch.equal(keep, (lane_values >= lanes.lane_threshold(p)[0]).view(3, 7, 5))


def test_mask_words_follow_torchs_generator_so_a_restored_state_repeats_them():
    """The words come from numpy's SFC64 seeded by torch's generator: a saved and restored RNG state (what a
    resumed run does) gives the same words, the generator moves on after each draw, and the words span int64."""
    torch.manual_seed(11)
    state = torch.get_rng_state()
    first = lanes.random_words(50_000)
    torch.set_rng_state(state)
    assert torch.equal(first, lanes.random_words(50_000))
    assert not torch.equal(first, lanes.random_words(50_000))
    assert first.dtype == torch.int64 and first.min() < -(1 << 62) and first.max() > 1 << 62


def test_kept_values_are_scaled_by_the_exact_keep_probability_and_gradients_follow_the_mask():
    torch.manual_seed(1)
    x = torch.randn(64, 48, requires_grad=True)
    keep = lanes.keep_mask(x.shape, 0.1)
    out = lanes.apply_keep_mask(x, keep, 0.1)
    scale = 65536 / (65536 - round(0.1 * 65536))
    torch.testing.assert_close(out, torch.where(keep, x * scale, 0.0), rtol=0, atol=0)
    weights = torch.randn_like(x)
    (out * weights).sum().backward()
    torch.testing.assert_close(x.grad, torch.where(keep, weights * scale, 0.0), rtol=0, atol=0)
    # torch's dropout on the same mask: the same numbers up to the scale's last digits (1/0.9 vs 65536/58982)
    reference = x.detach() * keep / 0.9
    torch.testing.assert_close(out.detach(), reference, rtol=2e-5, atol=0)
    # as in torch's dropout (x · mask · scale), a dropped NaN stays NaN and a kept one is NaN
    poisoned = x.detach().clone()
    dropped, kept = (~keep).nonzero()[0], keep.nonzero()[0]
    poisoned[tuple(dropped)] = poisoned[tuple(kept)] = float("nan")
    out = lanes.apply_keep_mask(poisoned, keep, 0.1)
    assert out[tuple(dropped)].isnan() and out[tuple(kept)].isnan() and out.isnan().sum() == 2


def test_the_expectation_is_unchanged():
    x = torch.ones(1 << 20)
    torch.manual_seed(2)
    assert abs(lanes.lane_dropout(x, 0.1).mean().item() - 1.0) < 5 * math.sqrt(0.1 / 0.9 / x.numel())


def test_evaluation_and_zero_rate_are_the_identity():
    x = torch.randn(8, 16)
    assert lanes.lane_dropout(x, 0.1, training=False) is x
    layer = lanes.LaneDropout(0.1).eval()
    assert torch.equal(layer(x), x)
    assert torch.equal(lanes.lane_dropout(x, 0.0), x)


def _qkv(batch=3, heads=2, length=10, dim=8):
    g = torch.Generator().manual_seed(5)
    return [torch.randn(batch, heads, length, dim, generator=g, requires_grad=True) for _ in range(3)]


class _Encoder(torch.nn.Module):
    is_causal = False


def test_attention_on_a_given_mask_equals_the_formula_forward_and_backward(monkeypatch):
    q, k, v = _qkv()
    allowed = torch.ones(3, 1, 10, 10, dtype=torch.bool)
    allowed[1, :, :, 7:] = False  # padding keys of row 1
    fixed = torch.rand(3, 2, 10, 10, generator=torch.Generator().manual_seed(9)) > 0.3
    monkeypatch.setattr(lane_attention, "keep_mask", lambda shape, p, device="cpu": fixed)
    out, _ = lane_attention.lane_dropout_attention(_Encoder(), q, k, v, allowed, dropout=0.3, scaling=0.25)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)

    scores = (q @ k.transpose(-1, -2)) * 0.25
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    scale = 65536 / (65536 - round(0.3 * 65536))
    expected = ((weights * fixed * scale) @ v).transpose(1, 2)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    for ours, theirs in zip(got, torch.autograd.grad(expected, (q, k, v), grad)):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def _plain_attention(q, k, v, mask, keep, p, scaling):
    """The four plain operations the lane attention replaced (scores, softmax, lane mask, weighted sum)."""
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(scaling)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    elif mask is not None:
        scores = scores + mask
    weights = lanes.apply_keep_mask(torch.softmax(scores, dim=-1), keep, p)
    return torch.matmul(weights, v).transpose(1, 2).contiguous()


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
@pytest.mark.parametrize("scaling", [0.125, 0.3])
def test_attention_by_head_and_slice_is_the_plain_operations(monkeypatch, mask_kind, scaling):
    """On transformers' layout (q, k, v as [B, H, L, D] views of [B, L, H·D] projections), sliced 2 + 2 + 1
    sequences: the plain operations' values, bitwise where the scaling is a power of two (applied in the GEMM it
    then rounds nothing), and their gradients to fp32 rounding (BLAS sums strided operands in another order)."""
    batch, heads, length, dim = 5, 3, 12, 8
    g = torch.Generator().manual_seed(2)
    projections = [torch.randn(batch, length, heads * dim, generator=g, requires_grad=True) for _ in range(3)]

    def views():
        return [x.view(batch, length, heads, dim).transpose(1, 2) for x in projections]

    mask = None
    if mask_kind == "bool":
        mask = torch.ones(batch, 1, length, length, dtype=torch.bool)
        mask[1, :, :, 9:] = False  # padding keys of two sequences
        mask[4, :, :, 5:] = False
    elif mask_kind == "additive":
        mask = torch.randn(batch, 1, length, length, generator=g)
    keep = torch.rand(batch, heads, length, length, generator=g) > 0.2
    monkeypatch.setattr(lane_attention, "keep_mask", lambda shape, p, device="cpu": keep)
    monkeypatch.setattr(lane_attention, "SLICE_BYTES", 2 * heads * length * length * 4)
    assert [(r.start, r.stop) for r in lane_attention._batch_slices(keep.float())] == [(0, 2), (2, 4), (4, 5)]
    grad = torch.randn(batch, length, heads, dim, generator=g)

    ours, _ = lane_attention.lane_dropout_attention(_Encoder(), *views(), mask, dropout=0.2, scaling=scaling)
    ours_grads = torch.autograd.grad(ours, projections, grad)
    plain = _plain_attention(*views(), mask, keep, 0.2, scaling)
    plain_grads = torch.autograd.grad(plain, projections, grad)

    assert ours.shape == (batch, length, heads, dim) and ours.is_contiguous()
    if scaling == 0.125:
        assert torch.equal(ours, plain)
    torch.testing.assert_close(ours, plain, rtol=1e-6, atol=1e-6)
    for mine, theirs in zip(ours_grads, plain_grads):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_attention_without_the_lanes_is_transformers_sdpa(dropout):
    q, k, v = _qkv()
    allowed = torch.ones(3, 1, 10, 10, dtype=torch.bool)
    causal = _Encoder()
    causal.is_causal = dropout > 0  # a decoder keeps SDPA even with dropout
    torch.manual_seed(4)
    ours, _ = lane_attention.lane_dropout_attention(causal, q, k, v, allowed, dropout=dropout, scaling=0.3)
    torch.manual_seed(4)
    theirs, _ = sdpa_attention_forward(causal, q, k, v, allowed, dropout=dropout, scaling=0.3)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("mask_kind", ["none", "bool"])
@pytest.mark.parametrize("heads", [1, 3])
def test_packed_projections_are_the_separate_ones_forward_and_backward(monkeypatch, mask_kind, heads):
    """`LaneSelfAttention` (q, k, v as one GEMM, one gradient for all three) against ELECTRA's own self-attention
    on the lane attention, same weights and dropout mask: the output and every gradient (input, the three weights
    and biases) to fp32 rounding, the same parameter names, and the parent's forward, bitwise, in evaluation."""
    batch, length, dim = 5, 12, 16
    config = ElectraConfig(
        hidden_size=heads * dim, num_attention_heads=heads, attention_probs_dropout_prob=0.2
    )
    config._attn_implementation = lane_attention.ATTENTION
    torch.manual_seed(4)
    separate = ElectraSelfAttention(config).train()
    packed = copy.deepcopy(separate)
    assert lane_attention.use_lane_modules(packed) == 1 and type(packed) is lane_attention.LaneSelfAttention
    assert list(packed.state_dict()) == list(separate.state_dict())
    keep = torch.rand(batch, heads, length, length, generator=torch.Generator().manual_seed(6)) > 0.2
    monkeypatch.setattr(lane_attention, "keep_mask", lambda shape, p, device="cpu": keep)
    mask = None
    if mask_kind == "bool":
        mask = torch.ones(batch, 1, length, length, dtype=torch.bool)
        mask[1, :, :, 8:] = False
    x = torch.randn(batch, length, heads * dim, requires_grad=True)
    grad = torch.randn(batch, length, heads * dim)
    results = []
    for module in (separate, packed):
        out, _ = module(x, attention_mask=mask)
        results.append((out, torch.autograd.grad(out, (x, *module.parameters()), grad)))
    (ours, our_grads), (theirs, their_grads) = results[1], results[0]
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    assert len(our_grads) == 7
    for mine, reference in zip(our_grads, their_grads):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        assert torch.equal(
            packed.eval()(x, attention_mask=mask)[0], separate.eval()(x, attention_mask=mask)[0]
        )


@pytest.mark.parametrize("training", [True, False])
def test_packed_attention_takes_the_cache_by_either_name(training):
    """transformers 5.24 passes the self-attention's cache as `cache=` (and `encoder_hidden_states=`), earlier
    versions as `past_key_values=`: a fresh install with 5.24 had failed every training step ("got multiple values
    for argument 'cache'"). Whichever name, or position, the output is the same, training and in evaluation."""
    config = ElectraConfig(hidden_size=32, num_attention_heads=2, attention_probs_dropout_prob=0.2)
    config._attn_implementation = lane_attention.ATTENTION
    torch.manual_seed(4)
    module = ElectraSelfAttention(config).train(training)
    lane_attention.use_lane_modules(module)
    x = torch.randn(3, 7, 32)
    outputs = []
    for call in (
        lambda: module(x, None),
        lambda: module(x, None, None),
        lambda: module(x, attention_mask=None, past_key_values=None),
        lambda: module(x, attention_mask=None, cache=None, encoder_hidden_states=None),
    ):
        torch.manual_seed(8)
        outputs.append(call()[0])
    assert all(torch.equal(outputs[0], out) for out in outputs[1:])


def _model(cpu_dropout: str, objective: str = "electric", **shape) -> PretrainingModel:
    overrides = {"objective": objective, "vocab_size": 90, "attention_probs_dropout_prob": 0.1, **shape}
    torch.manual_seed(0)
    return PretrainingModel(
        build_config("tiny", overrides={**overrides, "cpu_dropout": cpu_dropout}), SPECIAL
    )


def _attention_names(model: torch.nn.Module) -> set[str]:
    return {
        m.config._attn_implementation
        for m in model.modules()
        if hasattr(getattr(m, "config", None), "_attn_implementation")
    }


def test_the_model_switches_as_configured_and_evaluates_identically():
    with_lanes, with_torch = _model("lanes"), _model("torch")
    assert _attention_names(with_lanes) == {lane_attention.ATTENTION}
    assert _attention_names(with_torch) == {"sdpa"}
    kinds = {type(m) for m in with_lanes.modules() if isinstance(m, torch.nn.Dropout)}
    assert kinds == {lanes.LaneDropout}
    assert {type(m) for m in with_torch.modules() if isinstance(m, torch.nn.Dropout)} == {torch.nn.Dropout}
    assert {type(m) for m in with_lanes.modules() if isinstance(m, ElectraSelfAttention)} == {
        lane_attention.LaneSelfAttention
    }
    assert {type(m) for m in with_torch.modules() if isinstance(m, ElectraSelfAttention)} == {
        ElectraSelfAttention
    }
    with_torch.load_state_dict(with_lanes.state_dict())
    ids = torch.randint(5, 90, (4, 24), generator=torch.Generator().manual_seed(1))
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    attention = torch.ones_like(ids)
    attention[2, 15:] = 0
    with torch.no_grad():
        a = with_lanes.eval().discriminator.model.electra(ids, attention_mask=attention).last_hidden_state
        b = with_torch.eval().discriminator.model.electra(ids, attention_mask=attention).last_hidden_state
    assert torch.equal(a, b)


SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "embedding_size": 64,
    "hidden_dropout_prob": 0.1,
}


def _batch(rows: int = 8, length: int = 24) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row alternates two tokens of its own: a masked token is the one two places away."""
    ids = 5 + 2 * torch.arange(rows)[:, None] + torch.arange(length)[None, :] % 2
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    return ids, torch.ones_like(ids), torch.zeros_like(ids)


def test_under_dropout_the_outputs_have_torchs_mean():
    """Same weights and batch, 32 dropout draws each: the discriminator's mean output agrees with torch's dropout
    within the draws' noise (a wrong rate or scale would move it), and differs from no dropout at all."""
    ids, attention, types = _batch()
    with_lanes, with_torch = _model("lanes", "electra", **SMALL), _model("torch", "electra", **SMALL)
    with_torch.load_state_dict(with_lanes.state_dict())
    stats = {}
    for kind, model, training in (
        ("lanes", with_lanes, True),
        ("torch", with_torch, True),
        ("none", with_torch, False),
    ):
        model.train(training)
        draws = []
        with torch.no_grad():
            for draw in range(32 if kind != "none" else 1):
                torch.manual_seed(draw)
                draws.append(
                    torch.nn.functional.softplus(model.discriminator(ids, attention, types)).mean().item()
                )
        draws = torch.tensor(draws)
        stats[kind] = (draws.mean().item(), draws.var().item() / len(draws) if len(draws) > 1 else 0.0)
    (a, va), (b, vb), (none, _) = stats["lanes"], stats["torch"], stats["none"]
    assert abs(a - b) < 4 * math.sqrt(va + vb)
    assert abs(none - b) > 4 * math.sqrt(vb)


def test_a_masked_lm_learns_as_well_with_lanes():
    """30 steps on rows a masked LM can learn, from the same weights, over four seeds: on average the loss falls by
    more than two thirds with either dropout, and neither mean ends far from the other.

    Why a mean: one seed's final loss is one draw of the masks and the dropout, and it spreads widely (on torch
    2.13, the last five steps' mean over the first five's ranged 0.18-0.35 with lanes and 0.18-0.28 with torch's
    dropout over ten seeds); a single seed compared at 1.25× had passed at 1.24× and failed on torch 2.6, whose
    Bernoulli draws differ, at 1.29×. Over seeds 0-3 the means measured 0.253 against 0.220 (torch 2.13) and
    0.242 (torch 2.6)."""
    batch = _batch()
    fall = {}
    for kind in ("lanes", "torch"):
        ratios = []
        for seed in range(4):
            model = _model(kind, "mlm", **SMALL).train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=6e-3)
            torch.manual_seed(seed)
            trace = []
            for _ in range(30):
                optimizer.zero_grad()
                loss = model(*batch).loss
                loss.backward()
                optimizer.step()
                trace.append(loss.item())
            ratios.append(sum(trace[-5:]) / sum(trace[:5]))
        fall[kind] = sum(ratios) / len(ratios)
        assert fall[kind] < 0.3, kind
    assert fall["lanes"] < 1.25 * fall["torch"] and fall["torch"] < 1.25 * fall["lanes"]


def test_the_export_names_plain_sdpa_nowhere(tmp_path):
    model = _model("lanes")
    model.discriminator.model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert lane_attention.ATTENTION not in json.dumps(saved)


def test_the_config_refuses_an_unknown_choice():
    from electra.core.errors import UserError

    with pytest.raises(UserError, match="cpu_dropout"):
        build_config("tiny", overrides={"cpu_dropout": "fast"})


def test_a_plain_transformers_encoder_takes_the_lanes_and_saves_as_before(tmp_path):
    """What fine-tuners load (`AutoModel` on an export): every dropout and the attention switch, evaluation is
    unchanged bit for bit, training draws lane masks, and the saved config is the same as without the switch."""
    from transformers import ElectraConfig, ElectraModel

    config = ElectraConfig(
        vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        embedding_size=16, max_position_embeddings=32, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    plain, switched = (
        ElectraModel(config),
        ElectraModel(copy.deepcopy(config)),
    )  # each loaded model has its own
    switched.load_state_dict(plain.state_dict())
    swapped = lane_attention.use_lanes(switched)
    dropouts = [m for m in switched.modules() if isinstance(m, torch.nn.Dropout)]
    assert swapped == len(dropouts) > 0 and all(type(m) is lanes.LaneDropout for m in dropouts)
    assert _attention_names(switched) == {lane_attention.ATTENTION} and _attention_names(plain) == {"sdpa"}
    ids = torch.randint(5, 90, (3, 20), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    with torch.no_grad():
        a = plain.eval()(ids, attention_mask=mask).last_hidden_state
        b = switched.eval()(ids, attention_mask=mask).last_hidden_state
        assert torch.equal(a, b)
        torch.manual_seed(2)
        trained = switched.train()(ids, attention_mask=mask).last_hidden_state
    assert torch.isfinite(trained).all() and not torch.allclose(trained, b)
    plain.save_pretrained(tmp_path / "plain")
    switched.save_pretrained(tmp_path / "switched")
    assert json.loads((tmp_path / "plain" / "config.json").read_text()) == json.loads(
        (tmp_path / "switched" / "config.json").read_text()
    )
