"""TARTAN: META-TARTAN's weight update against the formula, the surrogate that hands the engine Σ w_i ∇L_i, the
uniform (MT-TARTAN) weighting, `electra tartan` end to end (weights CSV and plot, resume, early stopping) and its
one-line refusals."""

# ruff: noqa: F811  (pytest fixtures imported from test_tlm_train / test_tartan are parameters here)
from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from electra.app.cli import main
from electra.core.config_files import parse_overrides
from electra.data.tokenization import load_or_train_tokenizer
from electra.objectives import build_config
from electra.tlm.joint import JointTask
from electra.tlm.model import build_models
from electra.tlm.tartan import LossScales, MetaWeights, combine, fixed_weights, surrogate_loss
from electra.tlm.train import read_loss_log, train_tlm
from electra.training.model import build_pretraining_model
from tests.conftest import killed_after_checkpoint

from .test_tlm_train import SMALL, _cache, _settings, data, retrieved  # noqa: F401  (shared fixtures)

NO_DROPOUT = ["hidden_dropout_prob=0", "attention_probs_dropout_prob=0"]


@pytest.fixture(scope="module")
def start_dir(data, tmp_path_factory) -> Path:
    """A micro ELECTRA export (generator included) with its own WordPiece vocabulary: what `--init-from` takes."""
    tokenizer = load_or_train_tokenizer(
        None, data / "corpus", 300, True, cache_dir=tmp_path_factory.mktemp("tok")
    )
    config = build_config("tiny", overrides={**parse_overrides(SMALL), "vocab_size": len(tokenizer)})
    torch.manual_seed(0)
    model = build_pretraining_model(config, tokenizer)
    out = tmp_path_factory.mktemp("tartan-start") / "export"
    model.export(out, tokenizer)
    return out


def test_meta_weight_update_equals_the_formula():
    weights = MetaWeights(["task", "lm_internal", "lm_external"], lr=0.5)
    assert weights.weights().tolist() == pytest.approx([1 / 3] * 3)
    g_meta = torch.tensor([1.0, 0.0, 0.0])
    grads = [torch.tensor([1.0, 1.0, 0.0]), torch.tensor([-2.0, 0.0, 0.0]), torch.tensor([0.0, 3.0, 4.0])]
    cosines = weights.update(g_meta, grads)
    assert cosines.tolist() == pytest.approx([1 / math.sqrt(2), -1.0, 0.0])
    logits = [0.5 / math.sqrt(2), -0.5, 0.0]
    assert weights.logits.tolist() == pytest.approx(logits)
    total = sum(math.exp(x) for x in logits)
    assert weights.weights().tolist() == pytest.approx([math.exp(x) / total for x in logits])
    # A second step adds to the logits; a zero gradient has cosine 0 and leaves its logit alone.
    weights.update(torch.tensor([0.0, 1.0, 0.0]), [grads[0], torch.zeros(3), grads[2]])
    assert weights.logits.tolist() == pytest.approx([logits[0] + 0.5 / math.sqrt(2), -0.5, 0.5 * 0.6])
    restored = MetaWeights(weights.terms, lr=0.5)
    restored.load_state_dict(json.loads(json.dumps(weights.state_dict())))
    assert restored.logits.tolist() == weights.logits.tolist()


def test_fixed_weights():
    assert fixed_weights("uniform", ["task", "lm_internal"], rho2=20.0) == {"task": 0.5, "lm_internal": 0.5}
    assert fixed_weights("tlm", ["task", "lm_internal", "lm_external"], rho2=20.0) == {
        "task": 1.0,
        "lm_internal": 20.0,
        "lm_external": 1.0,
    }


def test_balanced_losses_divide_each_term_by_its_running_mean():
    scales = LossScales(momentum=0.5)
    first = scales.divide({"task": torch.tensor(2.0), "lm_internal": torch.tensor(30.0)})
    assert {k: float(v) for k, v in first.items()} == {"task": 1.0, "lm_internal": 1.0}
    second = scales.divide({"task": torch.tensor(1.0, requires_grad=True), "lm_internal": torch.tensor(10.0)})
    # means: task 0.5*2 + 0.5*1 = 1.5, LM 0.5*30 + 0.5*10 = 20; the division keeps the gradient path
    assert float(second["task"]) == pytest.approx(1 / 1.5) and float(second["lm_internal"]) == pytest.approx(
        0.5
    )
    assert second["task"].requires_grad
    restored = LossScales()
    restored.load_state_dict(json.loads(json.dumps(scales.state_dict())))
    assert {k: float(v) for k, v in restored.means.items()} == {"task": 1.5, "lm_internal": 20.0}


