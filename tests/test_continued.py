"""Continued pretraining (`--init-from`): a run starts exactly where the checkpoint was, for any objective."""

import pytest
import torch
from transformers import ElectraForMaskedLM, ElectraForPreTraining

from electra.core.errors import UserError
from electra.data.tokenization import load_saved_tokenizer
from electra.nn.masking import Picked
from electra.objectives import build_config
from electra.training.continued import checkpoint_shape, init_vocabulary, load_initial_weights
from electra.training.model import build_pretraining_model
from electra.training.pretraining import RunInputs, pretrain

from .conftest import pair_batch


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, sample_tokenizer):
    """A micro ELECTRA export with trained-looking (perturbed) weights, tokenizer included."""
    from .conftest import MICRO

    torch.manual_seed(0)
    model = build_pretraining_model(build_config("tiny", overrides=dict(MICRO)), sample_tokenizer)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    out = tmp_path_factory.mktemp("continued") / "run"
    model.export(out, sample_tokenizer)
    return out


def _continued(export, objective="electra", **extra):
    overrides = checkpoint_shape(export, {"objective": objective, "init_from": str(export), **extra})
    config = build_config("tiny", overrides=overrides)
    tokenizer = load_saved_tokenizer(init_vocabulary(export))
    torch.manual_seed(5)  # other fresh weights than the checkpoint's
    model = build_pretraining_model(config, tokenizer)
    return model, load_initial_weights(model, export), tokenizer


def test_step_zero_reproduces_the_exports_predictions(export_dir):
    model, fresh, tokenizer = _continued(export_dir)
    assert fresh["kept"] == [] and "generator" in fresh
    model.eval()
    batch = pair_batch(tokenizer)
    theirs = ElectraForPreTraining.from_pretrained(export_dir / "discriminator").eval()(**batch).logits
    torch.testing.assert_close(model.discriminator(**batch), theirs)
    positions = batch["attention_mask"].bool()
    generator = ElectraForMaskedLM.from_pretrained(export_dir / "generator").eval()
    picked = Picked.from_mask(positions)
    ours = model.generator.logits_at(
        batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], picked
    )[picked.valid.reshape(-1)]
    torch.testing.assert_close(ours, generator(**batch).logits[positions], rtol=1e-5, atol=1e-5)


def test_a_discriminator_only_directory_gets_a_fresh_generator_on_its_embeddings(export_dir, tmp_path):
    plain = tmp_path / "hf"
    ElectraForPreTraining.from_pretrained(export_dir / "discriminator").save_pretrained(plain)
    load_saved_tokenizer(export_dir / "discriminator").save_pretrained(plain)
    model, fresh, tokenizer = _continued(plain)
    assert set(fresh) == {"kept"} and fresh["kept"] == []
    model.eval()
    batch = pair_batch(tokenizer)
    theirs = ElectraForPreTraining.from_pretrained(plain).eval()(**batch).logits
    torch.testing.assert_close(model.discriminator(**batch), theirs)
    assert model.generator.model.electra.embeddings is model.discriminator.encoder.embeddings


def test_another_objective_continues_from_the_encoder(export_dir):
    model, fresh, _ = _continued(export_dir, objective="mlm")
    source = ElectraForPreTraining.from_pretrained(export_dir / "discriminator").electra.state_dict()
    for name, value in model.generator.model.electra.state_dict().items():
        torch.testing.assert_close(value, source[name], msg=name)
    assert any(k.startswith("generator_predictions") for k in fresh["kept"])  # the MLM head starts fresh


def test_a_run_continues_with_the_checkpoint_vocabulary(export_dir, small_corpus, tmp_path):
    overrides = checkpoint_shape(
        export_dir, {"init_from": str(export_dir), "max_steps": 2, "tokenizer_vocab_size": 300}
    )
    overrides.update(train_batch_size=4, max_seq_length=32, warmup_steps=1, log_every=1, save_every=2)
    result = pretrain(
        build_config("tiny", overrides=overrides),
        RunInputs(
            corpus=str(small_corpus), output_dir=tmp_path / "run", cache_dir=str(tmp_path / "c"), num_proc=1
        ),
    )
    assert result.step == 2
    saved = load_saved_tokenizer(tmp_path / "run" / "tokenizer")
    assert saved.get_vocab() == load_saved_tokenizer(export_dir / "discriminator").get_vocab()


