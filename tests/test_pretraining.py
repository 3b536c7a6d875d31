"""Pretraining through the engine: exact resume after a kill, checkpoints that survive a kill mid-write, refused
resumes, and the FLOP budget."""

import json

import pytest
import torch
from safetensors.torch import load_file

import electra.training.engine as engine_module
from electra.core.errors import UserError
from electra.export.checkpoint import latest_checkpoint
from electra.objectives import build_config
from electra.training.pretraining import RunInputs, pretrain
from electra.training.run_log import read_metrics
from tests.conftest import killed_after_checkpoint


def _run(corpus, out, cache, overrides, resume=False):
    config = build_config("tiny", overrides=overrides)
    return pretrain(
        config, RunInputs(corpus=str(corpus), output_dir=out, cache_dir=str(cache), num_proc=1, resume=resume)
    )


def _weights(run_dir):
    return load_file(str(latest_checkpoint(run_dir / "checkpoints") / "model.safetensors"))


def test_resume_after_a_kill_matches_an_uninterrupted_run(
    distinct_corpus, tmp_path, micro_overrides, monkeypatch, capsys
):
    """On a corpus where every example differs, so a resume that starts at another batch trains on other text."""
    small_corpus = distinct_corpus
    cache = tmp_path / "cache"
    micro_overrides = {**micro_overrides, "log_every": 1}
    _run(small_corpus, tmp_path / "straight", cache, micro_overrides)

    with killed_after_checkpoint(monkeypatch, 3), pytest.raises(KeyboardInterrupt):
        _run(small_corpus, tmp_path / "killed", cache, micro_overrides)
    with pytest.raises(UserError, match="--resume"):
        _run(small_corpus, tmp_path / "killed", cache, micro_overrides)
    result = _run(small_corpus, tmp_path / "killed", cache, micro_overrides, resume=True)
    assert result.step == 6

    straight, resumed = _weights(tmp_path / "straight"), _weights(tmp_path / "killed")
    assert straight.keys() == resumed.keys()
    for name in straight:
        assert (straight[name] == resumed[name]).all(), name
    rows = lambda d: [(r["step"], r["loss"]) for r in read_metrics(d)]  # noqa: E731
    assert rows(tmp_path / "straight") == rows(tmp_path / "killed")

    # Resuming the finished run has nothing to do, and must not rewrite its summary and cards from an invocation
    # that trained nothing (they had lost every metric).
    finished = {name: (tmp_path / "killed" / name).read_bytes() for name in ("summary.json", "README.md")}
    assert "loss" in json.loads(finished["summary.json"])
    log_written = (tmp_path / "killed" / "metrics.csv").stat().st_mtime_ns
    capsys.readouterr()
    again = _run(small_corpus, tmp_path / "killed", cache, micro_overrides, resume=True)
    assert (again.step, again.trained) == (6, False)  # the CLI draws no curves.png for it
    assert "--init-from" in capsys.readouterr().out  # the hint names what trains it further, not --max-steps
    assert {name: (tmp_path / "killed" / name).read_bytes() for name in finished} == finished
    assert (tmp_path / "killed" / "metrics.csv").stat().st_mtime_ns == log_written  # had been rewritten


