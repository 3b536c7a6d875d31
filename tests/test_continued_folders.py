"""`--init-from` folders as transformers and BERT's releases lay them out: weights in shards
(`save_pretrained(max_shard_size=...)`), pickled weights only, and a tokenizer that is a bare vocab.txt. All built
here at micro size; nothing is fetched."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForPreTraining, BertModel, BertTokenizerFast

from electra.app.cli import main
from electra.core.errors import ElectraWarning, UserError
from electra.core.files import SHARD_INDEX
from electra.data.tokenization import load_saved_tokenizer, load_vocab_tokenizer, lowercases
from electra.objectives import build_config
from electra.training.continued import checkpoint_shape, init_vocabulary, load_initial_weights
from electra.training.model import build_pretraining_model

from .conftest import pair_batch
from .test_continued_bert import SHAPE, bert_tokenizer

SHARD_SIZE = "20KB"  # a micro BERT is about 150 kB: several shards


def _save(directory: Path, tokenizer, **save) -> Path:
    """A BertForPreTraining with every weight off its initial value (a head that did not load would not pass for
    one that did), saved with `save`."""
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=len(tokenizer), **SHAPE))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(str(directory), **save)
    tokenizer.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def pair(tmp_path_factory, sample_tokenizer) -> tuple[Path, Path]:
    """The same BERT saved whole and in shards."""
    root = tmp_path_factory.mktemp("sharded")
    tokenizer = bert_tokenizer(sample_tokenizer)
    whole = _save(root / "whole", tokenizer)
    sharded = _save(root / "sharded", tokenizer, max_shard_size=SHARD_SIZE)
    assert not (sharded / "model.safetensors").exists() and (sharded / SHARD_INDEX).is_file()
    assert len(list(sharded.glob("model-*-of-*.safetensors"))) > 2
    return whole, sharded


def _copy(directory: Path, to: Path) -> Path:
    shutil.copytree(directory, to)
    return to


def _continued(directory: Path, objective: str = "electra", **settings):
    overrides = checkpoint_shape(directory, {"objective": objective, "init_from": str(directory), **settings})
    config = build_config("tiny", overrides=overrides)
    tokenizer = load_saved_tokenizer(init_vocabulary(directory), config.lowercase)
    torch.manual_seed(5)  # other fresh weights than the checkpoint's
    model = build_pretraining_model(config, tokenizer)
    return config, model, load_initial_weights(model, directory), tokenizer


@pytest.mark.parametrize("objective", ["electra", "mlm"])
def test_sharded_weights_load_as_the_single_file_does(pair, objective):
    """Before: a sharded checkpoint was refused ("no model.safetensors"). Now its shards load through the same
    path: every tensor equals the one-file copy's, the same ones stay fresh, and the encoder computes what
    transformers' BertModel computes from the shards."""
    whole, sharded = pair
    assert checkpoint_shape(sharded, {}) == checkpoint_shape(whole, {})
    _, from_whole, fresh_whole, _ = _continued(whole, objective)
    _, from_shards, fresh_shards, tokenizer = _continued(sharded, objective)
    assert fresh_shards == fresh_whole
    a, b = from_whole.state_dict(), from_shards.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    encoder = from_shards.objective.kept_module(from_shards).electra.eval()
    batch = pair_batch(tokenizer)
    with torch.no_grad():
        theirs = BertModel.from_pretrained(str(sharded)).eval()(**batch).last_hidden_state
        ours = encoder(**batch).last_hidden_state
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    if objective == "mlm":  # BERT's masked-LM head came from its shard too
        assert fresh_shards == {"kept": []}
        with torch.no_grad():
            logits = BertForPreTraining.from_pretrained(str(sharded)).eval()(**batch).prediction_logits
            torch.testing.assert_close(from_shards.generator.model(**batch).logits, logits, rtol=0, atol=1e-5)


def _shard_of(directory: Path, tensor: str) -> Path:
    return directory / json.loads((directory / SHARD_INDEX).read_text())["weight_map"][tensor]


