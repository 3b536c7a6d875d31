import numpy as np
import pytest
import torch
from transformers import ElectraForMaskedLM, ElectraForPreTraining

from electra.export.layout import finetune_dir, read_export
from electra.nn.masking import Picked
from electra.objectives import build_config
from electra.training.model import build_pretraining_model

from .conftest import pair_batch


@pytest.fixture(scope="module")
def tokenizer(sample_tokenizer):
    return sample_tokenizer


def _config(micro_overrides, **extra):
    return build_config("tiny", overrides={**micro_overrides, **extra})


_batch = pair_batch


def test_discriminator_export_loads_in_transformers_with_identical_logits(
    micro_overrides, tokenizer, tmp_path
):
    torch.manual_seed(0)
    model = build_pretraining_model(_config(micro_overrides), tokenizer).eval()
    batch = _batch(tokenizer)
    ours = model.discriminator(**batch)
    written = model.export(tmp_path, tokenizer)
    loaded = ElectraForPreTraining.from_pretrained(written["discriminator"]).eval()
    theirs = loaded(**batch).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert finetune_dir(tmp_path) == tmp_path / "discriminator"
    # A run directory also holds the pretraining config.json: the manifest is read first, never that file.
    from electra.finetune.models import resolve_model_dir

    model.config.save(tmp_path / "config.json")
    assert resolve_model_dir(tmp_path) == tmp_path / "discriminator"
    export = read_export(tmp_path / "discriminator")  # a part finds its export's manifest
    assert export.objective == "electra" and export.scoring == {"mlm": ["generator"]}
    assert export.kinds == {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}
    # The tokenizer travels with the export.
    from transformers import AutoTokenizer

    assert (
        AutoTokenizer.from_pretrained(written["discriminator"])("budget")["input_ids"]
        == tokenizer("budget")["input_ids"]
    )


def test_generator_export_matches_masked_position_logits(micro_overrides, tokenizer, tmp_path):
    torch.manual_seed(1)
    model = build_pretraining_model(_config(micro_overrides), tokenizer).eval()
    batch = _batch(tokenizer)
    positions = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    positions[:, 2] = True
    ours = model.generator.logits_at(
        batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], Picked.from_mask(positions)
    )
    loaded = ElectraForMaskedLM.from_pretrained(model.export(tmp_path, tokenizer)["generator"]).eval()
    theirs = loaded(**batch).logits[positions]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_embedding_sharing_modes(micro_overrides, tokenizer):
    shared = build_pretraining_model(_config(micro_overrides), tokenizer)
    d_emb = shared.discriminator.encoder.embeddings
    g = shared.generator.model
    assert g.electra.embeddings is d_emb
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"):
        assert getattr(g.electra.embeddings, name).weight.data_ptr() == getattr(d_emb, name).weight.data_ptr()
    assert g.generator_lm_head.weight is d_emb.word_embeddings.weight
    assert hasattr(g.electra, "embeddings_project")  # generator (16) narrower than embeddings (24)
    # Both losses reach the shared table.
    out = shared(**_batch(tokenizer))
    out.loss.backward()
    assert d_emb.word_embeddings.weight.grad is not None and d_emb.word_embeddings.weight.grad.abs().sum() > 0

    separate = build_pretraining_model(_config(micro_overrides, embedding_sharing="none"), tokenizer)
    assert separate.generator.model.electra.embeddings is not separate.discriminator.encoder.embeddings

    tied = build_pretraining_model(
        _config(micro_overrides, embedding_sharing="all", generator_hidden_multiplier=1.0), tokenizer
    )
    assert tied.generator.model.electra is tied.discriminator.encoder


def test_training_step_metrics_and_labels(micro_overrides, tokenizer):
    torch.manual_seed(2)
    model = build_pretraining_model(_config(micro_overrides), tokenizer)
    out = model(**_batch(tokenizer))
    m = out.metrics
    assert torch.isfinite(out.loss)
    expected = 50 * m["discriminator_loss"] + m["generator_loss"]
    torch.testing.assert_close(out.loss.detach(), expected)
    assert 0 <= m["replaced_fraction"] <= 0.2


def test_sample_equal_to_original_is_labelled_original(micro_overrides, tokenizer, monkeypatch):
    """Force the generator to reproduce the input exactly: nothing may be labelled replaced."""
    model = build_pretraining_model(_config(micro_overrides), tokenizer)
    batch = _batch(tokenizer)

    def perfect(input_ids, attention_mask, token_type_ids, positions):
        logits = torch.full((positions.index.numel(), len(tokenizer)), -1e4)
        logits[torch.arange(logits.shape[0]), positions.rows(batch["input_ids"])] = 1e4
        return logits

    monkeypatch.setattr(model.generator, "logits_at", perfect)
    monkeypatch.setattr(model.generator, "head_at", lambda *args: None)  # logits only: no fused head
    assert model(**batch).metrics["replaced_fraction"] == 0


def test_unigram_generator_and_mlm_objective(micro_overrides, tokenizer, tmp_path):
    counts = np.ones(len(tokenizer), dtype=np.int64)
    counts[len(tokenizer) // 2 :] = 0  # pieces the corpus never used: the generator gives them log q = -inf
    uni = build_pretraining_model(
        _config(micro_overrides, generator="unigram"), tokenizer, token_counts=counts
    )
    out = uni(**_batch(tokenizer))
    assert "generator_loss" not in out.metrics and out.metrics["replaced_fraction"] > 0
    assert sum(p.numel() for p in uni.generator.parameters()) == 0
    # Uniform over the pieces it proposes (counted ones, less the four special ones): entropy log(n), not NaN.
    proposed = int((uni.generator.log_probs > float("-inf")).sum())
    assert proposed == len(tokenizer) // 2 - 4
    assert out.metrics["generator_entropy"].item() == pytest.approx(np.log(proposed), rel=1e-5)

    mlm = build_pretraining_model(_config(micro_overrides, objective="mlm"), tokenizer)
    assert mlm.discriminator is None
    assert mlm.encoder.config.hidden_size == micro_overrides["hidden_size"]  # the BERT baseline is full width
    out = mlm(**_batch(tokenizer))
    assert torch.isfinite(out.loss) and "mlm_accuracy" in out.metrics
    written = mlm.export(tmp_path, tokenizer)
    assert finetune_dir(tmp_path) == written["mlm"]
    ElectraForMaskedLM.from_pretrained(written["mlm"])


def test_auc_against_hand_worked_ranking():
    from electra.nn.metrics import auc as _auc

    scores = torch.tensor([0.9, 0.1, 0.8, 0.3, 0.5])
    positive = torch.tensor([True, False, False, True, False])
    # positives 0.9 and 0.3 against negatives 0.1, 0.8, 0.5: 0.9 beats all 3, 0.3 beats 1 -> 4 of 6 pairs
    assert _auc(scores, positive).item() == pytest.approx(4 / 6)
    assert torch.isnan(_auc(scores, torch.zeros(5, dtype=torch.bool)))