def test_balanced_uniform_training_weighs_the_terms_at_scale_one(data, retrieved, start_dir, tmp_path):
    train_tlm(
        _settings(
            data,
            tmp_path / "bal",
            objective="electra",
            rho1=1,
            rho2=1.0,
            steps=1,
            finetune_epochs=0,
            weighting="uniform",
            balance_losses=True,
            init_from=str(start_dir),
            overrides={},
        )
    )
    (row,) = read_loss_log(tmp_path / "bal" / "stage1")
    assert row["loss"] == pytest.approx(1.0, rel=1e-5)  # step 1: every term divided by itself, weights 1/3
    assert row["lm_internal"] > 5 * row["task"]  # the raw terms are logged as they are


def test_surrogate_gradient_is_the_weighted_sum_of_the_terms():
    torch.manual_seed(0)
    layer = nn.Linear(4, 3)
    x1, x2 = torch.randn(5, 4), torch.randn(7, 4)
    params = list(layer.parameters())
    losses = {"a": layer(x1).pow(2).mean(), "b": layer(x2).sin().sum()}
    grads = {k: torch.autograd.grad(v, params) for k, v in losses.items()}
    weights = {"a": 0.3, "b": 0.7}
    surrogate_loss(params, combine(grads, weights, len(params))).backward()
    for index, p in enumerate(params):
        expected = 0.3 * grads["a"][index] + 0.7 * grads["b"][index]
        torch.testing.assert_close(p.grad, expected)