def test_a_kill_during_a_save_keeps_the_previous_checkpoint(
    small_corpus, tmp_path, micro_overrides, monkeypatch
):
    import electra.export.checkpoint as checkpoint_module

    real = checkpoint_module.save_model
    calls = {"n": 0}

    def dies_on_second_save(model, path, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            with open(path, "wb") as handle:
                handle.write(b"half a file")
            raise KeyboardInterrupt("killed while writing")
        return real(model, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "save_model", dies_on_second_save)
    with pytest.raises(KeyboardInterrupt):
        _run(small_corpus, tmp_path / "run", tmp_path / "cache", micro_overrides)
    latest = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert latest.name == "step-00000003"
    load_file(str(latest / "model.safetensors"))  # intact
    monkeypatch.setattr(checkpoint_module, "save_model", real)
    assert _run(small_corpus, tmp_path / "run", tmp_path / "cache", micro_overrides, resume=True).step == 6


def test_resume_refuses_a_different_config(small_corpus, tmp_path, micro_overrides):
    _run(small_corpus, tmp_path / "run", tmp_path / "cache", {**micro_overrides, "max_steps": 3})
    saved = micro_overrides["hidden_size"]
    with pytest.raises(UserError, match=rf"in hidden_size \(saved {saved}, now 64\); rerun with the saved"):
        _run(
            small_corpus,
            tmp_path / "run",
            tmp_path / "cache",
            {**micro_overrides, "max_steps": 3, "hidden_size": 64},
            resume=True,
        )


def test_flops_budget_stops_within_one_step(small_corpus, tmp_path, micro_overrides):
    budget = 1e9
    result = _run(
        small_corpus,
        tmp_path / "run",
        tmp_path / "cache",
        {**micro_overrides, "max_steps": 1000, "flops_budget": budget},
    )
    flops = result.metrics["flops"]
    per_step = flops / result.step
    assert result.stop_reason == "flops_budget"
    assert budget <= flops < budget + per_step  # stopped at the first step that spent the budget
    assert 1 < result.step < 1000
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "flops_budget"
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == f"step-{result.step:08d}"
    assert (tmp_path / "run" / "discriminator" / "model.safetensors").is_file()


def test_resuming_a_spent_flops_budget_trains_nothing(small_corpus, tmp_path, micro_overrides, capsys):
    """Before: each such resume trained one more step past the budget and rewrote the exports and the card."""
    settings = {**micro_overrides, "max_steps": 1000, "flops_budget": 1e9}
    first = _run(small_corpus, tmp_path / "run", tmp_path / "cache", settings)
    finished = {name: (tmp_path / "run" / name).read_bytes() for name in ("summary.json", "README.md")}
    capsys.readouterr()
    for budget in (1e9, 5e8):
        again = _run(
            small_corpus, tmp_path / "run", tmp_path / "cache", {**settings, "flops_budget": budget}, True
        )
        assert (again.step, again.stop_reason) == (first.step, "flops_budget")
        assert "nothing to do (raise --flops-budget to train further)" in capsys.readouterr().out
    assert {name: (tmp_path / "run" / name).read_bytes() for name in finished} == finished
    assert [row["step"] for row in read_metrics(tmp_path / "run")][-1] == first.step


def test_resume_refuses_another_corpus_vocabulary_or_process_count(small_corpus, tmp_path, micro_overrides):
    """Before: a changed --corpus retrained the vocabulary and continued with token ids that meant other words."""
    cache = tmp_path / "cache"
    run = tmp_path / "run"
    _run(small_corpus, run, cache, {**micro_overrides, "max_steps": 3})
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("Entirely different words fill this corpus. " * 200)
    with pytest.raises(UserError, match="is not the one .* trained on"):
        _run(other, run, cache, {**micro_overrides, "max_steps": 3}, resume=True)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    config = build_config("tiny", overrides={**micro_overrides, "max_steps": 3})
    inputs = RunInputs(
        corpus=str(small_corpus), output_dir=run, cache_dir=str(cache), resume=True, vocab=str(vocab)
    )
    with pytest.raises(UserError, match="is not the vocabulary"):
        pretrain(config, inputs)
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(record, world_size=2)))
    with pytest.raises(UserError, match="trained with 2 process.*this launch has 1"):
        _run(small_corpus, run, cache, {**micro_overrides, "max_steps": 3}, resume=True)
    (run / "run.json").write_text(json.dumps(record))
    assert _run(small_corpus, run, cache, {**micro_overrides, "max_steps": 3}, resume=True).step == 3


