"""The Python API as README's "From Python" shows it, tried as a demanding user would: wrong types and values,
output folders that hold something, paths that do not exist, `pathlib.Path` for `str`.

A library raises (never exits) with a message naming the fix in the caller's terms: keyword arguments, not the
command line's flags.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pydoc
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import electra
import electra.tlm.train as tlm_train
from electra.core.errors import UserError
from electra.training.pretraining import RunInputs
from tests.golden_trace import export_word_model, write_stsb

FAST = dict(max_steps=1, batch_size=8)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return export_word_model(tmp_path_factory.mktemp("api") / "run")


@pytest.fixture(scope="module")
def glue_data(tmp_path_factory) -> Path:
    return write_stsb(tmp_path_factory.mktemp("glue"))


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_grad_norm", -1.0),  # clip_grad_norm_ with a negative norm flips every gradient: gradient ascent
        ("discriminator_loss_weight", -50.0),  # trains the discriminator to be wrong
        ("hidden_dropout_prob", 1.5),  # failed only once the model was built, after the corpus was read
        ("attention_probs_dropout_prob", -0.1),
        ("weight_decay", -0.01),  # failed in torch's AdamW, a ValueError traceback
        ("adam_beta2", 1.0),
        ("generator_hidden_multiplier", 0),  # silently built a one-head generator
        ("sampling_temperature", -1.0),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(field, value):
    """Before: accepted; each failed late or, worse, trained silently the wrong way."""
    with pytest.raises(UserError, match=rf"config: {field} must be"):
        electra.build_config("tiny", overrides={field: value})


def test_the_edges_of_those_ranges_stay_allowed():
    config = electra.build_config(
        "tiny",
        overrides={"max_grad_norm": 0, "hidden_dropout_prob": 0, "weight_decay": 0, "max_steps": "200"},
    )
    assert (config.max_grad_norm, config.hidden_dropout_prob, config.max_steps) == (0.0, 0.0, 200)


def test_overrides_of_the_wrong_type_and_paths_as_path_objects():
    """Before: a list of pairs raised AttributeError ('list' object has no attribute 'items'), and a pathlib.Path
    for a path field was refused as "not a valid str"."""
    with pytest.raises(TypeError, match="overrides must be a dict"):
        electra.build_config("tiny", overrides=[("max_steps", 3)])
    config = electra.build_config(
        "tiny", overrides={"generator_from": Path("gen"), "embedding_sharing": "none"}
    )
    assert config.generator_from == "gen"


def test_pretrain_wants_a_config_and_known_keywords(tmp_path):
    """Before: a dict for `config` died on `.validate`; a misspelt keyword gave RunInputs' TypeError."""
    with pytest.raises(TypeError, match="electra.build_config"):
        electra.pretrain({"max_steps": 2}, tmp_path / "run")
    with pytest.raises(TypeError, match="did you mean resume"):
        electra.pretrain(electra.build_config("tiny"), tmp_path / "run", corpus=tmp_path, resum=True)
    assert not (tmp_path / "run").exists()


def test_read_export_of_a_path_that_does_not_exist_is_refused(tmp_path, run):
    """Before: None, as for a folder that is not an export, so a mistyped run surfaced later as an AttributeError
    on None."""
    with pytest.raises(UserError, match="does not exist"):
        electra.read_export(tmp_path / "rnu")
    assert electra.read_export(tmp_path) is None
    assert electra.read_export(run).finetune == "discriminator"


