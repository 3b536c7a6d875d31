"""The Python API as README's "From Python" shows it, tried as a demanding user would: wrong types and values,
output folders that hold something, paths that do not exist, `pathlib.Path` for `str`.

A library raises (never exits) with a message naming the fix in the caller's terms: keyword arguments, not the
command line's flags.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import electra
from electra.errors import UserError
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
    results without a word (the guard lived in `electra glue` only), and took no resume or overwrite argument."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.md").write_text("my notes")
    with pytest.raises(UserError, match=r"results\.md already exists; pass overwrite=True"):
        electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, **FAST)
    assert (out / "results.md").read_text() == "my notes"

    (out / "results.md").unlink()
    first = electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, **FAST)
    with pytest.raises(UserError, match="already exists"):
        electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, **FAST)
    assert json.loads((out / "results.json").read_text())["results"] == first["results"]
    again = electra.finetune_glue(run, ["stsb"], glue_data, output_dir=out, resume=True, **FAST)
    assert again["results"] == first["results"]  # the finished seed reused
    # a seed numpy refuses is refused before overwrite=True deletes the earlier run (before: after it)
    with pytest.raises(UserError, match="seed -1 is outside"):
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
    """Before: the guard lived in `electra squad` only: the API trained and wrote over predictions.json."""
    qa = {"id": "q", "question": "where?", "answers": [{"text": "the", "answer_start": 0}]}
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "the end", "qas": [qa]}]}]}
    (tmp_path / "sq.json").write_text(json.dumps(data))
    out = tmp_path / "out"
    out.mkdir()
    (out / "predictions.json").write_text("mine")
    with pytest.raises(UserError, match=r"predictions\.json already exists; pass overwrite=True"):
        electra.finetune_squad(run, out, train=tmp_path / "sq.json", eval=tmp_path / "sq.json", max_steps=1)
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
