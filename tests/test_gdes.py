"""GDES (DeBERTa-v3's gradient-disentangled embedding sharing): which loss moves which table, and the export."""

import pytest
import torch
from safetensors.torch import load_model, save_model
from transformers import ElectraForPreTraining

from electra.core.errors import UserError
from electra.generators.gdes import GdesWordEmbeddings, generator_word_embeddings
from electra.objectives import build_config, flop_report
from electra.training.model import build_pretraining_model

from .conftest import pair_batch


@pytest.fixture(scope="module")
def tokenizer(sample_tokenizer):
    return sample_tokenizer


_batch = pair_batch


def _model(micro_overrides, tokenizer, **extra):
    torch.manual_seed(0)
    config = build_config("tiny", overrides={**micro_overrides, "embedding_sharing": "gdes", **extra})
    return build_pretraining_model(config, tokenizer)


def _grads(model, batch, **weights):
    """Gradients of the shared table and the residual for one forward with the given loss weights (same noise)."""
    for name, value in weights.items():
        setattr(model.config, name, value)
    model.zero_grad(set_to_none=False)
    torch.manual_seed(7)
    model(**batch).loss.backward()
    gdes = model.discriminator.encoder.embeddings.word_embeddings
    return gdes.shared.weight.grad.clone(), gdes.residual.grad.clone()


@pytest.mark.parametrize("generator", ["mlm", "two-tower"])
def test_each_loss_moves_only_its_own_table(micro_overrides, tokenizer, generator):
    model = _model(micro_overrides, tokenizer, generator=generator)
    gdes = model.discriminator.encoder.embeddings.word_embeddings
    assert isinstance(gdes, GdesWordEmbeddings) and not gdes.residual.any()
    assert gdes.shared is generator_word_embeddings(model.generator)
    batch = _batch(tokenizer)
    full_shared, full_residual = _grads(
        model, batch, generator_loss_weight=1.0, discriminator_loss_weight=50.0
    )
    mlm_shared, mlm_residual = _grads(model, batch, generator_loss_weight=1.0, discriminator_loss_weight=0.0)
    disc_shared, disc_residual = _grads(
        model, batch, generator_loss_weight=0.0, discriminator_loss_weight=50.0
    )
    assert full_shared.abs().sum() > 0 and full_residual.abs().sum() > 0
    assert not mlm_residual.any() and not disc_shared.any()  # neither loss reaches the other's table
    torch.testing.assert_close(full_shared, mlm_shared, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(full_residual, disc_residual, rtol=1e-5, atol=1e-7)


def test_one_optimizer_step_moves_the_tables_by_their_own_losses(micro_overrides, tokenizer):
    model = _model(micro_overrides, tokenizer)
    gdes = model.discriminator.encoder.embeddings.word_embeddings
    shared_before = gdes.shared.weight.detach().clone()
    _, disc_residual = _grads(
        model, _batch(tokenizer), discriminator_loss_weight=50.0, generator_loss_weight=0.0
    )
    mlm_shared, _ = _grads(model, _batch(tokenizer), discriminator_loss_weight=0.0, generator_loss_weight=1.0)
    model.config.discriminator_loss_weight, model.config.generator_loss_weight = 50.0, 1.0
    _grads(model, _batch(tokenizer))
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    torch.testing.assert_close(gdes.shared.weight.detach(), shared_before - 0.1 * mlm_shared)
    torch.testing.assert_close(gdes.residual.detach(), -0.1 * disc_residual)


def test_export_folds_the_tables_into_plain_transformers_embeddings(micro_overrides, tokenizer, tmp_path):
    model = _model(micro_overrides, tokenizer)
    gdes = model.discriminator.encoder.embeddings.word_embeddings
    with torch.no_grad():
        gdes.residual.normal_(std=0.05)  # as after training: the effective table differs from the generator's
    model.eval()
    batch = _batch(tokenizer)
    ours = model.discriminator(**batch)
    written = model.export(tmp_path, tokenizer)
    loaded = ElectraForPreTraining.from_pretrained(written["discriminator"]).eval()
    torch.testing.assert_close(loaded(**batch).logits, ours, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        loaded.get_input_embeddings().weight, gdes.shared.weight.detach() + gdes.residual.detach()
    )
    assert model.discriminator.encoder.embeddings.word_embeddings is gdes  # the training model is restored


def test_checkpoint_round_trip_keeps_shared_and_residual_apart(micro_overrides, tokenizer, tmp_path):
    model = _model(micro_overrides, tokenizer)
    with torch.no_grad():
        model.discriminator.encoder.embeddings.word_embeddings.residual.fill_(0.25)
    save_model(model, str(tmp_path / "model.safetensors"))
    fresh = _model(micro_overrides, tokenizer)
    load_model(fresh, str(tmp_path / "model.safetensors"))
    for (name, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_gdes_needs_a_generator_with_embeddings(micro_overrides):
    with pytest.raises(UserError, match="gdes"):
        build_config(
            "tiny", overrides={**micro_overrides, "embedding_sharing": "gdes", "generator": "unigram"}
        )


@pytest.mark.parametrize("generator", ["mlm", "two-tower"])
def test_parameter_count_matches_the_flop_counter(micro_overrides, tokenizer, generator):
    model = _model(micro_overrides, tokenizer, generator=generator)
    objective = "electric" if generator == "two-tower" else "electra"
    model.config.objective = objective
    assert sum(p.numel() for p in model.parameters()) == flop_report(model.config).params["total"]
