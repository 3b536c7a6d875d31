"""A frozen, existing masked LM as the generator (Fast-ELECTRA): nothing of it trains, its temperature falls to 1
on schedule, the FLOP counter charges its forward only, and a run takes its vocabulary."""

import json

import pytest
import torch
from safetensors.torch import load_file

from electra.core.errors import UserError
from electra.flops.analytic import count_flops
from electra.flops.measured import startup_check
from electra.generators.frozen import FrozenMaskedLMGenerator, temperature_at
from electra.objectives import build_config, flop_report, get_objective
from electra.training.model import build_pretraining_model
from electra.training.pretraining import RunInputs, pretrain

from .conftest import MICRO, SAMPLE_TEXT


def _run(corpus, out, cache, overrides):
    config = build_config("tiny", overrides=overrides)
    return pretrain(config, RunInputs(corpus=str(corpus), output_dir=out, cache_dir=str(cache), num_proc=1))


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory):
    """A briefly trained masked LM of generator width, exported with its tokenizer."""
    root = tmp_path_factory.mktemp("frozen")
    corpus = root / "corpus"
    corpus.mkdir()
    for i in range(12):
        (corpus / f"doc{i:02d}.txt").write_text(SAMPLE_TEXT * 6)
    overrides = {**MICRO, "objective": "mlm", "hidden_size": 16, "intermediate_size": 32}
    _run(corpus, root / "mlm", root / "cache", overrides)
    return root / "mlm"


def _frozen_config(micro_overrides, mlm_run, **extra):
    overrides = {**micro_overrides, "generator_from": str(mlm_run), "embedding_sharing": "none", **extra}
    return build_config("tiny", overrides=overrides)


def _tokenizer(mlm_run):
    from electra.data.tokenization import load_saved_tokenizer

    return load_saved_tokenizer(mlm_run / "tokenizer")


def _batch(tokenizer):
    enc = tokenizer(["The committee met on Tuesday to review the annual budget."] * 4, return_tensors="pt")
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def test_no_parameter_of_the_frozen_generator_changes(micro_overrides, mlm_run):
    tokenizer = _tokenizer(mlm_run)
    torch.manual_seed(0)
    model = build_pretraining_model(_frozen_config(micro_overrides, mlm_run), tokenizer).train()
    assert isinstance(model.generator, FrozenMaskedLMGenerator) and not model.generator.model.training
    before = {k: v.clone() for k, v in model.generator.state_dict().items() if k != "calls"}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        out = model(**_batch(tokenizer))
        assert "generator_loss" not in out.metrics and "generator_accuracy" in out.metrics
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert all(p.grad is None for p in model.generator.parameters())
    for name, value in model.generator.state_dict().items():
        if name != "calls":
            assert torch.equal(value, before[name]), name
    assert int(model.generator.calls) == 3


def test_temperature_follows_the_schedule(micro_overrides, mlm_run):
    config = _frozen_config(
        micro_overrides, mlm_run, generator_temperature_start=3.0, max_steps=4, gradient_accumulation_steps=2
    )
    model = build_pretraining_model(config, _tokenizer(mlm_run))
    generator = model.generator.train()
    seen = [float(generator.sampling_temperature(1.0)) for _ in range(10)]
    expected = [3.0 - 2.0 * min(1.0, k / 8) for k in range(10)]  # 4 steps x 2 micro-batches, then 1
    assert seen == pytest.approx(expected)
    generator.eval()
    assert float(generator.sampling_temperature(1.0)) == 1.0 and int(generator.calls) == 10  # eval: no tick
    assert float(temperature_at(torch.tensor(0.5), 2.0)) == pytest.approx(1.5)


def test_samples_are_drawn_at_the_scheduled_temperature(micro_overrides, mlm_run, monkeypatch):
    import electra.objectives.replaced_token as replaced_token

    seen = []
    real = replaced_token.sample_tokens
    monkeypatch.setattr(
        replaced_token, "sample_tokens", lambda logits, t: seen.append(float(t)) or real(logits, t)
    )
    tokenizer = _tokenizer(mlm_run)
    model = build_pretraining_model(_frozen_config(micro_overrides, mlm_run, max_steps=2), tokenizer).train()
    for _ in range(3):
        model(**_batch(tokenizer))
    assert seen == pytest.approx([2.0, 1.5, 1.0])