def test_bad_starts_are_refused_in_one_line(export_dir, tmp_path, small_corpus):
    with pytest.raises(UserError, match="hidden_size is 32"):
        checkpoint_shape(export_dir, {"hidden_size": 64})
    (tmp_path / "roberta").mkdir()  # BERT continues (tests/test_continued_bert.py); other layouts do not
    (tmp_path / "roberta" / "config.json").write_text('{"model_type": "roberta"}')
    with pytest.raises(UserError, match="model_type 'roberta'; --init-from continues ELECTRA and BERT"):
        checkpoint_shape(tmp_path / "roberta", {})
    with pytest.raises(UserError, match="config.json"):
        checkpoint_shape(tmp_path, {})
    from electra.data.tokenization import train_wordpiece_tokenizer

    other = tmp_path / "vocab"
    train_wordpiece_tokenizer(
        ["some other words entirely for a vocabulary"] * 3, vocab_size=120
    ).save_pretrained(other)
    overrides = checkpoint_shape(export_dir, {"init_from": str(export_dir), "max_steps": 2})
    with pytest.raises(UserError, match="--vocab"):
        pretrain(
            build_config("tiny", overrides=overrides),
            RunInputs(corpus=str(small_corpus), output_dir=tmp_path / "r", vocab=str(other), num_proc=1),
        )


def test_cli_init_from(export_dir, small_corpus, tmp_path, capsys):
    from electra.app.cli import main

    argv = ["pretrain", "--init-from", str(export_dir), "--corpus", str(small_corpus), "--no-plot"]
    argv += ["--output", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "c"), "--max-steps", "1"]
    argv += ["--set", "train_batch_size=4", "--set", "warmup_steps=1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "continuing from" in out and "its shape is no size preset's, so the tiny recipe" in out
    assert main(argv + ["--overwrite", "--set", "hidden_size=64"]) == 2
    assert "its hidden_size is 32" in capsys.readouterr().err


def test_a_checkpoint_of_a_preset_size_is_trained_with_that_sizes_recipe(
    sample_tokenizer, small_corpus, tmp_path, capsys
):
    """Before: `--init-from` a Small (here: mini) checkpoint without --size trained it with tiny's recipe (warmup,
    batch, generator width), and config.json recorded tiny's vocabulary size, not the checkpoint's."""
    import json

    from electra.app.cli import main
    from electra.core.config import SIZES
    from electra.training.continued import preset_of

    torch.manual_seed(0)
    mini = build_pretraining_model(build_config("mini"), sample_tokenizer)
    mini.export(tmp_path / "mini", sample_tokenizer)
    assert preset_of(tmp_path / "mini") == "mini" and preset_of(tmp_path / "mini" / "discriminator") == "mini"
    argv = [
        "pretrain",
        "--init-from",
        str(tmp_path / "mini" / "discriminator"),
        "--corpus",
        str(small_corpus),
    ]
    argv += [
        "--output",
        str(tmp_path / "run"),
        "--cache-dir",
        str(tmp_path / "c"),
        "--max-steps",
        "1",
        "--no-plot",
    ]
    assert main([*argv, "--set", "train_batch_size=2"]) == 0
    assert "no size preset" not in capsys.readouterr().out
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["warmup_steps"] == SIZES["mini"]["warmup_steps"] != SIZES["tiny"]["warmup_steps"]
    assert config["generator_hidden_multiplier"] == SIZES["mini"]["generator_hidden_multiplier"]
    assert config["tokenizer_vocab_size"] == len(sample_tokenizer) != SIZES["mini"]["tokenizer_vocab_size"]
