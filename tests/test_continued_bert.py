"""Continued pretraining from a BERT checkpoint (`electra pretrain --init-from BERT_DIR`): the folders transformers'
`save_pretrained` writes for BertModel, BertForPreTraining and BertForMaskedLM, built here at random (nothing is
fetched). BERT's encoder is an ELECTRA discriminator's with embeddings as wide as its hidden states, so the run's
encoder must compute exactly what BertModel computes on the same weights; the discriminator head and the generator
start fresh. What BERT checkpoints hold that the run cannot represent is refused in `tests/test_pretrain_faults.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertModel,
    BertTokenizerFast,
    ElectraModel,
)

import electra
from electra.app.cli import main
from electra.core.errors import UserError
from electra.data.tokenization import load_saved_tokenizer
from electra.nn.masking import Picked
from electra.objectives import build_config
from electra.training.continued import checkpoint_shape, init_vocabulary, load_initial_weights
from electra.training.model import build_pretraining_model

from .conftest import MICRO, pair_batch

BERT_CLASSES = (BertModel, BertForPreTraining, BertForMaskedLM)
# MICRO's encoder, as a BERT: no embedding_size (it is hidden_size), and an eps other than ELECTRA's default
SHAPE = {
    k: MICRO[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads")
}
SHAPE.update(max_position_embeddings=MICRO["max_position_embeddings"], layer_norm_eps=1e-7)


def save_bert(model_class, tokenizer, directory: Path, seed: int = 0, **config) -> Path:
    """A random BERT of `model_class` with `tokenizer`, saved as transformers saves them."""
    torch.manual_seed(seed)
    model_class(BertConfig(vocab_size=len(tokenizer), **{**SHAPE, **config})).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def bert_tokenizer(wordpiece, lowercase: bool = True) -> BertTokenizerFast:
    """BERT's own tokenizer class over the pieces of `wordpiece`: what a BERT folder holds."""
    return BertTokenizerFast(vocab=wordpiece.get_vocab(), do_lower_case=lowercase)


@pytest.fixture(scope="module")
def berts(tmp_path_factory, sample_tokenizer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bert")
    tokenizer = bert_tokenizer(sample_tokenizer)
    return {
        cls.__name__: save_bert(cls, tokenizer, root / cls.__name__, seed=i)
        for i, cls in enumerate(BERT_CLASSES)
    }


def _continued(directory: Path, objective: str = "electra"):
    overrides = checkpoint_shape(directory, {"objective": objective, "init_from": str(directory)})
    config = build_config("tiny", overrides=overrides)
    tokenizer = load_saved_tokenizer(init_vocabulary(directory))
    torch.manual_seed(5)  # other fresh weights than the checkpoint's
    model = build_pretraining_model(config, tokenizer)
    return config, model, load_initial_weights(model, directory), tokenizer


@pytest.mark.parametrize("kind", [cls.__name__ for cls in BERT_CLASSES])
def test_the_continued_encoder_computes_what_bert_computes(berts, kind):
    """The loaded discriminator's encoder gives BertModel's last hidden state on the same weights and batch: the
    shape (embedding_size = hidden_size, no projection), LayerNorm's eps, position and token-type embeddings all
    carried over. Only the discriminator head is fresh; the generator is a fresh one at the configured width on
    the loaded embeddings."""
    directory = berts[kind]
    config, model, fresh, tokenizer = _continued(directory)
    assert config.embedding_size == config.hidden_size == SHAPE["hidden_size"]
    assert config.layer_norm_eps == 1e-7 and config.tokenizer_vocab_size == len(tokenizer)
    assert fresh["kept"] and all(k.startswith("discriminator_predictions.") for k in fresh["kept"])
    assert "generator" not in fresh  # a BERT folder is no export: nothing to load the generator from
    assert model.generator.model.electra.embeddings is model.discriminator.encoder.embeddings
    assert model.generator.model.config.hidden_size == config.generator_hidden_size < config.hidden_size
    assert not hasattr(model.discriminator.encoder, "embeddings_project")
    model.eval()
    batch = pair_batch(tokenizer)
    bert = BertModel.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        theirs = bert(**batch).last_hidden_state
        ours = model.discriminator.encoder(**batch).last_hidden_state
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def save_trained_looking_bert(model_class, tokenizer, directory: Path, **config) -> Path:
    """`save_bert`, with every weight moved off its initial value: a fresh head's LayerNorm (ones, zeros) and bias
    (zeros) would equal a freshly built one's, and a head that did not load would pass for one that did."""
    torch.manual_seed(3)
    model = model_class(BertConfig(vocab_size=len(tokenizer), **{**SHAPE, **config}))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


@pytest.mark.parametrize("model_class", [BertForMaskedLM, BertForPreTraining])
def test_an_mlm_run_continues_berts_masked_lm_head(sample_tokenizer, tmp_path, model_class):
    """Before: `--objective mlm` from a BERT with its masked-LM head (`cls.predictions.*`) restarted that head.
    Now it is carried over (`BERT_MLM_HEAD`): nothing is fresh, and the continued masked LM gives transformers'
    logits on the same weights, from the whole model and from the rows the objective scores."""
    directory = save_trained_looking_bert(model_class, bert_tokenizer(sample_tokenizer), tmp_path / "bert")
    _, model, fresh, tokenizer = _continued(directory, objective="mlm")
    assert fresh == {"kept": []}
    model.eval()
    batch = pair_batch(tokenizer)
    bert = model_class.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        output = bert(**batch)
        theirs = output.logits if model_class is BertForMaskedLM else output.prediction_logits
        ours = model.generator.model(**batch).logits
        positions = batch["attention_mask"].bool()
        picked = Picked.from_mask(positions)
        rows = model.generator.logits_at(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], picked
        )[picked.valid.reshape(-1)]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    torch.testing.assert_close(rows, theirs[positions], rtol=0, atol=1e-5)
    head = model.generator.model
    saved = load_file(str(directory / "model.safetensors"))
    assert torch.equal(head.generator_lm_head.bias, saved["cls.predictions.bias"])
    assert torch.equal(
        head.generator_predictions.dense.weight, saved["cls.predictions.transform.dense.weight"]
    )
    assert head.generator_lm_head.weight is head.electra.embeddings.word_embeddings.weight  # still tied