def test_a_flop_budget_sizes_the_schedule(small_corpus, tmp_path, micro_overrides):
    """Before: --flops-budget only stopped the run: mid-warmup, with the progress bar at 6/600. Now the steps the
    budget buys are the run's max_steps, the warmup a tenth of them, and the learning rate reaches 0 at the end."""
    from electra.app.cli import main
    from electra.objectives import flop_report

    overrides = {k: v for k, v in micro_overrides.items() if k not in ("max_steps", "warmup_steps")}
    flags = [f"--set={k}={v}" for k, v in {**overrides, "log_every": 1, "warmup_steps": 500}.items()]
    out = tmp_path / "run"
    argv = [
        "pretrain",
        "--corpus",
        str(small_corpus),
        "--output",
        str(out),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    flags = [f for f in flags if "warmup_steps" not in f]
    assert main([*argv, *flags, "--flops-budget", "1e9", "--no-plot"]) == 0
    saved = json.loads((out / "config.json").read_text())
    per_step = flop_report(build_config("tiny", overrides={**overrides, "vocab_size": saved["vocab_size"]}))
    steps = -(-1e9 // per_step.train_flops_per_step)
    assert saved["max_steps"] == steps and saved["warmup_steps"] == max(1, int(steps) // 10)
    rows = read_metrics(out)
    assert rows[-1]["step"] == steps and rows[-1]["learning_rate"] == 0.0
    assert json.loads((out / "summary.json").read_text())["stop_reason"] in ("max_steps", "flops_budget")


def test_held_out_evaluation_is_logged_and_leaves_training_alone(small_corpus, tmp_path, micro_overrides):
    """A slice of the examples is held out; the objective's metrics on it are logged as eval/... every eval_every
    steps and at the end, with fixed masks, and without touching the training run's random stream."""
    cache = tmp_path / "cache"
    quiet = _run(
        small_corpus, tmp_path / "a", cache, {**micro_overrides, "eval_fraction": 0.1, "eval_every": 0}
    )
    loud = _run(
        small_corpus, tmp_path / "b", cache, {**micro_overrides, "eval_fraction": 0.1, "eval_every": 2}
    )
    evals = read_metrics(tmp_path / "b", "eval")
    assert [row["step"] for row in evals] == [2, 4, 6]
    assert {"loss", "discriminator_auc", "generator_accuracy"} <= set(evals[0])
    assert (
        evals[-1]["generator_loss"] < evals[0]["generator_loss"]
    )  # the generator learns the held-out text too
    assert [row["step"] for row in read_metrics(tmp_path / "a", "eval")] == [6]  # at the end only
    a = load_file(str(tmp_path / "a" / "discriminator" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "discriminator" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a) and quiet.metrics["loss"] == loud.metrics["loss"]


def test_exports_carry_model_cards_that_state_the_run_and_load(small_corpus, tmp_path, micro_overrides):
    """RUN/README.md and one card per part: objective, corpus fingerprint, steps, FLOPs, final metrics, and a code
    block that really loads the part (it is executed here)."""
    out = tmp_path / "run"
    result = _run(small_corpus, out, tmp_path / "cache", {**micro_overrides, "eval_fraction": 0.1})
    summary = json.loads((out / "summary.json").read_text())
    record = json.loads((out / "run.json").read_text())
    for card_path in (
        out / "README.md",
        out / "discriminator" / "README.md",
        out / "generator" / "README.md",
    ):
        card = card_path.read_text()
        assert card.startswith("---\nlibrary_name: transformers\n")
        assert "`electra`: replaced-token detection" in card
        assert record["corpus_sample"][:16] in card and record["tokenizer_sha256"][:16] in card
        assert f"| steps | {result.step:,} of {result.step:,} (stopped by max_steps) |" in card
        assert f"{summary['flops']:.3g} training FLOPs" in card
        assert f"| train/generator_loss | {summary['generator_loss']:.4g} |" in card
        assert "| eval/discriminator_auc |" in card
    generator_card = (out / "generator" / "README.md").read_text()
    assert "pipeline_tag: fill-mask" in generator_card
    for part, loaded in (("discriminator", "discriminator"), ("generator", "fill")):
        card = (out / part / "README.md").read_text()
        code = card.split("```python\n")[1].split("```")[0]
        namespace: dict = {}
        exec(code.replace("print(", "len("), namespace)  # the card's own instructions, as a reader runs them
        assert loaded in namespace
    scope: dict = {}
    exec((out / "README.md").read_text().split("```python\n")[1].split("```")[0], scope)
    assert type(scope["discriminator"]).__name__ == "ElectraForPreTraining"


def test_pretraining_logs_mfu_from_its_measured_forward(small_corpus, tmp_path, micro_overrides, monkeypatch):
    """MFU = tokens/s x (3 x the start-up check's measured forward per token) / the matmul peak, in every logged
    row and on the model card; the peak is pinned here so the figure can be recomputed exactly."""
    monkeypatch.setattr(engine_module, "cached_matmul_peak", lambda device, dtype: 5.0e9)
    out = tmp_path / "run"
    _run(small_corpus, out, tmp_path / "cache", {**micro_overrides, "log_every": 2})
    summary = json.loads((out / "summary.json").read_text())
    check = summary["flop_counter_check"]
    per_token = 3.0 * check["measured_forward"] / (check["batch_size"] * check["seq_len"])
    rows = read_metrics(out)
    assert len(rows) == 3
    for row in rows:
        assert row["mfu"] == pytest.approx(row["tokens_per_second"] * per_token / 5.0e9)
    assert f"MFU {summary['mfu']:.1%} in the last logged window" in (out / "README.md").read_text()