def test_finetune_glue_never_replaces_results_unasked(tmp_path, run, glue_data):
    """Before: `electra.finetune_glue(..., output_dir=OUT)` wrote over a user's results.md and over an earlier run's
    results without a word (the guard lived in `electra glue` only), and took no resume or overwrite argument. A
    user's own file (no run.json beside it) is named as theirs: `overwrite=True`, which the refusal had suggested,
    refuses it too."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.md").write_text("my notes")
    for overwrite in (False, True):
        with pytest.raises(
            UserError,
            match=r"holds results\.md, but no run\.json shows .* not replaced, even with overwrite=True",
        ):
            electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, overwrite=overwrite, **FAST)
    assert (out / "results.md").read_text() == "my notes"

    (out / "results.md").unlink()
    first = electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, **FAST)
    with pytest.raises(UserError, match="already exists"):
        electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, **FAST)
    assert json.loads((out / "results.json").read_text())["results"] == first["results"]
    again = electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, resume=True, **FAST)
    assert again["results"] == first["results"]  # the finished seed reused
    # a seed numpy refuses is refused before overwrite=True deletes the earlier run (before: after it)
    with pytest.raises(UserError, match="seed -1 must be in 0..4294967295"):
        electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, overwrite=True, seeds=[-1], **FAST)
    assert json.loads((out / "results.json").read_text())["results"] == first["results"]
    electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, overwrite=True, seeds=[2], **FAST)
    assert json.loads((out / "results.json").read_text())["seeds"] == [2]


def test_finetune_glue_takes_tasks_and_settings_as_the_command_line_does(tmp_path, run, glue_data):
    """Before: tasks="stsb" was read letter by letter ("unknown GLUE task 's'"), max_steps="1" failed deep in the
    schedule with "can't multiply sequence by non-int", and errors named flags (--model) a caller never typed."""
    results = electra.finetune_glue(run, "stsb", glue_data, max_steps="1", batch_size=8)
    assert results["tasks"] == ["stsb"] and results["runs"]["stsb"][0]["steps"] == 1
    with pytest.raises(TypeError, match="did you mean max_steps"):
        electra.finetune_glue(run, ["stsb"], glue_data, max_step=1)
    with pytest.raises(UserError, match="max_steps='many' is not a valid int"):
        electra.finetune_glue(run, ["stsb"], glue_data, max_steps="many")
    with pytest.raises(UserError) as refused:
        electra.finetune_glue(tmp_path / "nope", ["stsb"], glue_data)
    assert "model must be" in str(refused.value) and "--" not in str(refused.value)


def test_finetune_squad_never_replaces_results_unasked(tmp_path, run):
    """Before: the guard lived in `electra squad` only: the API trained and wrote over predictions.json. A file no
    run wrote (no run.json beside it) is named as the user's, since overwrite=True would leave it too."""
    qa = {"id": "q", "question": "where?", "answers": [{"text": "the", "answer_start": 0}]}
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "the end", "qas": [qa]}]}]}
    (tmp_path / "sq.json").write_text(json.dumps(data))
    out = tmp_path / "out"
    out.mkdir()
    (out / "predictions.json").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(
            UserError, match=r"holds predictions\.json, but no run\.json shows that a run wrote"
        ):
            electra.finetune_squad(
                run,
                out,
                train=tmp_path / "sq.json",
                eval=tmp_path / "sq.json",
                max_steps=1,
                overwrite=overwrite,
            )
    assert (out / "predictions.json").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["predictions.json"]


def test_runs_in_one_process_may_use_different_precisions(tmp_path, run, glue_data):
    """Before: the second call died in Accelerate ("AcceleratorState has already been initialized and cannot be
    changed, restart your runtime completely"): a bf16 run, then any run in fp32, needed a new Python process. The
    fp32 run after the bf16 one gives what it gives alone."""
    alone = electra.finetune_glue(run, ["stsb"], glue_data, **FAST)["results"]
    electra.finetune_glue(run, ["stsb"], glue_data, mixed_precision="bf16", **FAST)
    assert electra.finetune_glue(run, ["stsb"], glue_data, **FAST)["results"] == alone


