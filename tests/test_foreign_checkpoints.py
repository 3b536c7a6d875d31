"""Checkpoints this library did not train: the Hugging Face layout `transformers` itself saves (what a user has
after downloading google/electra-small-discriminator and -generator), and the same with pickled weights only.

Every README path that takes such a folder is tried: continued pretraining (`--init-from`, and `init_from` from
Python), a frozen generator (`--generator-from`), GLUE, SQuAD and PLL scoring. Weights must load exactly; a folder
holding only `pytorch_model.bin` must be refused in one line naming the fix, before any other work, and never
unpickled.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining, ElectraTokenizerFast

import electra
from electra.app.cli import main
from electra.core.errors import UserError
from electra.data.tokenization import load_saved_tokenizer
from electra.export.layout import masked_lm_dir
from electra.training.continued import checkpoint_shape, init_vocabulary, load_initial_weights
from electra.training.model import build_pretraining_model
from tests.golden_trace import WORDS, write_stsb

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", *WORDS]
SHAPE = dict(embedding_size=16, num_hidden_layers=2, max_position_embeddings=64)


def _save(model, tokenizer, directory: Path, pickled: bool = False) -> Path:
    """As `save_pretrained` writes it; `pickled`: config, tokenizer and a torch.save'd pytorch_model.bin only
    (transformers 5 writes safetensors whatever it is asked, so the old layout is made by hand)."""
    if pickled:
        directory.mkdir(parents=True)
        model.config.save_pretrained(str(directory))
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
    else:
        model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Path:
    """discriminator/ and generator/ as transformers saves them (random weights, built by transformers alone), and
    their pickled twins discriminator-bin/ and generator-bin/."""
    root = tmp_path_factory.mktemp("hub")
    tokenizer = ElectraTokenizerFast(vocab={w: i for i, w in enumerate(VOCAB)})
    torch.manual_seed(3)
    disc = ElectraForPreTraining(
        ElectraConfig(
            vocab_size=len(VOCAB), hidden_size=32, num_attention_heads=2, intermediate_size=64, **SHAPE
        )
    )
    gen = ElectraForMaskedLM(
        ElectraConfig(
            vocab_size=len(VOCAB), hidden_size=16, num_attention_heads=1, intermediate_size=32, **SHAPE
        )
    )
    for name, model in (("discriminator", disc), ("generator", gen)):
        _save(model, tokenizer, root / name)
        _save(model, tokenizer, root / f"{name}-bin", pickled=True)
    disc.save_pretrained(str(root / "discriminator-no-tokenizer"))  # the model alone, as users often save it
    relu = ElectraConfig(**{**disc.config.to_dict(), "hidden_act": "relu"})
    _save(ElectraForPreTraining(relu), tokenizer, root / "discriminator-relu")
    renamed = root / "discriminator-renamed"  # weights under names no ELECTRA class reads (another library's)
    _save(disc, tokenizer, renamed)
    weights = load_file(str(renamed / "model.safetensors"))
    save_file(
        {f"backbone.{k}": v.contiguous() for k, v in weights.items()}, str(renamed / "model.safetensors")
    )
    _save(disc.electra, tokenizer, root / "encoder-only")  # ElectraModel: no discriminator head
    return root


@pytest.fixture
def no_unpickling(monkeypatch):
    """Any torch.load (the way a pickle would be read) fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("torch.load called: a pickle was read")

    monkeypatch.setattr(torch, "load", refuse)


def _batch(tokenizer) -> dict:
    enc = tokenizer(
        [" ".join(WORDS[:6]), " ".join(WORDS[10:13])],
        [" ".join(WORDS[20:24]), "the"],
        padding=True,
        return_tensors="pt",
    )
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def test_init_from_in_python_takes_the_transformers_checkpoints_shape_and_weights(hub):
    """Before: `electra.build_config(overrides={"init_from": DIR})` kept tiny's shape (hidden 128), so the run read
    its corpus and then died with "shape ... differs; use the checkpoint's own size", which no Python argument
    gives. Now it takes DIR's shape and vocabulary as `--init-from` does, and step 0 is the checkpoint exactly."""
    disc = hub / "discriminator"
    with pytest.warns(UserWarning, match="no size preset's"):
        config = electra.build_config(overrides={"init_from": str(disc), "max_steps": 5})
    assert (config.hidden_size, config.num_hidden_layers, config.embedding_size) == (32, 2, 16)
    assert config.tokenizer_vocab_size == len(VOCAB) and config.init_from == str(disc)
    tokenizer = load_saved_tokenizer(init_vocabulary(disc))
    torch.manual_seed(5)
    model = build_pretraining_model(config, tokenizer)
    assert load_initial_weights(model, disc) == {"kept": []}
    model.eval()
    batch = _batch(tokenizer)
    theirs = ElectraForPreTraining.from_pretrained(str(disc)).eval()(**batch).logits
    torch.testing.assert_close(model.discriminator(**batch), theirs)