def test_a_meta_step_hands_the_engine_the_weighted_gradient(data, start_dir):
    """On a dropout-free micro model: the gradient the engine's backward produces from the step's loss equals
    Σ softmax(w)_i ∇L_i with the weights that step logged, each ∇L_i recomputed independently."""
    from electra.data.tokenization import load_saved_tokenizer
    from electra.tlm.task_data import TaskCollator, encode_task
    from electra.tlm.tasks import LabelVocab, read_task_file

    tokenizer = load_saved_tokenizer(start_dir / "discriminator")
    config = build_config("tiny", overrides={**parse_overrides(SMALL + NO_DROPOUT), "objective": "mlm"})
    examples = read_task_file(data / "train.tsv")
    labels = LabelVocab.from_examples(examples, "train")
    rows = encode_task(examples[:8], labels.encode(examples[:8], "train"), tokenizer, 64)
    collate = TaskCollator(tokenizer.pad_token_id)
    torch.manual_seed(1)
    model = build_models(config, tokenizer, labels, "mlm", str(start_dir), meta_head=True)
    plan = dict(rho1=0, rho2=1.0, weighting="meta", meta_lr=0.3, meta_head_steps=2, meta_head_lr=0.1, world=1)
    task = JointTask(model, rows, None, plan, counter=None, dev_rows=rows)
    batch, dev = collate(rows[:4]), collate(rows[4:])

    torch.manual_seed(7)
    output = task.step(model, (batch, [], dev))
    output.loss.backward()
    weights = dict(zip(task.terms, task.meta.history[-1]))
    assert task.terms == ["task", "lm_internal"] and sum(weights.values()) == pytest.approx(1.0)
    assert output.metrics["loss"].item() == pytest.approx(
        sum(weights[t] * output.metrics[t].item() for t in task.terms)
    )

    params = [p for p in model.parameters() if p.requires_grad]
    engine_grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    model.zero_grad()
    torch.manual_seed(7)  # the same masking as the step's
    terms, _ = model.losses(batch, [], True)
    expected = [torch.zeros_like(p) for p in params]
    for name in task.terms:
        for index, grad in enumerate(torch.autograd.grad(terms[name], params, allow_unused=True)):
            if grad is not None:
                expected[index] += weights[name] * grad
    for got, want in zip(engine_grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert all(not p.requires_grad for p in model.meta_head.parameters())  # never in the engine's optimizer


def test_uniform_weighting_averages_the_terms(data, retrieved, start_dir, tmp_path):
    train_tlm(
        _settings(
            data,
            tmp_path / "mt",
            objective="electra",
            rho1=1,
            rho2=1.0,
            steps=3,
            finetune_epochs=0,
            weighting="uniform",
            init_from=str(start_dir),
            overrides={},
        )
    )
    for row in read_loss_log(tmp_path / "mt" / "stage1"):
        mean = (row["task"] + row["lm_internal"] + row["lm_external"]) / 3
        assert row["loss"] == pytest.approx(mean, rel=1e-5)


def _tartan(data, start_dir, out, *extra) -> list[str]:
    return [
        "tartan",
        "--init-from",
        str(start_dir),
        "--task-train",
        str(data / "train.tsv"),
        "--task-dev",
        str(data / "dev.tsv"),
        "--task-test",
        str(data / "test.tsv"),
        "--out",
        str(out),
        "--batch-size",
        "8",
        "--learning-rate",
        "1e-3",
        "--no-progress",
        *extra,
    ]


def test_meta_tartan_cli_logs_weights_every_step_and_resumes(
    data, retrieved, start_dir, tmp_path, monkeypatch
):

    extra = ["--aux", "tapt,dapt", "--dapt-corpus", str(retrieved), "--weighting", "meta"]
    extra += ["--steps", "4", "--eval-every", "2", "--save-every", "2"]
    assert main(_tartan(data, start_dir, tmp_path / "straight", *extra)) == 0
    stage1 = tmp_path / "straight" / "stage1"
    rows = list(csv.DictReader((stage1 / "task_weights.csv").read_text().splitlines()))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    assert all(
        sum(float(r[k]) for k in ("task", "lm_internal", "lm_external")) == pytest.approx(1, abs=1e-5)
        for r in rows
    )
    # The figure is drawn, not just written: a decodable image with each of the three weight curves in its own
    # colour of matplotlib's cycle (a blank figure, or one that drew one term, lacks some of them).
    import numpy as np
    from matplotlib import colors, rcParams
    from matplotlib.image import imread

    pixels = imread(stage1 / "task_weights.png")[..., :3]
    assert pixels.shape[0] >= 300 and pixels.shape[1] >= 400, pixels.shape
    cycle = [colors.to_rgb(c) for c in rcParams["axes.prop_cycle"].by_key()["color"][:3]]
    drawn = [int((np.abs(pixels - np.asarray(c)).max(-1) < 0.06).sum()) for c in cycle]
    assert min(drawn) > 50, drawn  # pixels of each curve's colour
    results = json.loads((tmp_path / "straight" / "results.json").read_text())
    assert results["weighting"] == "meta" and results["init_from"] == str(start_dir)
    assert set(results["dev"]) == {"accuracy", "macro_f1"}
    evaluations = [r for r in read_loss_log_eval(stage1)]
    assert [e["step"] for e in evaluations] == [0, 2, 4]  # the starting weights compete too

    with killed_after_checkpoint(monkeypatch, 2):
        assert main(_tartan(data, start_dir, tmp_path / "killed", *extra)) == 130  # interrupted
    assert not (tmp_path / "killed" / "results.json").exists()
    assert main(_tartan(data, start_dir, tmp_path / "killed", *extra, "--resume")) == 0
    resumed = (tmp_path / "killed" / "stage1" / "task_weights.csv").read_text()
    assert resumed == (stage1 / "task_weights.csv").read_text()
    assert json.loads((tmp_path / "killed" / "results.json").read_text())["test"] == results["test"]


def read_loss_log_eval(stage_dir: Path) -> list[dict]:
    from electra.training.run_log import read_metrics

    return read_metrics(stage_dir, "eval")


def test_tartan_refuses_bad_input_in_one_line(data, retrieved, start_dir, tmp_path, capsys):
    def refused(argv: list[str], needle: str) -> None:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err

    out = tmp_path / "run"
    refused(_tartan(data, start_dir, out, "--aux", "dapt"), "--dapt-corpus")
    refused(_tartan(data, start_dir, out, "--aux", "mlm"), "not one of tapt, dapt")
    refused(_tartan(data, start_dir, out, "--aux", " , "), "names no auxiliary")
    refused(_tartan(data, start_dir, out, "--aux", "tapt", "--aux-objective", "foo"), "--aux-objective 'foo'")
    refused(_tartan(data, start_dir, out, "--aux", "none", "--weighting", "meta"), "at least one auxiliary")
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a"]) + "\n")
    refused(
        _tartan(data, start_dir, out, "--vocab", str(other_vocab), "--steps", "1"),
        "differs from the vocabulary",
    )
    bad_dev = tmp_path / "dev.tsv"
    bad_dev.write_text((data / "dev.tsv").read_text() + "some words here\tweather\n")
    argv = _tartan(data, start_dir, out, "--steps", "1")
    argv[argv.index(str(data / "dev.tsv"))] = str(bad_dev)
    refused(argv, "never uses")
    empty = tmp_path / "empty-corpus"
    empty.mkdir()
    (empty / "blank.txt").write_text("\n\n")
    refused(
        _tartan(data, start_dir, out, "--aux", "tapt,dapt", "--dapt-corpus", str(empty), "--steps", "1"),
        "empty",
    )
    # Inputs are read before the output gets a file: none of the refusals above left a run behind to clear.
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    # A finished run is never overwritten without --overwrite.
    assert main(_tartan(data, start_dir, out, "--steps", "1", "--eval-every", "1")) == 0
    capsys.readouterr()  # the run's own lines (--no-progress logs each step)
    before = (out / "results.json").read_text()
    refused(_tartan(data, start_dir, out, "--steps", "2"), "--overwrite")
    assert (out / "results.json").read_text() == before
    shutil.rmtree(out)


def test_tlm_texts_writes_a_task_corpus(data, tmp_path, capsys):
    assert main(["tlm", "texts", "--task", str(data / "train.tsv"), "--out", str(tmp_path / "tapt")]) == 0
    text = (tmp_path / "tapt" / "corpus" / "task_texts.txt").read_text()
    assert len([d for d in text.split("\n\n") if d.strip()]) == 96
    assert "\t" not in text  # the label column is not text
    assert main(["tlm", "texts", "--task", str(data / "train.tsv"), "--out", str(tmp_path / "tapt")]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_a_run_killed_after_its_training_tests_the_best_state_on_resume(
    data, retrieved, start_dir, tmp_path, monkeypatch
):
    """Before: killed once training had finished (while testing, or in stage 2 before its first checkpoint),
    `--resume` loaded the last checkpoint's weights, not the best dev state the run had kept, and results.json
    reported other dev and test numbers than the uninterrupted run's (here dev accuracy 0.13 instead of 0.47)."""
    import electra.tlm.train as train_module

    extra = ["--aux", "tapt", "--steps", "8", "--eval-every", "2", "--save-every", "2"]

    def tartan(out: Path, *more: str) -> int:
        argv = _tartan(data, start_dir, out, *extra, *more)
        argv[argv.index("--learning-rate") + 1] = "5e-2"  # high enough that the last step is not the best
        return main(argv)

    assert tartan(tmp_path / "straight") == 0
    straight = json.loads((tmp_path / "straight" / "results.json").read_text())
    best = json.loads((tmp_path / "straight" / "stage1" / "result.json").read_text())["best"]
    assert best["step"] < 8  # the case this test is about: the best state is not the last one
    real_write = train_module.write_json_atomically

    def die_before_results(path, *args, **kwargs):
        if Path(path).name == "results.json":
            raise KeyboardInterrupt("killed while testing")
        real_write(path, *args, **kwargs)

    monkeypatch.setattr(train_module, "write_json_atomically", die_before_results)
    assert tartan(tmp_path / "killed") == 130
    assert (tmp_path / "killed" / "stage1" / "result.json").is_file()  # training had finished
    monkeypatch.setattr(train_module, "write_json_atomically", real_write)
    assert tartan(tmp_path / "killed", "--resume") == 0
    resumed = json.loads((tmp_path / "killed" / "results.json").read_text())
    for key in ("stage1_steps", "stage1_dev", "dev", "test"):
        assert resumed[key] == straight[key], key