@pytest.mark.skipif(
    not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where nothing can be created"
)
def test_an_output_dir_that_cannot_be_written_is_refused_before_any_work(
    tmp_path, run, glue_data, small_corpus
):
    """Before: `electra.pretrain` read the corpus, trained the vocabulary and built the model, then died with a
    FileNotFoundError at its first write (the command line checks --output while it reads its flags)."""
    from tests.conftest import MICRO

    config = electra.build_config("tiny", overrides=MICRO)
    with pytest.raises(UserError, match="output_dir /proc/electra-x: cannot write here"):
        electra.pretrain(config, "/proc/electra-x", corpus=small_corpus, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    with pytest.raises(UserError, match="cannot write here"):
        electra.finetune_glue(run, ["stsb"], glue_data, output_dir="/proc/electra-x", **FAST)


def test_pretrain_leaves_the_callers_config_as_it_was(tmp_path, small_corpus):
    """Before: the run wrote its vocabulary size (and, sized to a FLOP budget, its steps and warmup) into the
    caller's config, so the same config reused on another corpus carried the first run's vocabulary size."""
    from dataclasses import asdict

    from tests.conftest import MICRO

    config = electra.build_config("tiny", overrides={**MICRO, "max_steps": 2, "flops_budget": 1e9})
    before = asdict(config)
    electra.pretrain(
        config, tmp_path / "run", corpus=small_corpus, cache_dir=tmp_path / "cache", size_to_budget=True
    )
    assert asdict(config) == before


# ---- a notebook's calls: switches and numbers as a notebook holds them, configs edited after build_config, inputs
# that are empty or of the wrong shape, and the global state a call leaves behind


def test_the_switches_and_seeds_of_finetune_glue_are_coerced(tmp_path, run, glue_data):
    """Before: `overwrite="no"` (a non-empty string, so true) deleted the earlier run and trained again, and
    `resume="maybe"` resumed; seeds were passed on as given: np.arange(1, 3) failed in numpy's seeding, 1.5 in a
    cast, and seeds=3 (the command line's count) in "'int' object is not iterable"."""
    out = tmp_path / "out"
    first = electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, **FAST)
    with pytest.raises(UserError, match=r"already exists \(and 2 more\); pass overwrite=True"):
        electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, overwrite="no", seeds=[7], **FAST)
    assert json.loads((out / "results.json").read_text())["results"] == first["results"]
    with pytest.raises(UserError, match="resume='maybe' is not a valid bool"):
        electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, resume="maybe", **FAST)
    with pytest.raises(TypeError, match=r"seeds is a list of seeds \(e\.g\. \[1, 2, 3\]\), not int"):
        electra.finetune_glue(run, ["stsb"], glue_data, seeds=3, **FAST)
    with pytest.raises(UserError, match="seeds=1.5 is not a whole number"):
        electra.finetune_glue(run, ["stsb"], glue_data, seeds=[1.5], **FAST)
    assert electra.finetune_glue(run, ["stsb"], glue_data, seeds=np.arange(1, 3), **FAST)["seeds"] == [1, 2]


@pytest.mark.parametrize("setting", ["max_steps", "batch_size", "eval_batch_size"])
def test_finetune_glue_refuses_counts_of_zero(run, glue_data, setting):
    """Before: max_steps=0 trained whole epochs (`electra glue --max-steps 0` is refused), batch_size=0 ended in a
    ZeroDivisionError and eval_batch_size=0 in range()'s ValueError once training was done."""
    with pytest.raises(UserError, match=rf"^{setting} must be at least 1"):
        electra.finetune_glue(run, ["stsb"], glue_data, **{**FAST, setting: 0})


def test_pretrain_checks_a_config_changed_after_build_config(tmp_path):
    """Before: a field set on the config (not through `overrides`) was never coerced: max_steps = 2.5 trained and
    config.json recorded 2.5, "3" or "fast" failed inside the run with '<' not supported between 'str' and 'int'.
    Values are validated as before (hidden_size 7 that 2 heads cannot divide); a coercible "3" goes on to the
    corpus check."""
    missing = tmp_path / "missing"
    for field, value, refusal in (
        ("max_steps", 2.5, "config: max_steps=2.5 is not a whole number"),
        ("learning_rate", "fast", "config: learning_rate='fast' is not a valid float"),
        ("hidden_size", 7, "hidden_size 7 is not divisible by num_attention_heads 2"),
        ("max_steps", 0, "max_steps must be at least 1"),
        ("max_steps", "3", f"corpus {missing} does not exist"),
    ):
        config = electra.build_config("tiny", overrides={"max_steps": 3})
        setattr(config, field, value)
        with pytest.raises(UserError, match=re.escape(refusal)):
            electra.pretrain(config, tmp_path / "run", corpus=missing)
        assert getattr(config, field) == value  # the caller's config as it was
    assert not (tmp_path / "run").exists()


def test_pretrain_refuses_what_the_command_refuses(tmp_path):
    """Before: the checks `electra pretrain` makes among its flags were skipped: resume=True with overwrite=True
    resumed in silence, num_proc=0 was taken as 1, and a corpus that is not there was "cannot be read ... give this
    user access to it (chmod)"; a missing vocabulary said "omit --vocab"."""
    config = electra.build_config("tiny", overrides={"max_steps": 3})
    out, missing = tmp_path / "run", tmp_path / "missing"
    with pytest.raises(
        UserError, match="resume=True continues the run in output_dir and overwrite=True deletes"
    ):
        electra.pretrain(config, out, resume=True, overwrite=True)
    with pytest.raises(UserError, match="^num_proc must be at least 1"):
        electra.pretrain(config, out, corpus=missing, num_proc=0)
    with pytest.raises(UserError, match=f"^corpus {re.escape(str(missing))} does not exist"):
        electra.pretrain(config, out, corpus=missing)
    with pytest.raises(UserError, match="does not exist; pass a BERT-style vocab.txt or omit vocab.$"):
        electra.pretrain(config, out, vocab=missing)
    assert not out.exists()