def test_a_checkpoint_of_another_activation_is_refused_for_continued_pretraining(hub, tmp_path):
    """Before: a relu (or gelu_new) ELECTRA was continued with this library's gelu layers, silently: every weight
    loaded, yet step 0 already predicted something else than the checkpoint. GLUE loads it as saved."""
    with pytest.raises(UserError, match="hidden_act is 'relu'"):
        electra.build_config(overrides={"init_from": str(hub / "discriminator-relu")})
    assert (
        main(["pretrain", "--init-from", str(hub / "discriminator-relu"), "--output", str(tmp_path / "r")])
        == 2
    )
    assert not (tmp_path / "r").exists()


def test_a_pickle_only_checkpoint_is_refused_before_any_work_and_never_read(hub, tmp_path, no_unpickling):
    """Before: `--init-from` a folder holding only pytorch_model.bin read and tokenized the whole corpus, then said
    "no model.safetensors" without the fix; `--generator-from` likewise. Now both are refused while the
    settings are made, naming the conversion."""
    for call in (
        lambda: checkpoint_shape(hub / "discriminator-bin", {}),
        lambda: electra.build_config(overrides={"init_from": str(hub / "discriminator-bin")}),
        lambda: masked_lm_dir(hub / "generator-bin"),
    ):
        with pytest.raises(UserError, match=r"pytorch_model\.bin, a pickle.*safe_serialization=True"):
            call()


@pytest.mark.parametrize("command", ["glue", "squad"])
@pytest.mark.parametrize(
    "folder, fix",
    [
        ("discriminator-bin", "safe_serialization=True"),
        ("discriminator-no-tokenizer", "tokenizer.save_pretrained"),
    ],
)
def test_glue_and_squad_refuse_what_they_cannot_use_before_writing_anything(
    hub, tmp_path, capsys, command, folder, fix, no_unpickling
):
    """Before: pickled weights were refused by the model load, after OUTPUT/run.json had been written (and the
    GLUE task read), so a refused command left a record of a run that never was. A folder without a tokenizer
    was not refused at all: transformers 5's AutoTokenizer built an empty five-piece tokenizer, and GLUE and SQuAD
    fine-tuned on [UNK]s and reported the majority class as a result."""
    out = tmp_path / "out"
    if command == "glue":
        argv = [
            "glue",
            "--task",
            "stsb",
            "--max-steps",
            "1",
            "--data-dir",
            str(write_stsb(tmp_path / "glue")),
        ]
    else:
        qa = {"id": "q", "question": "what?", "answers": [{"text": WORDS[1], "answer_start": 4}]}
        paragraph = {"context": f"the {WORDS[1]}", "qas": [qa]}
        data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [paragraph]}]}
        (tmp_path / "sq.json").write_text(json.dumps(data))
        argv = ["squad", "--train", str(tmp_path / "sq.json"), "--max-steps", "1"]
    assert main([*argv, "--model", str(hub / folder), "--output", str(out)]) == 2
    assert fix in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_glue_fine_tunes_the_transformers_encoder_as_saved(hub, tmp_path):
    """`electra.finetune_glue` on the transformers folder: its encoder is the checkpoint's (same hidden states)."""
    from electra.glue.model import load_encoder

    disc = hub / "discriminator"
    tokenizer = load_saved_tokenizer(disc)
    batch = _batch(tokenizer)
    ours = load_encoder(disc).eval()(**batch).last_hidden_state
    theirs = ElectraForPreTraining.from_pretrained(str(disc)).electra.eval()(**batch).last_hidden_state
    torch.testing.assert_close(ours, theirs)
    results = electra.finetune_glue(disc, ["stsb"], write_stsb(tmp_path / "glue"), max_steps=2, batch_size=8)
    assert results["tasks"] == ["stsb"] and results["runs"]["stsb"][0]["steps"] == 2


def test_pll_of_a_transformers_masked_lm_is_salazars_sum(hub, no_unpickling):
    """`electra.load_scorer` on a transformers ...ForMaskedLM folder gives Σ_t log p(x_t | x with t masked), piece
    by piece, as computed here with transformers alone."""
    gen = hub / "generator"
    sentence = " ".join(WORDS[:5])
    (pll,) = electra.load_scorer(gen, device="cpu").sentence_plls([sentence])
    tokenizer = load_saved_tokenizer(gen)
    model = ElectraForMaskedLM.from_pretrained(str(gen)).eval()
    ids = tokenizer(sentence, return_tensors="pt")["input_ids"][0]
    expected = 0.0
    with torch.no_grad():
        for t in range(1, len(ids) - 1):
            masked = ids.clone()
            masked[t] = tokenizer.mask_token_id
            logits = model(input_ids=masked[None]).logits[0, t]
            expected += torch.log_softmax(logits, -1)[ids[t]].item()
    assert pll == pytest.approx(expected, abs=1e-4)