def test_flops_charge_the_generator_forward_only(micro_overrides, mlm_run):
    tokenizer = _tokenizer(mlm_run)
    config = _frozen_config(micro_overrides, mlm_run)
    config.vocab_size = len(tokenizer)
    plan = get_objective("electra").flop_plan(config)
    assert plan.generator_passes == 1.0 and plan.generator_shape.hidden == 16
    report = flop_report(config)
    generator = sum(t.flops for t in report.train_terms if t.network.startswith("generator"))
    discriminator = sum(t.flops for t in report.train_terms if t.network == "discriminator")
    assert report.train_flops_per_sequence == pytest.approx(2 * discriminator + generator)
    trained = count_flops(
        config, plan=type(plan)(head="binary", generator="mlm", generator_shape=plan.generator_shape)
    )
    assert trained.train_flops_per_sequence == pytest.approx(2 * discriminator + 2 * generator)
    # The counted shape is the loaded model's: the start-up check measures the real forward.
    model = build_pretraining_model(config, tokenizer)
    check = startup_check(model, _batch(tokenizer), config, plan)
    assert check["ok"], check


def test_a_run_uses_the_generator_vocabulary_and_exports_it_unchanged(
    small_corpus, tmp_path, micro_overrides, mlm_run
):
    out = tmp_path / "fast"
    _run(
        small_corpus,
        out,
        tmp_path / "cache",
        # a vocabulary size of its own would train a different WordPiece: the generator's must win
        {
            **micro_overrides,
            "generator_from": str(mlm_run),
            "embedding_sharing": "none",
            "tokenizer_vocab_size": 450,
        },
    )
    assert _tokenizer(out).get_vocab() == _tokenizer(mlm_run).get_vocab()
    original = load_file(str(mlm_run / "mlm" / "model.safetensors"))
    exported = load_file(str(out / "generator" / "model.safetensors"))
    assert original.keys() == exported.keys()
    assert all(torch.equal(original[k], exported[k]) for k in original)


def test_bad_settings_are_refused_in_one_line(micro_overrides, mlm_run, tmp_path):
    with pytest.raises(UserError, match="embedding_sharing=none"):
        build_config("tiny", overrides={**micro_overrides, "generator_from": str(mlm_run)})
    with pytest.raises(UserError, match="generator=mlm"):
        _frozen_config(micro_overrides, mlm_run, generator="two-tower", objective="electra-tt")
    with pytest.raises(UserError, match="objective=mlm"):
        _frozen_config(micro_overrides, mlm_run, objective="mlm")
    with pytest.raises(UserError, match="config.json"):
        config = _frozen_config(micro_overrides, tmp_path)
        build_pretraining_model(config, _tokenizer(mlm_run))
    config = _frozen_config(micro_overrides, mlm_run)
    from electra.data.tokenization import train_wordpiece_tokenizer

    other = train_wordpiece_tokenizer(
        ["a few other words to make a different vocabulary"] * 3, vocab_size=120
    )
    with pytest.raises(UserError, match="--vocab"):
        build_pretraining_model(config, other)


def test_a_discriminator_is_refused_as_the_generator(micro_overrides, mlm_run, tmp_path):
    """transformers loads an ELECTRA discriminator into ...ForMaskedLM with a random vocabulary head (its weights
    are not in the file): the run trained against random replacements, with generator accuracy 0 and no word."""
    from transformers import AutoConfig, ElectraForPreTraining

    discriminator = tmp_path / "discriminator"
    ElectraForPreTraining(AutoConfig.from_pretrained(mlm_run / "mlm")).save_pretrained(discriminator)
    config = _frozen_config(micro_overrides, discriminator)
    with pytest.raises(UserError, match="holds ElectraForPreTraining, not a complete ElectraForMaskedLM"):
        build_pretraining_model(config, _tokenizer(mlm_run))


def test_cli_generator_from_turns_sharing_off_and_trains(small_corpus, tmp_path, mlm_run):
    from electra.app.cli import main

    out = tmp_path / "cli"
    argv = ["pretrain", "--corpus", str(small_corpus), "--output", str(out), "--generator-from", str(mlm_run)]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--no-plot"]
    for key, value in {**MICRO, "max_steps": 2}.items():
        argv += ["--set", f"{key}={value}"]
    assert main(argv) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["generator_from"] == str(mlm_run) and saved["embedding_sharing"] == "none"
    assert main(argv[:5] + ["--generator-from", str(tmp_path / "missing")] + argv[7:]) == 2
