"""The fused vocabulary head (`generators/fused_nll.py`) against the plain formula: the same loss, the same
gradients, the same argmax, whatever the chunking; and the two-tower generator's fused path against its plain one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from electra.core.outputs import SpecialIds
from electra.generators import fused_nll
from electra.generators.two_tower import TwoTowerGenerator
from electra.nn.masking import Picked, candidate_mask, sample_from_probs
from electra.objectives import build_config


def _inputs(count: int = 37, width: int = 16, vocab: int = 50):
    generator = torch.Generator().manual_seed(0)
    contexts = torch.randn(count, width, generator=generator, requires_grad=True)
    weight = torch.randn(vocab, width, generator=generator).mul_(0.5).requires_grad_()
    bias = torch.randn(vocab, generator=generator).requires_grad_()
    targets = torch.randint(0, vocab, (count,), generator=generator)
    row_weights = torch.rand(count, generator=generator) * (torch.rand(count, generator=generator) > 0.3)
    return contexts, weight, bias, targets, row_weights


def _plain(contexts, weight, bias, targets, row_weights):
    logits = F.linear(contexts, weight, bias)
    return (F.cross_entropy(logits, targets, reduction="none") * row_weights).sum(), logits.argmax(
        -1
    ) == targets


@pytest.mark.parametrize("rows", [1, 8, 37, 256])
def test_loss_gradients_and_argmax_equal_the_plain_formula(rows):
    contexts, weight, bias, targets, row_weights = _inputs()
    expected, expected_hits = _plain(contexts, weight, bias, targets, row_weights)
    (3.0 * expected).backward()  # an upstream gradient other than 1 must scale every gradient
    plain_grads = [t.grad.clone() for t in (contexts, weight, bias)]
    for t in (contexts, weight, bias):
        t.grad = None
    loss, hits, token_log_q = fused_nll.fused_nll(contexts, weight, bias, targets, row_weights, rows=rows)
    (3.0 * loss).backward()
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-5)
    with torch.no_grad():
        want = torch.log_softmax(F.linear(contexts, weight, bias), -1).gather(1, targets[:, None]).squeeze(1)
    torch.testing.assert_close(token_log_q, want, rtol=1e-6, atol=1e-5)
    assert torch.equal(hits, expected_hits)
    for name, got, want in zip(("contexts", "weight", "bias"), (contexts, weight, bias), plain_grads):
        torch.testing.assert_close(got.grad, want, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize(("rows", "vocab"), [(1, 50), (8, 50), (256, 50), (8, 700), (37, 1024)])
def test_samples_entropy_and_gradients_equal_the_plain_corruption(rows, vocab):
    """ELECTRA's corruption from the chunks: the same tokens as `sample_from_probs` on the full softmax with the
    same seed, each row's entropy, and the loss and gradients of the plain formula (vocabularies of one block of
    the draw's search, of several with a remainder, and of whole blocks)."""
    contexts, weight, bias, targets, row_weights = _inputs(vocab=vocab)
    expected, expected_hits = _plain(contexts, weight, bias, targets, row_weights)
    (3.0 * expected).backward()
    plain_grads = [t.grad.clone() for t in (contexts, weight, bias)]
    for t in (contexts, weight, bias):
        t.grad = None
    with torch.no_grad():
        log_probs = torch.log_softmax(F.linear(contexts, weight, bias), -1)
        want_samples = sample_from_probs(log_probs.exp(), generator=torch.Generator().manual_seed(3))
        want_entropy = -(log_probs.exp() * log_probs).sum(-1)
    out = fused_nll.fused_nll_and_sample(
        contexts, weight, bias, targets, row_weights, rows=rows, generator=torch.Generator().manual_seed(3)
    )
    (3.0 * out.loss).backward()
    assert torch.equal(out.samples, want_samples) and len(set(want_samples.tolist())) > 10
    torch.testing.assert_close(out.entropy, want_entropy, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.loss, expected, rtol=1e-6, atol=1e-5)
    assert torch.equal(out.hits, expected_hits)
    for name, got, want in zip(("contexts", "weight", "bias"), (contexts, weight, bias), plain_grads):
        torch.testing.assert_close(got.grad, want, rtol=1e-5, atol=1e-6, msg=name)