def test_load_scorer_checks_its_arguments_before_loading(run):
    """Before: device="gpu0" was torch's RuntimeError, "cuda" on a machine without one failed once the model had
    loaded, batch_size=0 was taken as 1 and 2.5 failed at the first sentence; the run's export.json (a file) was
    "model directory does not exist"; within_word named the flag --within-word."""
    with pytest.raises(UserError, match=r"^device 'gpu0' is not a device; give auto, cpu, cuda or cuda:N"):
        electra.load_scorer(run, device="gpu0")
    with pytest.raises(UserError, match="^batch_size must be at least 1"):
        electra.load_scorer(run, batch_size=0)
    with pytest.raises(UserError, match="batch_size=2.5 is not a whole number"):
        electra.load_scorer(run, batch_size=2.5)
    with pytest.raises(UserError, match=r"is a file, not a model directory; give the folder that holds it"):
        electra.load_scorer(run / "export.json")
    with pytest.raises(UserError, match="^within_word must be one of"):
        electra.load_scorer(run, within_word="words")
    assert electra.load_scorer(run, batch_size="8", device="cpu").batch_size == 8


def test_sentence_plls_of_empty_odd_and_long_inputs(run):
    """Before: [] raised IndexError inside the tokenizer, one string was scored character by character, a
    generator gave [] (read once to tokenize, then empty), and None in the list failed in the tokenizer."""
    scorer = electra.load_scorer(run)
    assert scorer.sentence_plls([]) == [] and scorer.score([]) == []
    assert scorer.sentence_plls([""]) == [0.0]  # no pieces: the empty sum
    pair = ["the module", "the list of the file"]
    assert scorer.sentence_plls(sentence for sentence in pair) == scorer.sentence_plls(pair)
    with pytest.raises(TypeError, match=r"not one str: pass \[text\]"):
        scorer.sentence_plls("the module")
    with pytest.raises(TypeError, match=r"sentences\[1\] is NoneType, not str"):
        scorer.sentence_plls(["the module", None])
    long = scorer.score(["the module " * 200])[0]  # more pieces than the model's 128 positions
    assert long.truncated and long.pieces == 126 and math.isfinite(long.pll)


@pytest.mark.parametrize(
    "manifest",
    [
        {"parts": ["discriminator"]},
        {"parts": {"discriminator": {"kind": "ElectraForPreTraining"}}},
        {"parts": {"discriminator": {"dir": 3}}},
        {"dirs": {"discriminator": None}},
        {"parts": {"generator": {"dir": "generator"}}, "scoring": {"mlm": "generator"}},
        {"parts": {}, "finetune": ["discriminator"]},
    ],
)
def test_a_damaged_export_manifest_is_one_line(tmp_path, manifest):
    """Before: AttributeError ('list' object has no attribute 'items'), KeyError 'dir', TypeError (PosixPath / int),
    or a scoring method's part read letter by letter ("no 'g' part"), from read_export, load_scorer and the
    fine-tuners alike."""
    (tmp_path / "export.json").write_text(json.dumps({"format": 1, "objective": "electra", **manifest}))
    with pytest.raises(UserError, match=r"export\.json: .*; re-export the run\.$"):
        electra.read_export(tmp_path)
    with pytest.raises(UserError, match=r"export\.json: .*; re-export the run\.$"):
        electra.load_scorer(tmp_path)


