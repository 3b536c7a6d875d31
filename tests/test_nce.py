"""Electric's NCE loss (Algorithm 2) against a hand computation, and ELECTRA-TT's likelihood estimate."""

from __future__ import annotations

import math

import torch

from electra.discriminators.energy import EnergyHead, electra_tt_token_log_likelihood, electric_nce_loss


def _algorithm2_term(energy: float, q: float, n: int, k: int, replaced: bool) -> float:
    positive = (n - k) * math.exp(-energy)
    noise = k * q
    return -math.log((noise if replaced else positive) / (positive + noise))


def test_nce_loss_equals_hand_computation():
    # Sequence 0: 5 counted positions, k = ceil(0.75) = 1, position 2 replaced; position 5 is padding.
    # Sequence 1: 3 counted positions, k = 1, position 0 replaced; positions 3-5 padding.
    energies = torch.tensor([[0.5, -1.0, 2.0, 0.0, 1.5, 9.0], [1.0, -0.5, 0.25, 7.0, 7.0, 7.0]])
    q = torch.tensor([[0.2, 0.5, 0.05, 0.3, 0.1, 0.9], [0.01, 0.6, 0.4, 0.5, 0.5, 0.5]])
    replaced = torch.zeros(2, 6, dtype=torch.bool)
    replaced[0, 2] = True
    replaced[1, 0] = True
    counted = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    k = torch.tensor([1, 1])
    loss = electric_nce_loss(energies, q.log(), replaced, counted, k)

    # By hand (n-k = 4 for sequence 0, 2 for sequence 1):
    # seq 0, t=0: -log(4e^-0.5 / (4e^-0.5 + 0.2)) = -log(2.426123/2.626123) = 0.079214
    hand_00 = -math.log(4 * math.exp(-0.5) / (4 * math.exp(-0.5) + 0.2))
    assert abs(hand_00 - 0.079214) < 1e-6
    terms = [
        _algorithm2_term(e, qq, n, 1, r)
        for (es, qs, n, rs) in [
            (energies[0, :5], q[0, :5], 5, [False, False, True, False, False]),
            (energies[1, :3], q[1, :3], 3, [True, False, False]),
        ]
        for e, qq, r in zip(es.tolist(), qs.tolist(), rs)
    ]
    assert abs(terms[0] - hand_00) < 1e-7
    assert abs(loss.item() - sum(terms) / 8) < 1e-6


def test_nce_gradient_lowers_energy_of_kept_tokens_and_ignores_q():
    energies = torch.zeros(1, 4, requires_grad=True)
    log_q = torch.full((1, 4), math.log(0.25), requires_grad=True)
    replaced = torch.tensor([[False, True, False, False]])
    loss = electric_nce_loss(energies, log_q, replaced, torch.ones(1, 4), torch.tensor([1]))
    loss.backward()
    grad = energies.grad[0]
    assert grad[0] > 0 and grad[2] > 0 and grad[3] > 0  # descending lowers kept tokens' energy
    assert grad[1] < 0  # ...and raises the replaced one's
    assert log_q.grad is None or torch.all(log_q.grad == 0)


def test_degenerate_rows_stay_finite():
    # Row 0: one position, replaced (n = k = 1, so log(n - k) = -inf). Row 1: no counted position at all.
    energies = torch.zeros(2, 2, requires_grad=True)
    loss = electric_nce_loss(
        energies,
        torch.zeros(2, 2),
        torch.tensor([[True, False], [False, False]]),
        torch.tensor([[1, 0], [0, 0]]),
        torch.tensor([1, 0]),
    )
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(energies.grad).all()


def test_energy_head_is_negated_discriminator_head():
    from transformers import ElectraConfig
    from transformers.models.electra.modeling_electra import ElectraDiscriminatorPredictions

    cfg = ElectraConfig(hidden_size=8)
    head = EnergyHead(cfg)
    plain = ElectraDiscriminatorPredictions(cfg)
    plain.load_state_dict(head.state_dict())
    h = torch.randn(2, 3, 8)
    assert torch.allclose(head(h), -plain(h))


def test_electra_tt_estimate_matches_formula():
    # n = 10 tokens, k = ceil(1.5) = 2; D = P(original) = 0.8 -> HF logit (replaced) = log(0.2/0.8).
    d, q, n = 0.8, 0.05, 10
    logit = torch.tensor([[math.log((1 - d) / d)]])
    got = electra_tt_token_log_likelihood(logit, torch.tensor([[math.log(q)]]), n).item()
    assert abs(got - math.log(2 * q * d / (n * (1 - d)))) < 1e-6


def test_initial_offset_centres_the_nce_logit_for_a_uniform_q():
    from transformers import ElectraConfig

    from electra.discriminators.energy import electric_nce_logits, init_energy_offset

    head = EnergyHead(ElectraConfig(hidden_size=8))
    init_energy_offset(head, vocab_size=1000, mask_prob=0.15)
    torch.nn.init.zeros_(head.dense_prediction.weight)
    energies = head(torch.randn(1, 20, 8))  # n = 20, k = 3: k/(n-k) = 3/17, close to 0.15/0.85
    z = electric_nce_logits(
        energies, torch.full((1, 20), -math.log(1000)), torch.tensor([3]), torch.tensor([20])
    )
    assert torch.allclose(z, torch.full_like(z, math.log(3 / 17) - math.log(0.15 / 0.85)), atol=1e-5)


def test_electric_step_trains_and_exports_for_scoring(tmp_path):
    """The objective wired into the pretraining model: losses fall on a fixed batch, the export scores."""
    from transformers import ElectraTokenizerFast

    from electra.discriminators.energy import init_energy_offset
    from electra.objectives import build_config
    from electra.pll.scoring import ElectricScorer, load_scorer
    from electra.training.model import build_pretraining_model

    words = "the a cat dog sat ran on under mat rug big small red blue".split()
    tok = ElectraTokenizerFast(
        vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    )
    small = dict(
        hidden_size=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=2, embedding_size=32
    )
    config = build_config("tiny", overrides=dict(objective="electric", max_seq_length=32, **small))
    torch.manual_seed(0)
    model = build_pretraining_model(config, tok)
    init_energy_offset(model.discriminator.model.discriminator_predictions, len(tok), config.mask_prob)
    texts = ["the big cat sat on the red mat", "a small dog ran under the blue rug"] * 4
    batch = tok(texts, return_tensors="pt", padding=True)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    history = []
    for _ in range(40):
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        history.append({k: v.item() for k, v in out.metrics.items()})
    first, last = history[:5], history[-5:]
    for key in ("generator_loss", "discriminator_loss"):
        assert sum(h[key] for h in last) < sum(h[key] for h in first), key
    model.eval()
    model.export(tmp_path / "run", tok)
    scorer = load_scorer(tmp_path / "run")
    assert isinstance(scorer, ElectricScorer)
    assert len(scorer.score(["the cat sat on the mat"])[0].tokens) == 6