def test_the_fused_draw_follows_the_distribution():
    """Over many rows of one distribution the samples' frequencies match q (a chi-square bound, not a seed)."""
    weight = torch.eye(6)
    bias = torch.log(torch.tensor([0.4, 0.25, 0.15, 0.1, 0.07, 0.03]))
    contexts = torch.zeros(60_000, 6)
    out = fused_nll.fused_nll_and_sample(contexts, weight, bias, torch.zeros(60_000, dtype=torch.long),
                                         torch.zeros(60_000), generator=torch.Generator().manual_seed(0))  # fmt: skip
    expected = 60_000 * bias.exp()
    counts = torch.bincount(out.samples, minlength=6).float()
    assert ((counts - expected) ** 2 / expected).sum() < 25.7  # chi-square, 5 dof, p = 1e-4
    torch.testing.assert_close(out.entropy, torch.full((60_000,), float(-(bias.exp() * bias).sum())))


@pytest.mark.parametrize("vocab", [7, 256, 1000, 1024])
def test_the_blockwise_search_is_searchsorted_down_each_column(vocab):
    """`_inverse_cdf` against `torch.searchsorted(cumsum, threshold, right=True)`, exactly: small integer weights
    (zeros included) make every partial sum exact in fp32, so even thresholds on a boundary must agree."""
    g = torch.Generator().manual_seed(1)
    weights = torch.randint(0, 4, (vocab, 64), generator=g).float()
    cumulative = weights.t().cumsum(-1).contiguous()
    total = cumulative[:, -1]
    on_boundary = cumulative.gather(1, torch.randint(0, vocab, (64, 1), generator=g)).squeeze(1)
    for thresholds in (torch.zeros(64), on_boundary, total * torch.rand(64, generator=g), total - 0.5, total):
        want = (
            torch.searchsorted(cumulative, thresholds[:, None].contiguous(), right=True)
            .squeeze(1)
            .clamp(max=vocab - 1)
        )
        assert torch.equal(fused_nll._inverse_cdf(weights, thresholds), want)


def test_a_tie_for_the_top_counts_as_a_hit():
    """Hits compare the target's logit with the row's largest, so a target tied for the top is a hit (argmax would
    name the first of the tied tokens)."""
    bias = torch.tensor([0.0, 2.0, 2.0, 1.0])
    _, hits, _ = fused_nll.fused_nll(
        torch.zeros(3, 2), torch.zeros(4, 2), bias, torch.tensor([1, 2, 3]), torch.ones(3)
    )
    assert hits.tolist() == [True, True, False]


def test_without_gradients_it_only_scores():
    contexts, weight, bias, targets, row_weights = _inputs()
    with torch.no_grad():
        loss, hits, _ = fused_nll.fused_nll(contexts, weight, bias, targets, row_weights, rows=5)
        expected, expected_hits = _plain(contexts, weight, bias, targets, row_weights)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-5)
    assert torch.equal(hits, expected_hits) and not loss.requires_grad


def test_it_applies_to_eager_fp32_and_bf16_autocast_on_a_cpu_only():
    x = torch.zeros(2, 3)
    assert fused_nll.product_dtype(x) == torch.float32
    assert not fused_nll.applies(x.bfloat16())  # bf16 outside autocast: the plain head's own business
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused_nll.product_dtype(x) == fused_nll.product_dtype(x.bfloat16()) == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.float16):
        assert not fused_nll.applies(x)
    with fused_nll.plain_head():  # what FLOP counts run under: the model's own arithmetic
        assert not fused_nll.applies(x)
    assert fused_nll.applies(x)