def test_an_mlm_run_continues_a_bare_bert_encoder_with_a_fresh_head(berts):
    """BertModel has no masked-LM head: the encoder is BERT's, the head fresh."""
    directory = berts["BertModel"]
    _, model, fresh, _ = _continued(directory, objective="mlm")
    assert fresh["kept"] and all(k.startswith("generator_") for k in fresh["kept"])
    loaded = model.generator.model.electra.state_dict()
    for name, value in BertModel.from_pretrained(str(directory)).state_dict().items():
        if not name.startswith("pooler."):
            torch.testing.assert_close(loaded[name], value, msg=name)


def test_an_untied_bert_head_is_not_carried_over(sample_tokenizer, tmp_path):
    """A head saved with its own output matrix (tie_word_embeddings false) computes what ELECTRA's tied head
    cannot: it starts fresh, and the encoder still loads."""
    directory = save_trained_looking_bert(
        BertForMaskedLM, bert_tokenizer(sample_tokenizer), tmp_path / "untied", tie_word_embeddings=False
    )
    saved = load_file(str(directory / "model.safetensors"))
    assert not torch.equal(
        saved["cls.predictions.decoder.weight"], saved["bert.embeddings.word_embeddings.weight"]
    )
    _, model, fresh, _ = _continued(directory, objective="mlm")
    assert "generator_lm_head.bias" in fresh["kept"] and "generator_predictions.dense.weight" in fresh["kept"]
    assert not torch.equal(model.generator.model.generator_lm_head.bias, saved["cls.predictions.bias"])
    loaded = model.generator.model.electra.state_dict()
    for name, value in saved.items():
        if name.startswith("bert.encoder."):
            assert torch.equal(loaded[name.removeprefix("bert.")], value), name


def test_legacy_layer_norm_names_load(berts, tmp_path):
    """Checkpoints converted from TensorFlow (bert-base-uncased among them) name LayerNorm's tensors gamma and
    beta; transformers renames them when it loads, and so does --init-from."""
    from safetensors.torch import load_file, save_file

    legacy = tmp_path / "legacy"
    legacy.mkdir()
    source = berts["BertForPreTraining"]
    for item in source.iterdir():
        (legacy / item.name).write_bytes(item.read_bytes())
    weights = load_file(str(legacy / "model.safetensors"))
    renamed = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in weights.items()
    }
    assert renamed.keys() != weights.keys()
    save_file(renamed, str(legacy / "model.safetensors"), metadata={"format": "pt"})
    _, model, fresh, _ = _continued(legacy)
    assert all(k.startswith("discriminator_predictions.") for k in fresh["kept"])
    torch.testing.assert_close(
        model.discriminator.encoder.embeddings.LayerNorm.weight, weights["bert.embeddings.LayerNorm.weight"]
    )