def test_a_missing_shard_is_refused_in_one_line(pair, tmp_path):
    sharded = _copy(pair[1], tmp_path / "bert")
    shard = _shard_of(sharded, "bert.embeddings.word_embeddings.weight")
    shard.unlink()
    with pytest.raises(UserError) as refused:
        checkpoint_shape(sharded, {})
    message = str(refused.value)
    assert message.startswith(f"{shard}: missing, and {SHARD_INDEX} puts ") and "\n" not in message
    assert message.endswith("; copy every shard of the checkpoint.")


def test_a_shard_gone_after_the_settings_were_read_is_refused_when_loading(pair, tmp_path):
    sharded = _copy(pair[1], tmp_path / "bert")
    overrides = checkpoint_shape(sharded, {"init_from": str(sharded)})
    model = build_pretraining_model(
        build_config("tiny", overrides=overrides), load_saved_tokenizer(init_vocabulary(sharded))
    )
    shard = _shard_of(sharded, "bert.encoder.layer.1.output.dense.weight")
    shard.unlink()
    with pytest.raises(UserError, match=f"^{shard}: missing, and {SHARD_INDEX} puts "):
        load_initial_weights(model, sharded)


def test_a_shard_cut_short_is_refused_in_one_line(pair, tmp_path):
    sharded = _copy(pair[1], tmp_path / "bert")
    shard = _shard_of(sharded, "bert.embeddings.word_embeddings.weight")
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(UserError) as refused:
        checkpoint_shape(sharded, {})
    message = str(refused.value)
    assert message.startswith(f"{shard}: not a readable safetensors file (") and "\n" not in message
    assert message.endswith("it was cut short or damaged: copy it again, or export the run again.")


def test_an_index_naming_a_tensor_its_shard_lacks_is_refused(pair, tmp_path):
    sharded = _copy(pair[1], tmp_path / "bert")
    name = "bert.embeddings.word_embeddings.weight"
    shard = _shard_of(sharded, name)
    held = load_file(str(shard))
    save_file({k: v for k, v in held.items() if k != name}, str(shard), metadata={"format": "pt"})
    with pytest.raises(UserError) as refused:
        checkpoint_shape(sharded, {})
    assert str(refused.value) == (
        f"{shard}: holds no {name}, which {SHARD_INDEX} puts there; the index and its shards were not saved "
        "together: copy the checkpoint again, or save it again with model.save_pretrained(dir)."
    )


@pytest.mark.parametrize("index", ['{"weight_map": {"a": "model-1.safetensors"', '{"metadata": {}}', "[]"])
def test_a_damaged_index_is_refused_in_one_line(pair, tmp_path, index):
    sharded = _copy(pair[1], tmp_path / "bert")
    (sharded / SHARD_INDEX).write_text(index)
    with pytest.raises(UserError) as refused:
        checkpoint_shape(sharded, {})
    assert str(refused.value) == (
        f"{sharded / SHARD_INDEX}: not a shard index (a JSON object whose weight_map names each tensor's shard "
        "file); it is damaged: copy the checkpoint again, or save it again with model.save_pretrained(dir)."
    )


@pytest.mark.parametrize("files", [["pytorch_model.bin"], ["pytorch_model-00001-of-00002.bin", "x.json"]])
def test_pickled_weights_stay_refused(pair, tmp_path, files):
    """A folder with pickled weights only (whole or sharded) is refused by name: they are never unpickled. The
    .bin files here are not even pickles: nothing may open them."""
    folder = tmp_path / "pickled"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(pair[0] / name, folder / name)
    for name in files:
        (folder / name).write_bytes(b"not a pickle")
    with pytest.raises(UserError) as refused:
        checkpoint_shape(folder, {})
    assert str(refused.value) == (
        f"{folder}: no .safetensors weights (it holds {files[0]}, a pickle; only safetensors are loaded, since "
        "unpickling can run code); convert it where you trust it: model.save_pretrained(dir, "
        "safe_serialization=True)."
    )


