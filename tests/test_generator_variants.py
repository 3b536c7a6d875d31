"""The adversarial (REINFORCE) generator and two-stage training (dissertation 5.3.3-5.3.4)."""

import pytest
import torch
import torch.nn.functional as F

from electra.core.errors import UserError
from electra.objectives import build_config, flop_report
from electra.objectives.generator_variants import baseline_loss, reinforce_loss
from electra.training.model import build_pretraining_model

from .conftest import pair_batch


@pytest.fixture(scope="module")
def tokenizer(sample_tokenizer):
    return sample_tokenizer


_batch = pair_batch


def test_reinforce_gradient_is_the_score_function_times_the_advantage():
    torch.manual_seed(0)
    logits = torch.randn(5, 7, requires_grad=True)
    samples = torch.tensor([0, 3, 6, 3, 1])
    reward, baseline = torch.rand(5) * 3, torch.rand(5)
    reinforce_loss(torch.log_softmax(logits, -1), samples, reward, baseline).backward()
    # d/dlogits of -(1/N) sum_i A_i log softmax(logits_i)[x_i] = -(A_i/N) (onehot(x_i) - softmax(logits_i))
    expected = -((reward - baseline) / 5)[:, None] * (
        F.one_hot(samples, 7) - torch.softmax(logits.detach(), -1)
    )
    torch.testing.assert_close(logits.grad, expected)


def test_the_baseline_is_fitted_where_it_equals_the_reward():
    reward = torch.tensor([0.1, 0.7, 2.5])
    z = torch.logit(torch.exp(-reward)).requires_grad_(True)  # -log sigmoid(z) == reward
    baseline_loss(z, reward).backward()
    torch.testing.assert_close(z.grad, torch.zeros(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(-F.logsigmoid(z.detach()), reward)
    away = torch.full((3,), 3.0, requires_grad=True)
    baseline_loss(away, reward).backward()
    assert away.grad.abs().min() > 0.01


def test_adversarial_step_gives_the_generator_the_hand_computed_reinforce_gradient(
    micro_overrides, tokenizer
):
    config = build_config("tiny", overrides={**micro_overrides, "objective": "electra-adversarial"})
    torch.manual_seed(0)
    model = build_pretraining_model(config, tokenizer).train()
    seen = {}
    real = model.generator.states_and_logits_at

    def capture(input_ids, attention_mask, token_type_ids, positions):
        states, logits = real(input_ids, attention_mask, token_type_ids, positions)
        logits.retain_grad()
        seen.update(states=states, logits=logits, positions=positions)
        return states, logits

    model.generator.states_and_logits_at = capture
    model.discriminator.register_forward_hook(lambda m, args, out: seen.update(corrupted=args[0], disc=out))
    torch.manual_seed(3)
    out = model(**_batch(tokenizer))
    out.loss.backward()

    positions, logits = seen["positions"], seen["logits"].detach()
    original = _batch(tokenizer)["input_ids"]
    samples = positions.rows(seen["corrupted"])  # the K slots per row; fillers carry weight 0
    replaced = (samples != positions.rows(original)).float()
    d_logits = positions.rows(seen["disc"].detach())
    weights = positions.weights()
    reward = -(replaced * F.logsigmoid(d_logits) + (1 - replaced) * F.logsigmoid(-d_logits))  # D's loss at t
    w = model.reward_baseline
    baseline = -F.logsigmoid(seen["states"].detach() @ w.weight.detach().T + w.bias.detach()).squeeze(-1)
    n = weights.sum()
    expected = -(weights * (reward - baseline) / n)[:, None] * (
        F.one_hot(samples, logits.shape[-1]) - torch.softmax(logits, -1)
    )
    torch.testing.assert_close(seen["logits"].grad, expected, rtol=1e-4, atol=1e-7)
    assert out.metrics["generator_reward"] == pytest.approx(float((reward * weights).sum() / n), rel=1e-5)
    for name in ("generator_entropy", "generator_accuracy", "generator_mlm_loss", "baseline_loss"):
        assert torch.isfinite(out.metrics[name]), name
    assert w.weight.grad is not None and w.weight.grad.abs().sum() > 0  # the baseline trains


def test_two_stage_trains_the_generator_then_starts_the_discriminator_from_it(micro_overrides, tokenizer):
    config = build_config(
        "tiny",
        overrides={
            **micro_overrides,
            "objective": "electra-two-stage",
            "max_steps": 4,
            "generator_hidden_multiplier": 1.0,
        },
    )
    assert config.generator_hidden_multiplier == 1.0 and config.embedding_sharing == "none"
    torch.manual_seed(0)
    model = build_pretraining_model(config, tokenizer).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    discriminator = model.discriminator.encoder
    start = {k: v.clone() for k, v in discriminator.state_dict().items()}
    for _ in range(2):  # stage 1: the generator alone
        out = model(**_batch(tokenizer))
        out.loss.backward()
        assert "discriminator_loss" not in out.metrics and "generator_loss" in out.metrics
        assert all(p.grad is None for p in model.discriminator.parameters())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    assert all(torch.equal(v, start[k]) for k, v in discriminator.state_dict().items())
    generator_weights = {k: v.clone() for k, v in model.generator.model.electra.state_dict().items()}
    out = model(**_batch(tokenizer))  # stage 2: copied, then trained with the generator frozen
    assert bool(model.two_stage_copied) and "discriminator_loss" in out.metrics
    for name, value in discriminator.state_dict().items():
        assert torch.equal(value, generator_weights[name]), name
    out.loss.backward()
    assert all(p.grad is None for p in model.generator.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.discriminator.parameters())


def test_two_stage_flops_and_refusals(micro_overrides):
    config = build_config(
        "tiny",
        overrides={
            **micro_overrides,
            "objective": "electra-two-stage",
            "max_steps": 10,
            "generator_hidden_multiplier": 1.0,
        },
    )
    report = flop_report(config)
    gen = sum(t.flops for t in report.train_terms if t.network.startswith("generator"))
    disc = sum(t.flops for t in report.train_terms if t.network == "discriminator")
    # 5 steps train the generator (2 passes), 5 train the discriminator (2) beside its forward (1)
    assert report.train_flops_per_sequence * 10 == pytest.approx(5 * 2 * gen + 5 * (2 * disc + gen))
    with pytest.raises(UserError, match="generator_hidden_multiplier=1.0"):
        build_config("tiny", overrides={"objective": "electra-two-stage", "generator_hidden_multiplier": 0.5})
    with pytest.raises(UserError, match="embedding_sharing=none"):
        build_config("tiny", overrides={"objective": "electra-two-stage", "embedding_sharing": "embeddings"})
    with pytest.raises(UserError, match="generator=mlm"):
        build_config("tiny", overrides={"objective": "electra-adversarial", "generator": "unigram"})
