"""`electra pretrain` fed bad or unusual input: checkpoints to continue from that are damaged, inconsistent or of
another layout, and settings numpy cannot take. Each is one line on standard error naming the file or flag and the
fix, before the corpus is read (the corpus in these tests is a binary file, so any corpus work would answer first),
and nothing is written."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from transformers import (
    BertConfig,
    BertForPreTraining,
    BertTokenizerFast,
    ElectraConfig,
    ElectraForPreTraining,
    ElectraModel,
    ElectraTokenizerFast,
)

from electra.app.cli import main
from electra.data.tokenization import load_saved_tokenizer
from electra.objectives import build_config
from electra.training.continued import checkpoint_shape, init_vocabulary, load_initial_weights
from electra.training.model import build_pretraining_model
from tests.golden_trace import WORDS

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", *WORDS]
SHAPE = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    embedding_size=16,
    max_position_embeddings=64,
)

BERT_SHAPE = {k: v for k, v in SHAPE.items() if k != "embedding_size"}


def _save(model, directory: Path) -> Path:
    model.save_pretrained(str(directory))
    ElectraTokenizerFast(vocab={w: i for i, w in enumerate(VOCAB)}).save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """Folders as transformers saves them: a discriminator, and a bare encoder (ElectraModel)."""
    root = tmp_path_factory.mktemp("saved")
    torch.manual_seed(7)
    _save(ElectraForPreTraining(ElectraConfig(vocab_size=len(VOCAB), **SHAPE)), root / "discriminator")
    _save(ElectraModel(ElectraConfig(vocab_size=len(VOCAB), **SHAPE)), root / "encoder")
    return root


def test_a_bare_electra_encoder_continues_with_its_weights(saved):
    """Before: `--init-from` a folder holding a transformers ElectraModel (an encoder saved alone, its tensors
    without the `electra.` prefix) read the corpus and built the examples, then said "electra.embeddings.
    word_embeddings.weight is missing; use the checkpoint's own size", which it was. Now its encoder loads, as
    from_pretrained loads it, and only the discriminator head starts fresh."""
    encoder = saved / "encoder"
    config = build_config("tiny", overrides=checkpoint_shape(encoder, {"init_from": str(encoder)}))
    torch.manual_seed(0)
    model = build_pretraining_model(config, load_saved_tokenizer(init_vocabulary(encoder)))
    fresh = load_initial_weights(model, encoder)
    assert fresh["kept"] and all(k.startswith("discriminator_predictions.") for k in fresh["kept"])
    loaded = model.objective.kept_module(model).electra.state_dict()
    for name, value in ElectraModel.from_pretrained(str(encoder)).state_dict().items():
        torch.testing.assert_close(loaded[name], value, msg=name)


def _config_list(d: Path) -> None:
    (d / "config.json").write_text("[1, 2]")


def _rows(count: int):
    def edit(d: Path) -> None:
        config = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**config, "vocab_size": len(VOCAB) + count}))

    return edit


def _cut_short(d: Path) -> None:
    weights = d / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _never_exported(d: Path) -> None:
    """A run's folder killed before its end: run.json and the run's config.json, no export.json."""
    for name in list(d.iterdir()):
        name.unlink()
    build_config("tiny").save(d / "config.json")
    (d / "run.json").write_text(json.dumps({"corpus_sample": "", "tokenizer_sha256": "", "world_size": 1}))


def _glue_output(d: Path) -> None:
    """An `electra glue` output: its record and results, its fine-tuned models under checkpoints/TASK."""
    for name in list(d.iterdir()):
        name.unlink()
    (d / "run.json").write_text(json.dumps({"command": "glue", "model": "RUN/discriminator", "seeds": [1]}))
    (d / "results.json").write_text("{}")


CASES = {
    "config.json that is a JSON list": (_config_list, "config.json: not a JSON object; it is damaged"),
    "embeddings with more rows than the tokenizer has pieces": (
        _rows(8),
        f"its tokenizer has {len(VOCAB)} pieces but its config.json says vocab_size {len(VOCAB) + 8} .* "
        r"model.resize_token_embeddings\(len\(tokenizer\)\)",
    ),
    "a tokenizer with more pieces than the embeddings have rows": (
        _rows(-8),
        f"its tokenizer has {len(VOCAB)} pieces but its config.json says vocab_size {len(VOCAB) - 8} .* give the "
        "tokenizer it was trained with",
    ),
    "weights cut short": (_cut_short, r"model.safetensors: not a readable safetensors file .* copy it again"),
    "a run that was never exported": (_never_exported, r"no export yet .* --resume"),
    # before: "a pretraining run of this library with no export yet ... finish it with `electra pretrain --resume`"
    "a GLUE output": (_glue_output, r"an `electra glue` output, not a model"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_checkpoint_that_cannot_be_continued_is_one_line_before_any_work(saved, tmp_path, capsys, case):
    """Before: a config.json holding a JSON list ended in AttributeError's traceback; a vocabulary size other than
    the tokenizer's, and weights cut short, were found only once the corpus had been read and its examples built
    (the first as "shape of electra.embeddings.word_embeddings.weight differs; use the checkpoint's own size", which
    it was); and a run's folder that was never exported was "model_type None". Now each is named, with its fix,
    before the corpus is opened."""
    damage, message = CASES[case]
    checkpoint = shutil.copytree(saved / "discriminator", tmp_path / "checkpoint")
    damage(checkpoint)
    assert re.search(message, _refused_before_the_corpus(checkpoint, tmp_path, capsys))


def _bert_config(drop: str = "", **fields):
    """Edit a BERT folder's config.json as an older transformers (or another library) may have written it."""

    def edit(d: Path) -> None:
        config = json.loads((d / "config.json").read_text())
        config.pop(drop, None)
        (d / "config.json").write_text(json.dumps({**config, **fields}))

    return edit