def test_weights_the_model_would_start_at_random_are_refused(hub, tmp_path, capsys):
    """Before: a safetensors file holding none of the encoder's names loaded as "0 weights" and GLUE fine-tuned a
    random encoder, reporting its score as the checkpoint's; a scorer built on a folder without the masked-LM or
    discriminator head scored with a random head. Now the encoder's weights must all be there for fine-tuning,
    and a scorer's whole model for scoring (BERT's pooler and a task head may still start fresh)."""
    out = tmp_path / "out"
    argv = ["glue", "--task", "stsb", "--max-steps", "1", "--data-dir", str(write_stsb(tmp_path / "glue"))]
    assert main([*argv, "--model", str(hub / "discriminator-renamed"), "--output", str(out)]) == 2
    assert "of the encoder's weights are not in its safetensors" in capsys.readouterr().err
    headless = tmp_path / "headless"  # a masked LM's config beside an encoder's weights
    shutil.copytree(hub / "encoder-only", headless)
    config = json.loads((headless / "config.json").read_text())
    (headless / "config.json").write_text(json.dumps({**config, "architectures": ["ElectraForMaskedLM"]}))
    with pytest.raises(UserError, match="not a complete ElectraForMaskedLM"):
        electra.load_scorer(headless, device="cpu")
    # an encoder saved alone is a sound start for fine-tuning: nothing of it is missing
    from electra.glue.model import load_encoder

    load_encoder(hub / "encoder-only")


def test_init_from_takes_the_checkpoints_shape_however_it_is_given(hub, tmp_path, capsys):
    """Before: only the --init-from flag took DIR's shape; `--set init_from=DIR` or a config file's init_from kept
    the preset's, and the run read its corpus before failing on shapes it could not fix; a config file's shape
    fields were silently replaced by the checkpoint's. Now every route takes it, and the file's fields are
    checked against it."""
    disc = hub / "discriminator"
    assert main(["pretrain", "--set", f"init_from={disc}", "--help-config"]) == 0
    assert "hidden_size = 32" in capsys.readouterr().out
    config = tmp_path / "continue.json"
    config.write_text(json.dumps({"init_from": str(disc)}))
    assert electra.build_config(config_file=config).hidden_size == 32
    config.write_text(json.dumps({"init_from": str(disc), "hidden_size": 64}))
    assert main(["pretrain", "--config", str(config), "--output", str(tmp_path / "r")]) == 2
    assert "its hidden_size is 32, not 64" in capsys.readouterr().err
    with pytest.raises(UserError, match="its hidden_size is 32, not 64"):
        electra.build_config(config_file=config)


def test_a_tokenizer_config_alone_is_no_tokenizer(hub, tmp_path):
    """Before: the scorer took a folder holding tokenizer_config.json (and no vocabulary) as having a tokenizer,
    and transformers 5 built an empty five-piece one from it, so every word scored as [UNK]. Vocabularies of other
    kinds (byte-level BPE's vocab.json, a SentencePiece model) still count."""
    from electra.data.tokenization import holds_tokenizer

    bare = tmp_path / "generator"
    shutil.copytree(hub / "generator", bare)
    for name in ("tokenizer.json", "vocab.txt"):
        (bare / name).unlink(missing_ok=True)
    assert (bare / "tokenizer_config.json").is_file()
    with pytest.raises(UserError, match="no tokenizer"):
        electra.load_scorer(bare, device="cpu")
    (bare / "spiece.model").write_bytes(b"")
    assert holds_tokenizer(bare)


def test_weights_cut_short_are_one_line_naming_the_file_in_every_loader(hub, tmp_path, capsys):
    """Before: a model.safetensors cut short (a copy interrupted, a full disk) surfaced from glue, squad, score,
    probe and --init-from as safetensors' own traceback, `SafetensorError: Error while deserializing header:
    incomplete metadata, file not fully covered`, naming neither the file nor what to do."""
    from electra.core.files import read_safetensors
    from electra.export.layout import load_pretrained
    from electra.generators.two_tower import WEIGHTS_NAME, TwoTowerGenerator
    from tests.test_two_tower import _config

    cut = shutil.copytree(hub / "discriminator", tmp_path / "cut")
    weights = cut / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.truncate(weights.stat().st_size // 2)
    with pytest.raises(UserError, match=f"{cut}: its safetensors weights cannot be read .*copy them again"):
        load_pretrained(ElectraForPreTraining, cut)
    with pytest.raises(UserError, match=f"{weights}: not a readable safetensors file .*copy it again"):
        read_safetensors(weights)
    assert (
        main(["pretrain", "--init-from", str(cut), "--output", str(tmp_path / "run"), "--max-steps", "1"])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"electra pretrain: error: {weights}: not a readable safetensors file"), err
    assert not (tmp_path / "run").exists()

    two_tower = tmp_path / "two-tower"
    TwoTowerGenerator(_config()).save_pretrained(two_tower)
    (two_tower / WEIGHTS_NAME).write_bytes((two_tower / WEIGHTS_NAME).read_bytes()[:100])
    with pytest.raises(UserError, match=f"{two_tower / WEIGHTS_NAME}: not a readable safetensors file"):
        TwoTowerGenerator.from_pretrained(two_tower)