def test_pretrain_continues_a_bert_and_exports_an_electra(berts, small_corpus, tmp_path, capsys):
    """End to end through the command line: two steps from a BertForPreTraining folder; the export is an
    ElectraModel transformers loads, at BERT's shape, with BERT's tokenizer beside it."""
    out = tmp_path / "run"
    argv = ["pretrain", "--init-from", str(berts["BertForPreTraining"]), "--corpus", str(small_corpus)]
    argv += ["--output", str(out), "--cache-dir", str(tmp_path / "cache"), "--max-steps", "2", "--no-plot"]
    argv += ["--set", "train_batch_size=4", "--set", "warmup_steps=1", "--set", "max_seq_length=32"]
    assert main(argv) == 0
    assert "continuing from" in capsys.readouterr().out
    encoder = ElectraModel.from_pretrained(str(out / "discriminator"))
    assert encoder.config.embedding_size == encoder.config.hidden_size == SHAPE["hidden_size"]
    assert encoder.config.layer_norm_eps == 1e-7
    saved = AutoTokenizer.from_pretrained(str(out / "discriminator"))
    assert saved.get_vocab() == load_saved_tokenizer(berts["BertForPreTraining"]).get_vocab()
    config = json.loads((out / "config.json").read_text())
    assert config["embedding_size"] == config["hidden_size"] and config["lowercase"] is True


def test_a_cased_bert_stays_cased(sample_tokenizer, tmp_path):
    """BERT's do_lower_case is honoured: the run tokenizes with the checkpoint's tokenizer as saved, and its
    config says so (`lowercase` false) instead of the default; a setting that contradicts it is refused."""
    cased = save_bert(BertModel, bert_tokenizer(sample_tokenizer, lowercase=False), tmp_path / "cased")
    overrides = checkpoint_shape(cased, {"init_from": str(cased)})
    assert overrides["lowercase"] is False
    assert build_config("tiny", overrides=overrides).lowercase is False
    tokenizer = load_saved_tokenizer(init_vocabulary(cased))
    assert tokenizer.tokenize("The committee") == AutoTokenizer.from_pretrained(str(cased)).tokenize(
        "The committee"
    )
    assert tokenizer.tokenize("The") != tokenizer.tokenize("the")
    with pytest.raises(UserError, match="its lowercase is False, not true; drop that setting"):
        checkpoint_shape(cased, {"init_from": str(cased), "lowercase": "true"})
    assert checkpoint_shape(cased, {"init_from": str(cased), "lowercase": "no"})["lowercase"] is False
    # text_form=words replaces the tokenizer's normalizer by its own, which lowercases
    assert checkpoint_shape(cased, {"init_from": str(cased), "text_form": "words"})["lowercase"] is True
    with pytest.warns(UserWarning, match="no size preset's"):
        assert electra.build_config(overrides={"init_from": str(cased)}).lowercase is False


@pytest.mark.parametrize("lowercase", [True, False])
def test_a_real_bert_vocabulary_tokenizes_as_bert_does(shared_data, tmp_path, lowercase):
    """With BERT's own 30,522-piece vocabulary: the run's tokenizer and vocabulary size are the checkpoint's, and
    its casing is BERT's."""
    vocab = shared_data / "bert_vocab" / "vocab.txt"
    if not vocab.is_file():
        pytest.skip(f"{vocab} not found")
    tokenizer = BertTokenizerFast(vocab=str(vocab), do_lower_case=lowercase)
    directory = tmp_path / "bert"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), **SHAPE)).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    overrides = checkpoint_shape(directory, {"init_from": str(directory)})
    assert overrides["tokenizer_vocab_size"] == len(tokenizer) == 30522
    assert overrides["lowercase"] is lowercase
    ours = load_saved_tokenizer(init_vocabulary(directory))
    text = "The Committee met on Tuesday, in Zürich."
    assert ours(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert ("the" in ours.tokenize(text)) is lowercase


def test_bert_base_and_large_train_with_electras_recipe_of_their_size(berts, tmp_path):
    """BERT-Base's shape is ELECTRA-Base's (embeddings as wide as the hidden states: 768), BERT-Large's is
    ELECTRA-Large's, so without --size the run takes that preset's learning rate, batch, warmup and generator
    width. Only config.json is read for this (a copy of a micro BERT with the config of the larger model)."""
    from electra.training.continued import preset_of

    for size, shape in {
        "base": dict(hidden_size=768, num_hidden_layers=12, intermediate_size=3072, num_attention_heads=12),
        "large": dict(hidden_size=1024, num_hidden_layers=24, intermediate_size=4096, num_attention_heads=16),
    }.items():
        directory = tmp_path / size
        directory.mkdir()
        for item in berts["BertModel"].iterdir():
            (directory / item.name).write_bytes(item.read_bytes())
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**config, **shape}))
        assert preset_of(directory) == size