def _bf16_head(mode: str, rows: int = 128):
    """Loss, samples, hits and the fp32 gradients of contexts (given in bf16, as autocast's linear layers give
    them), weight and bias: `fp32` the exact formula on those contexts, `plain` autocast's head, `fused` ours."""
    contexts, weight, bias, targets, row_weights = _inputs(count=300, width=32, vocab=1000)
    contexts = contexts.detach().bfloat16().requires_grad_()
    draw = torch.Generator().manual_seed(3)
    if mode == "fp32":
        logits = F.linear(contexts.float(), weight, bias)
        loss = (F.cross_entropy(logits, targets, reduction="none") * row_weights).sum()
        samples = hits = None
    elif mode == "plain":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = F.linear(contexts, weight, bias)
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            loss = (F.nll_loss(log_probs, targets, reduction="none") * row_weights).sum()
            samples = sample_from_probs(log_probs.exp(), generator=draw)
            hits = logits.argmax(-1) == targets
    else:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fused_nll.fused_nll_and_sample(
                contexts, weight, bias, targets, row_weights, rows=rows, generator=draw
            )
        loss, samples, hits = out.loss, out.samples, out.hits
    (3.0 * loss).backward()
    return loss.detach(), samples, hits, [t.grad.float() for t in (contexts, weight, bias)]


@pytest.mark.parametrize("rows", [1, 128, 300])
def test_under_bf16_autocast_it_is_autocasts_head_within_bf16_rounding(rows):
    """Under CPU autocast to bf16 the fused head runs its products in bf16, like autocast's linear layer, and the
    rest in fp32: the same loss to fp32 rounding, the same samples and hits, and gradients no further from the
    exact fp32 formula's than autocast's own plain head, give or take a quarter (its bias gradient is summed in bf16)."""
    want_loss, want_samples, want_hits, plain_grads = _bf16_head("plain")
    loss, samples, hits, grads = _bf16_head("fused", rows)
    _, _, _, exact = _bf16_head("fp32")
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-3)
    assert torch.equal(samples, want_samples) and torch.equal(hits, want_hits)
    for name, got, plain, truth in zip(("contexts", "weight", "bias"), grads, plain_grads, exact):
        error, plain_error = ((g - truth).norm() / truth.norm() for g in (got, plain))
        assert error < 0.01, (name, error)
        assert error <= plain_error * 1.25, (name, error, plain_error)


def test_the_generator_trains_the_same_with_the_fused_head(monkeypatch):
    """mle_loss_and_hits (fused on this CPU) against the same generator forced onto the plain head: equal loss,
    equal accuracy at the slots, and equal gradients for every parameter, the tied embeddings included."""
    config = build_config(
        "tiny",
        overrides=dict(
            vocab_size=60, hidden_size=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=2,
            embedding_size=16, max_position_embeddings=32, max_seq_length=32, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, generator_hidden_multiplier=1.0,
        ),
    )  # fmt: skip
    torch.manual_seed(0)
    model = TwoTowerGenerator(config)
    with torch.no_grad():
        model.output_bias.normal_()
    ids = torch.randint(5, 60, (3, 20), generator=torch.Generator().manual_seed(1))
    ids[:, 0], ids[:, -1] = 1, 2
    mask = torch.ones_like(ids)
    mask[2, 14:] = 0
    candidates = candidate_mask(ids, mask, torch.tensor([0, 1, 2, 3]))
    slots = Picked.from_mask(candidates & (torch.arange(20) % 3 == 0))

    def run(fused: bool):
        monkeypatch.setattr(fused_nll, "applies", lambda contexts: fused)
        model.zero_grad()
        loss, hits = model.mle_loss_and_hits(ids, mask, None, candidates, at=slots)
        loss.backward()
        return (
            loss.detach(),
            hits,
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        )

    fused_loss, fused_hits, fused_grads = run(True)
    plain_loss, plain_hits, plain_grads = run(False)
    torch.testing.assert_close(fused_loss, plain_loss, rtol=1e-6, atol=1e-6)
    assert torch.equal(fused_hits, plain_hits)
    reference, _ = model.mle_loss(ids, mask, None, candidates)
    torch.testing.assert_close(fused_loss, reference.detach(), rtol=1e-6, atol=1e-6)
    assert fused_grads.keys() == plain_grads.keys()
    assert any(name.endswith("word_embeddings.weight") for name in fused_grads)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_an_electric_step_is_the_same_with_the_fused_head(monkeypatch):
    """Electric draws its noise from rows projected again at the replaced positions and reads log q of kept tokens
    from the fused pass: the same noise, loss, metrics and gradients as with the full log-probabilities."""
    model, ids, mask = _small_model("electric")
    _same_step_both_ways(monkeypatch, model, ids, mask)