@pytest.fixture
def vocab_only(pair, sample_tokenizer, tmp_path) -> Path:
    """A BERT as the original releases are laid out: weights, config.json and vocab.txt, no tokenizer config."""
    folder = tmp_path / "vocab_only"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(pair[0] / name, folder / name)
    pieces = sorted(sample_tokenizer.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(f"{piece}\n" for piece, _ in pieces), encoding="utf-8")
    return folder


def test_a_bare_vocabulary_is_taken_as_lowercasing_and_says_so(vocab_only):
    """Before: a folder with vocab.txt alone was taken as lowercasing without a word, and `lowercase=false` was
    refused ("its lowercase is True"). Its casing is unknown: the run says what it assumed and how to state it."""
    with pytest.warns(ElectraWarning) as caught:
        overrides = checkpoint_shape(vocab_only, {"init_from": str(vocab_only)})
    assert [str(w.message) for w in caught if issubclass(w.category, ElectraWarning)] == [
        f"{vocab_only}: its tokenizer does not say whether it lowercases (no tokenizer_config.json "
        "with do_lower_case), so it is taken as lowercasing; for a cased vocabulary pass "
        "--set lowercase=false (lowercase=true silences this)."
    ]
    assert overrides["lowercase"] is True
    assert build_config("tiny", overrides=overrides).lowercase is True


@pytest.mark.parametrize("lowercase", [True, False])
def test_a_bare_vocabulary_takes_the_stated_casing(vocab_only, lowercase):
    """`lowercase` set by the user decides, silently, and the tokenizer the run builds (through `--vocab`'s
    loader, as `run_vocabulary` hands it the folder) tokenizes as BERT's tokenizer with that casing does."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElectraWarning)
        config, model, fresh, tokenizer = _continued(vocab_only, lowercase=str(lowercase).lower())
    assert config.lowercase is lowercase and lowercases(tokenizer) is lowercase
    run_tokenizer = load_vocab_tokenizer(vocab_only, lowercase=config.lowercase)
    bert = BertTokenizerFast(vocab=str(vocab_only / "vocab.txt"), do_lower_case=lowercase)
    text = "The Committee met on Tuesday."
    assert run_tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"] == bert(text)["input_ids"]
    assert (run_tokenizer.tokenize("The") == run_tokenizer.tokenize("the")) is lowercase
    assert all(k.startswith("discriminator_predictions.") for k in fresh["kept"])


def test_a_stated_casing_is_kept_and_not_warned_about(vocab_only):
    """A tokenizer_config.json with do_lower_case states the casing: no warning, and a setting against it is still
    refused."""
    (vocab_only / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElectraWarning)
        assert checkpoint_shape(vocab_only, {"init_from": str(vocab_only)})["lowercase"] is False
    with pytest.raises(UserError, match="its lowercase is False, not true; drop that setting"):
        checkpoint_shape(vocab_only, {"init_from": str(vocab_only), "lowercase": "true"})


def test_a_cased_bare_vocabulary_runs_cased_end_to_end(vocab_only, small_corpus, tmp_path):
    """Through the command line: `--set lowercase=false` gives a run whose saved tokenizer and config are cased."""
    out = tmp_path / "run"
    argv = ["pretrain", "--init-from", str(vocab_only), "--corpus", str(small_corpus), "--no-plot"]
    argv += ["--output", str(out), "--cache-dir", str(tmp_path / "cache"), "--max-steps", "1"]
    argv += ["--set", "train_batch_size=4", "--set", "warmup_steps=1", "--set", "max_seq_length=32"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElectraWarning)
        assert main([*argv, "--set", "lowercase=false"]) == 0
    assert json.loads((out / "config.json").read_text())["lowercase"] is False
    saved = load_saved_tokenizer(out / "tokenizer")
    assert not lowercases(saved) and saved.tokenize("The") != saved.tokenize("the")
