"""The cloze objective: the two-tower model trained alone, exported as a one-pass scorer."""

from __future__ import annotations

import csv
import math

import pytest
import torch

import electra
from electra.core.errors import UserError
from electra.nn.masking import candidate_mask
from electra.training.model import build_pretraining_model


def _micro(micro_overrides) -> dict:
    """The micro shape without its generator width, so the objective's own default (full width) applies."""
    return {k: v for k, v in micro_overrides.items() if k != "generator_hidden_multiplier"}


def _model(sample_tokenizer, micro_overrides, **overrides):
    config = electra.build_config(
        "tiny", overrides={**_micro(micro_overrides), "objective": "cloze", **overrides}
    )
    return build_pretraining_model(config, sample_tokenizer)


def _batch(tokenizer, rows: int = 3, length: int = 20) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    ids = torch.randint(len(tokenizer.all_special_ids) + 5, len(tokenizer), (rows, length))
    ids[:, 0], ids[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0  # a padded row
    ids[1, 12:] = tokenizer.pad_token_id
    ids[1, 11] = tokenizer.sep_token_id
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def test_defaults_build_a_full_width_two_tower_model_and_nothing_else(sample_tokenizer, micro_overrides):
    model = _model(sample_tokenizer, micro_overrides)
    assert model.discriminator is None
    assert model.config.generator_hidden_multiplier == 1.0 and model.config.embedding_sharing == "none"
    assert model.generator.hf_config.hidden_size == model.config.hidden_size
    assert model.generator.hf_config.num_hidden_layers == model.config.num_hidden_layers


def test_loss_is_the_mean_cloze_nll_over_non_special_tokens(sample_tokenizer, micro_overrides):
    """Against the formula: -log softmax(logits of q at t)[x_t], averaged over real non-special tokens."""
    model = _model(sample_tokenizer, micro_overrides, hidden_dropout_prob=0.0).eval()
    batch = _batch(sample_tokenizer)
    out = model(**batch)
    logits = model.generator(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    nll = -torch.log_softmax(logits.float(), -1).gather(-1, batch["input_ids"][..., None])[..., 0]
    counted = candidate_mask(batch["input_ids"], batch["attention_mask"], model.special_ids)
    expected = nll[counted].mean()
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert set(out.metrics) == {"cloze_loss", "cloze_accuracy", "loss"}
    assert 0.0 <= out.metrics["cloze_accuracy"].item() <= 1.0


def test_settings_it_cannot_train_are_refused_in_one_line():
    with pytest.raises(UserError, match="objective=cloze has no discriminator .* embedding_sharing=none"):
        electra.build_config("tiny", overrides={"objective": "cloze", "embedding_sharing": "embeddings"})
    with pytest.raises(UserError, match="objective=cloze needs generator=two-tower"):
        electra.build_config("tiny", overrides={"objective": "cloze", "generator": "mlm"})


def test_flop_report_counts_the_two_towers_only(micro_overrides):
    config = electra.build_config("tiny", overrides={"objective": "cloze"})
    report = electra.flop_report(config)
    assert report.params["discriminator"] == 0 and report.params["generator"] > 0
    assert all(term.network.startswith("generator") for term in report.train_terms)
    # Scoring one sequence is one forward of the same model the training step runs.
    assert report.inference_flops == pytest.approx(report.train_flops_per_sequence / 2, rel=1e-9)


@pytest.mark.parametrize("span", ["piece", "word"])
def test_trains_exports_a_scorer_and_refuses_fine_tuning(small_corpus, tmp_path, micro_overrides, span):
    """In the "words" text form, as a scorer for recognizer output would be trained; with either cloze span."""
    config = electra.build_config(
        "tiny",
        overrides={
            **_micro(micro_overrides),
            "objective": "cloze",
            "max_steps": 30,
            "log_every": 5,
            "learning_rate": 3e-3,
            "text_form": "words",
            "cloze_span": span,
        },
    )
    run = electra.pretrain(
        config,
        output_dir=tmp_path / "run",
        corpus=small_corpus,
        cache_dir=str(tmp_path / "cache"),
        num_proc=1,
    )
    assert run.step == 30 and math.isfinite(run.metrics["loss"])
    with open(tmp_path / "run" / "metrics.csv", newline="") as handle:
        losses = [float(row["train/cloze_loss"]) for row in csv.DictReader(handle) if row["train/cloze_loss"]]
    assert losses[-1] < losses[0] - 1.0, losses  # from ~log(600) towards the sample text's statistics

    export = electra.read_export(tmp_path / "run")
    assert export.objective == "cloze" and list(export.parts) == ["generator"]
    assert export.scoring == {"cloze": ["generator"]} and export.finetune is None
    assert export.damaged_parts() == []  # a two-tower part's config is two_tower_config.json, not config.json
    with pytest.raises(UserError, match="names no part to fine-tune"):
        electra.finetune_dir(tmp_path / "run")

    from transformers import AutoTokenizer

    from electra.pll.scoring import load_scorer

    shipped = AutoTokenizer.from_pretrained(str(tmp_path / "run" / "generator"))
    assert shipped.tokenize("Budget, annual!") == shipped.tokenize("budget annual")
    assert not any(piece in shipped.get_vocab() for piece in (",", ".", "!"))

    scorer = load_scorer(tmp_path / "run", device="cpu")
    assert scorer.generator.cloze_span == span
    text = "The committee met on Tuesday to review the annual budget."
    (fluent,) = scorer.sentence_plls([text])
    (shuffled,) = scorer.sentence_plls([" ".join(reversed(text.rstrip(".").split())) + "."])
    assert fluent > shuffled  # it learned the sample text's order

    (tmp_path / "run" / "generator" / "model.safetensors").unlink()
    assert electra.read_export(tmp_path / "run").damaged_parts() == ["generator"]
