import torch

from electra.nn.masking import apply_mask_tokens, choose_positions, sample_from_log_probs, sample_tokens

PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIAL = torch.tensor([PAD, CLS, SEP, MASK])


def _batch(rows=256, length=128, real=100):
    ids = torch.randint(10, 1000, (rows, length))
    ids[:, 0], ids[:, real - 1] = CLS, SEP
    ids[:, real:] = PAD
    mask = (ids != PAD).long()
    return ids, mask


def test_mask_rate_is_exact_and_avoids_special_tokens():
    torch.manual_seed(0)
    ids, attention = _batch()
    positions = choose_positions(ids, attention, SPECIAL, 0.15)
    assert (positions.sum(1) == round(98 * 0.15)).all()
    assert (
        not positions[ids == PAD].any()
        and not positions[ids == CLS].any()
        and not positions[ids == SEP].any()
    )
    # Every candidate position is picked about equally often.
    counts = (
        torch.stack([choose_positions(ids[:1], attention[:1], SPECIAL, 0.15)[0] for _ in range(2000)])
        .float()
        .mean(0)
    )
    assert counts[1:99].min() > 0.10 and counts[1:99].max() < 0.20
    assert choose_positions(ids, attention, SPECIAL, 0.25).sum(1).eq(round(98 * 0.25)).all()


def test_official_replacement_scheme():
    torch.manual_seed(1)
    ids, attention = _batch(rows=512)
    positions = choose_positions(ids, attention, SPECIAL, 0.15)
    masked = apply_mask_tokens(ids, positions, MASK, 1000, mask_token_prob=0.85, random_token_prob=0.0)
    picked = positions.sum().item()
    as_mask = (masked[positions] == MASK).float().mean().item()
    assert abs(as_mask - 0.85) < 0.02
    assert torch.equal(
        masked[positions & (masked != MASK)], ids[positions & (masked != MASK)]
    )  # the rest unchanged
    assert torch.equal(masked[~positions], ids[~positions])
    bert = apply_mask_tokens(ids, positions, MASK, 1000, mask_token_prob=0.8, random_token_prob=0.1)
    changed = ((bert != ids) & (bert != MASK) & positions).sum().item() / picked
    assert 0.07 < changed < 0.12  # ~10% random (a few random draws equal the original)


def test_sampling_follows_the_distribution_without_gradient():
    torch.manual_seed(2)
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).repeat(20000, 1).requires_grad_()
    samples = sample_tokens(logits)
    assert samples.requires_grad is False
    freq = torch.bincount(samples, minlength=3).float() / 20000
    assert torch.allclose(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.015)


def test_inverse_cdf_sampling_matches_probabilities_and_skips_impossible_tokens():
    torch.manual_seed(3)
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2])
    log_probs = torch.log(probs).repeat(40000, 1)
    samples = sample_from_log_probs(log_probs)
    freq = torch.bincount(samples, minlength=5).float() / 40000
    assert freq[0] == 0 and freq[2] == 0
    assert torch.allclose(freq, probs, atol=0.01)
    hot = sample_tokens(torch.tensor([[0.0, 2.0, 0.0]]).repeat(30000, 1), temperature=0.5)
    expected = torch.softmax(torch.tensor([0.0, 4.0, 0.0]), -1)
    assert torch.allclose(torch.bincount(hot, minlength=3).float() / 30000, expected, atol=0.01)