@pytest.mark.parametrize("objective", ["electra", "electra-tt", "replace-mlm"])
def test_a_replaced_token_step_is_the_same_with_the_fused_head(monkeypatch, objective):
    """ELECTRA's corruption (and ELECTRA-TT's, and the stepping stone that shares it) takes its samples, generator
    loss, accuracy and entropy from the fused chunks on a CPU: the same corrupted tokens, loss, metrics and
    gradients of every parameter (the tied embeddings included) as the plain head's."""
    model, ids, mask = _small_model(objective)
    called = []
    real = fused_nll.fused_nll_and_sample

    def spy(*args, **kwargs):
        called.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(fused_nll, "fused_nll_and_sample", spy)
    _same_step_both_ways(monkeypatch, model, ids, mask)
    assert called  # the fused path ran


@pytest.mark.parametrize("objective", ["electra", "electra-tt"])
def test_the_head_the_corruption_fuses_is_the_generators_own(objective):
    """`head_at` stops `logits_at` before its last layer: the two must give the same logits (eval mode: no
    dropout), the masked LM's tied embeddings and the two-tower model's output bias included."""
    model, ids, mask = _small_model(objective)
    generator = model.generator.eval()
    at = Picked.from_mask(
        candidate_mask(ids, mask, torch.tensor([0, 1, 2, 3])) & (torch.rand(ids.shape) < 0.3)
    )
    with torch.no_grad():
        head = generator.head_at(ids, mask, None, at)
        torch.testing.assert_close(F.linear(*head), generator.logits_at(ids, mask, None, at))


def _small_model(objective: str):
    """A small pretraining model of `objective` and a padded batch for it."""
    from electra.training.model import PretrainingModel

    overrides = dict(
        objective=objective, vocab_size=90, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
        num_attention_heads=2, embedding_size=16, max_position_embeddings=32, max_seq_length=32,
    )  # fmt: skip
    special = SpecialIds(pad=0, cls=1, sep=2, mask=3)
    torch.manual_seed(0)
    model = PretrainingModel(build_config("tiny", overrides=overrides), special)
    ids = torch.randint(5, 90, (4, 24), generator=torch.Generator().manual_seed(1))
    ids[:, 0], ids[:, -1] = special.cls, special.sep
    mask = torch.ones_like(ids)
    mask[3, 15:] = 0
    return model, ids, mask


@pytest.mark.parametrize("objective", ["electra", "electra-tt", "electric"])
def test_a_step_under_bf16_autocast_is_the_same_with_the_fused_head(monkeypatch, objective):
    """Under CPU autocast to bf16 the corruption and Electric's noise take the fused head too (its products in
    bf16, as autocast's linear layer runs them): the same loss and metrics as autocast's plain head to bf16
    rounding, and every parameter's gradient within 2% (relative norm) of the plain head's."""
    model, ids, mask = _small_model(objective)
    _same_step_both_ways(monkeypatch, model, ids, mask, bf16=True)


def _same_step_both_ways(monkeypatch, model, ids, mask, bf16: bool = False) -> None:
    """One training step from one seed with the fused head and with the plain one: the same loss, metrics and
    gradient of every parameter (under bf16 autocast, to bf16 rounding)."""

    def run(fused: bool):
        monkeypatch.setattr(fused_nll, "applies", lambda contexts: fused)
        model.zero_grad()
        torch.manual_seed(7)  # the same dropout masks, positions and draws
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return out, grads

    fused_out, fused_grads = run(True)
    plain_out, plain_grads = run(False)
    loss_tolerance, metric_tolerance = ((1e-3, 1e-3), (1e-2, 1e-3)) if bf16 else ((1e-5, 1e-6), (1e-5, 1e-6))
    torch.testing.assert_close(fused_out.loss, plain_out.loss, rtol=loss_tolerance[0], atol=loss_tolerance[1])
    assert fused_out.metrics.keys() == plain_out.metrics.keys()
    for name, value in plain_out.metrics.items():
        rtol, atol = metric_tolerance
        torch.testing.assert_close(fused_out.metrics[name], value, rtol=rtol, atol=atol, msg=name)
    assert fused_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        if bf16:  # bf16 rounding differs element by element; held as a whole
            assert (fused_grads[name] - grad).norm() <= 0.02 * grad.norm() + 1e-6, name
        else:
            torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