BERT_CASES = {
    "another activation": (_bert_config(hidden_act="relu"), "its hidden_act is 'relu'; .* gelu layers"),
    "relative positions": (
        _bert_config(position_embedding_type="relative_key"),
        "its position_embedding_type is 'relative_key'; .* absolute position embeddings only",
    ),
    "a decoder": (
        _bert_config(is_decoder=True),
        r"it is a decoder \(is_decoder true.* bidirectional encoder",
    ),
    "embeddings of another size than the tokenizer": (
        _bert_config(vocab_size=len(VOCAB) + 8),
        f"its tokenizer has {len(VOCAB)} pieces but its config.json says vocab_size {len(VOCAB) + 8}",
    ),
    "no vocab_size (BERT's default, 30522)": (
        _bert_config(drop="vocab_size"),
        f"its tokenizer has {len(VOCAB)} pieces but its config.json says vocab_size 30,522",
    ),
    "another model type": (_bert_config(model_type="roberta"), "model_type 'roberta'; .* ELECTRA and BERT"),
}


@pytest.mark.parametrize("case", BERT_CASES)
def test_a_bert_the_run_cannot_represent_is_one_line_before_any_work(tmp_path, capsys, case):
    """BERT checkpoints continue (tests/test_continued_bert.py), but what this library's layers cannot compute as
    saved is named before the corpus is read: another activation, relative positions (transformers 5 no longer
    reads them and would drop their weights silently), causal attention, embeddings of another size than the
    tokenizer. Before, every BERT folder was refused as "model_type 'bert'"."""
    checkpoint = tmp_path / "bert"
    torch.manual_seed(7)
    BertForPreTraining(BertConfig(vocab_size=len(VOCAB), **BERT_SHAPE)).save_pretrained(str(checkpoint))
    BertTokenizerFast(vocab={w: i for i, w in enumerate(VOCAB)}).save_pretrained(str(checkpoint))
    damage, message = BERT_CASES[case]
    damage(checkpoint)
    capsys.readouterr()  # transformers' progress bar while saving
    assert re.search(message, _refused_before_the_corpus(checkpoint, tmp_path, capsys))


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--objective", "cloze"],
            "objective=cloze keeps no transformers encoder; start a cloze run from scratch",
        ),
        (["--set", "embedding_sharing=gdes"], "--init-from with embedding_sharing=gdes is not supported yet"),
    ],
)
def test_settings_that_cannot_continue_a_checkpoint_are_refused_before_the_corpus(
    saved, tmp_path, capsys, flags, message
):
    """Before: these were refused only when the weights were loaded, after the vocabulary and examples were built
    from the corpus (minutes to hours); now by the config check."""
    assert message in _refused_before_the_corpus(saved / "discriminator", tmp_path, capsys, *flags)


def _refused_before_the_corpus(checkpoint: Path, tmp_path: Path, capsys, *flags: str) -> str:
    """`pretrain --init-from checkpoint` on a binary corpus, whose reading would be an error of its own: the one
    line it exits with, once checked that it names no corpus and that nothing was written."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(bytes(range(256)) * 50)
    output = tmp_path / "run"
    argv = ["pretrain", "--init-from", str(checkpoint), "--corpus", str(corpus), "--output", str(output)]
    assert main([*argv, *flags, "--max-steps", "1", "--no-plot", "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("electra pretrain: error: "), err
    assert "corpus.txt" not in err[0]
    assert not output.exists() and not (tmp_path / "cache").exists()
    return err[0]


def test_init_from_given_as_a_setting_must_be_a_folder(saved, tmp_path, capsys):
    """Before: `--set init_from=DIR/config.json` (or a config file's `init_from`) answered
    "DIR/config.json/config.json: not found"; only the --init-from flag was checked for a folder."""
    config_file = saved / "discriminator" / "config.json"
    assert main(["pretrain", "--set", f"init_from={config_file}", "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"electra pretrain: error: --init-from {config_file}: not a directory; give a run of this library or a "
        "transformers ELECTRA or BERT directory."
    )


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_numpy_cannot_take_is_one_line(tmp_path, capsys, seed):
    """Before: `--seed -1` read the corpus, then ended in numpy's `ValueError: Seed must be between 0 and 2**32 -
    1` traceback."""
    assert main(["pretrain", "--seed", seed, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"electra pretrain: error: config: seed must be in 0..4294967295 (the range numpy seeds), got {seed}."
    )
    assert not (tmp_path / "run").exists()