def test_messages_name_the_arguments_not_the_flags(run, glue_data, tmp_path):
    """Each refusal names what a Python caller passed, from the settings' declarations: before, "--task is empty"
    (the argument is `tasks`), and messages below the door were rewritten by a table of patterns."""
    with pytest.raises(UserError, match="^tasks is empty"):
        electra.finetune_glue(run, [], glue_data)
    with pytest.raises(UserError, match="GLUE data directory not found; pass data_dir DIR with"):
        electra.finetune_glue(run, ["stsb"], tmp_path / "no-glue")
    with pytest.raises(UserError, match=r"^nothing to do: pass train FILE, eval FILE or both\.$"):
        electra.finetune_squad(run, tmp_path / "squad")
    with pytest.raises(UserError, match=r"^device 'cuda:x' is not a device"):
        electra.load_scorer(run, device="cuda:x")
    folder = tmp_path / "pretrain"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    config = electra.build_config("tiny", overrides={"max_steps": 2})
    with pytest.raises(
        UserError, match=r"is not a run of this command; choose another output_dir, or pass overwrite=True"
    ):
        electra.pretrain(config, folder, corpus=glue_data / "STS-B" / "train.tsv")
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_calls_leave_the_random_generators_as_they_were(run, glue_data):
    """Before: a fine-tune (or a pretraining run) seeded torch's, numpy's and Python's generators and left them
    there, so a notebook's own draws after it (a shuffle, a sample) repeated on every pass of a loop around it.
    Default dtype, thread count and gradient mode are untouched too."""

    def draws() -> tuple:
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    def seeded() -> None:
        random.seed(123)
        np.random.seed(123)
        torch.manual_seed(123)

    seeded()
    expected = draws()
    before = (torch.get_default_dtype(), torch.get_num_threads(), torch.is_grad_enabled())
    seeded()
    electra.finetune_glue(run, ["stsb"], glue_data, **FAST)
    assert draws() == expected
    assert (torch.get_default_dtype(), torch.get_num_threads(), torch.is_grad_enabled()) == before


def test_help_of_pretrain_names_every_keyword():
    """Before: help(electra.pretrain) named five of the keywords and "..."; size_to_budget, keep_warmup,
    doc_boundary and strict_utf8 were found only in electra.training.pretraining.RunInputs."""
    text = pydoc.render_doc(electra.pretrain, renderer=pydoc.plaintext)
    for field in dataclasses.fields(RunInputs):
        if field.name not in ("corpus", "output_dir"):
            assert f"- {field.name}:" in text, field.name


def test_numpy_numbers_are_numbers():
    """Before: np.int64(200) for max_steps (from np.arange, astype(int)) was "not a valid int", and a float32
    learning rate "not a valid float"."""
    config = electra.build_config(
        "tiny", overrides={"max_steps": np.int64(200), "learning_rate": np.float32(0.5)}
    )
    assert (config.max_steps, config.learning_rate) == (200, 0.5)
    assert type(config.max_steps) is int and type(config.learning_rate) is float


@pytest.mark.parametrize("make", [False, True])
def test_train_tlm_refuses_a_resume_with_nothing_to_resume(tmp_path, monkeypatch, make):
    """Before: `electra.tlm.train.train_tlm` with resume=True on a mistyped output folder started a fresh run in silence
    (the command line refused it, in a check of its own)."""

    def no_training(settings):
        raise AssertionError("a fresh run was started")

    monkeypatch.setattr(tlm_train, "train_joint", no_training)
    out = tmp_path / "typo"
    if make:
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    tasks = {name: str(tmp_path / f"{name}.tsv") for name in ("task_train", "task_dev", "task_test")}
    where = "holds no run" if make else "does not exist"
    with pytest.raises(
        UserError, match=f"--resume: {re.escape(str(out))} {where}, so there is nothing to resume"
    ):
        tlm_train.train_tlm(tlm_train.TLMSettings(out=str(out), resume=True, **tasks))
    if make:
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    else:
        assert not out.exists()


def test_a_built_config_is_checked_once(tmp_path, monkeypatch):
    """`build_config` checks what it makes; `electra.pretrain` checks that config again only when a field changed
    after it (before: every call checked it twice)."""
    import electra.app.api as api

    calls = []
    monkeypatch.setattr(api, "check_config", lambda config: calls.append(config.max_steps))
    config = electra.build_config("tiny", overrides={"max_steps": 3})
    for _ in range(2):
        with pytest.raises(UserError, match="does not exist"):
            electra.pretrain(config, tmp_path / "run", corpus=tmp_path / "missing")
    assert calls == []
    config.max_steps = 4
    with pytest.raises(UserError, match="does not exist"):
        electra.pretrain(config, tmp_path / "run", corpus=tmp_path / "missing")
    assert calls == [4]
