"""The multi-task student (BAM): task sampling, the teacher-annealing schedule and its resume, the loss, the saved
model with a head per task, and the seed-level significance tests (a tiny local model, GLUE-format files)."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from electra.app.cli import main
from electra.glue.bam import (
    MultiTaskTraining,
    annealed_lambda,
    annealed_loss,
    example_order,
    task_probabilities,
)
from electra.glue.model import GlueModel, MultiTaskModel, load_encoder
from electra.glue.settings import MultitaskSettings
from electra.glue.significance import bootstrap_p, compare_arms, holm, mann_whitney, min_mann_whitney_p
from electra.glue.tasks import get_task
from electra.training.processes import make_accelerator
from tests.golden_trace import export_word_model
from tests.test_glue_teachers import write_glue

GLUE_TRAIN_SIZES = {"cola": 8551, "sst2": 67349, "mrpc": 2 * 3668, "stsb": 2 * 5749, "rte": 2490}


def test_sampled_task_shares_match_size_to_the_075_within_one_percent():
    sizes = list(GLUE_TRAIN_SIZES.values())
    expected = np.asarray(sizes, dtype=float) ** 0.75 / (np.asarray(sizes, dtype=float) ** 0.75).sum()
    np.testing.assert_allclose(task_probabilities(sizes, 0.75), expected)
    order = example_order(sizes, 1000, seed=3, exponent=0.75)
    drawn = np.asarray([task for _ in range(100) for task, _ in next(order)])  # 10^5 draws
    shares = np.bincount(drawn, minlength=len(sizes)) / drawn.size
    assert np.abs(shares - expected).max() < 0.01, (shares, expected)
    assert shares[1] < 67349 / sum(sizes) - 0.05  # the largest task is sampled below its size share
    uniform = example_order(sizes, 1000, seed=3, exponent=0.0)
    drawn = np.asarray([task for _ in range(100) for task, _ in next(uniform)])
    assert np.abs(np.bincount(drawn) / drawn.size - 0.2).max() < 0.01


def test_each_tasks_stream_and_the_unsampled_epoch_visit_every_example_once():
    order = example_order([7, 5], 6, seed=0, exponent=1.0, sampling=False)
    epoch = [pair for _ in range(2) for pair in next(order)]
    assert sorted(epoch) == [(0, i) for i in range(7)] + [(1, i) for i in range(5)]
    sampled = example_order([50, 3], 10, seed=1, exponent=0.0)
    firsts = [i for _ in range(20) for t, i in next(sampled) if t == 1][:3]
    assert sorted(firsts) == [0, 1, 2]  # a stream gives each example once before reshuffling


def test_the_order_is_a_function_of_the_seed_alone():
    first = example_order([40, 9, 13], 8, seed=5, exponent=0.75)
    second = example_order([40, 9, 13], 8, seed=5, exponent=0.75)
    assert [next(first) for _ in range(30)] == [next(second) for _ in range(30)]
    other = example_order([40, 9, 13], 8, seed=6, exponent=0.75)
    assert [next(other) for _ in range(3)] != [next(example_order([40, 9, 13], 8, 5, 0.75)) for _ in range(3)]


def test_lambda_is_step_over_total_or_fixed():
    assert [annealed_lambda(s, 4) for s in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert annealed_lambda(3, 4, fixed=0.5) == 0.5 and annealed_lambda(0, 4, fixed=0.0) == 0.0


def _student(tmp_path: Path, teacher: bool, fixed: float | None = None):
    """A tiny multi-task student on MRPC-like and STS-B-like data, with random teacher outputs when asked."""
    from transformers import AutoTokenizer

    from electra.glue.bam import student_data
    from electra.glue.inputs import load_task_data
    from electra.glue.settings import FinetuneSettings

    model_dir = tmp_path / "run" / "discriminator"
    if not model_dir.is_dir():
        export_word_model(tmp_path / "run")
        write_glue(tmp_path / "glue")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    settings = FinetuneSettings(max_seq_length=16)
    rng = np.random.default_rng(0)
    tasks = []
    for name in ("mrpc", "stsb"):
        data = load_task_data(get_task(name), tmp_path / "glue", tokenizer, settings)
        outputs = None
        if teacher:
            shape = (len(data.train),) if name == "stsb" else (len(data.train), 2)
            outputs = (rng.normal(size=shape) * 2 + (2.5 if name == "stsb" else 0)).astype(np.float32)
        tasks.append(student_data(data, outputs))
    torch.manual_seed(0)
    model = MultiTaskModel(load_encoder(model_dir), [t.spec for t in tasks]).eval()  # dropout off: comparable
    multi = MultitaskSettings(fixed_lambda=fixed)
    return MultiTaskTraining(model, tasks, multi, 10, 16, 0, 0, make_accelerator()), tasks


def test_with_lambda_one_the_loss_is_plain_multitask_trainings(tmp_path):
    plain, _ = _student(tmp_path, teacher=False)
    taught, tasks = _student(tmp_path, teacher=True, fixed=1.0)
    for step, (a, b) in enumerate(zip(plain.batches(0), taught.batches(0))):
        if step == 3:
            break
        assert "teacher" in b["groups"][0] and "teacher" not in a["groups"][0]
        assert taught.lam(step) == 1.0 and plain.lam(step) == 1.0
        ours, theirs = plain.step(plain.model, a).loss, taught.step(taught.model, b).loss
        assert torch.equal(ours, theirs)
        # ... and both are the textbook losses: cross-entropy and squared error on scores / 5, over the batch
        outputs = plain.model(a["groups"])
        expected = 0.0
        for group, output in zip(a["groups"], outputs):
            if group["task"] == "stsb":
                expected += ((output - group["labels"]) ** 2).sum()
                assert float(group["labels"].max()) <= 1.0  # STS-B's 0-5 scores learnt on [0, 1]
            else:
                expected += torch.nn.functional.cross_entropy(output, group["labels"], reduction="sum")
        torch.testing.assert_close(ours, expected / a["size"], rtol=1e-6, atol=1e-7)


def test_lambda_zero_is_pure_distillation_and_annealing_moves_between():
    spec = get_task("mrpc")
    logits, labels = torch.randn(4, 2), torch.tensor([0, 1, 1, 0])
    teacher = torch.randn(4, 2)
    soft = -(torch.softmax(teacher, -1) * torch.log_softmax(logits, -1)).sum()
    torch.testing.assert_close(annealed_loss(spec, logits, labels, teacher, 0.0), soft)
    hard = torch.nn.functional.cross_entropy(logits, labels, reduction="sum")
    torch.testing.assert_close(annealed_loss(spec, logits, labels, teacher, 0.3), 0.3 * hard + 0.7 * soft)
    stsb = get_task("stsb")
    out, gold, taught = torch.tensor([0.2, 0.9]), torch.tensor([0.0, 1.0]), torch.tensor([0.4, 0.6])
    torch.testing.assert_close(
        annealed_loss(stsb, out, gold, taught, 0.25), ((out - (0.25 * gold + 0.75 * taught)) ** 2).sum()
    )


def test_a_batch_carries_its_update_and_lambda_follows_it_from_any_start(tmp_path):
    student, _ = _student(tmp_path, teacher=True)
    full = [b for _, b in zip(range(8), student.batches(0))]
    resumed = [b for _, b in zip(range(3), student.batches(5))]
    assert [b["step"] for b in resumed] == [5, 6, 7]
    for a, b in zip(full[5:], resumed):  # the same examples in the same groups
        assert [g["task"] for g in a["groups"]] == [g["task"] for g in b["groups"]]
        assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a["groups"], b["groups"]))
    assert [student.lam(b["step"]) for b in resumed] == [0.5, 0.6, 0.7]


def _rows(path: Path) -> dict[int, dict[str, float]]:
    with path.open() as handle:
        return {int(row["step"]): row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def micro(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(model run, data, teachers from `--save-train-logits`) for the end-to-end tests."""
    root = tmp_path_factory.mktemp("multitask")
    export_word_model(root / "run")
    data = write_glue(root / "glue")
    code = main(
        ["glue", "--model", str(root / "run"), "--task", "cola,mrpc,stsb", "--data-dir", str(data), "--max-steps",
         "3", "--max-seq-length", "16", "--save-train-logits", "--output", str(root / "single"), "--no-progress",
         "--report-to", "none"]
    )  # fmt: skip
    assert code == 0
    return root / "run", data, root / "single"


def _multitask(model: Path, data: Path, out: Path, *flags: str) -> int:
    return main(
        ["glue", "--model", str(model), "--task", "cola,mrpc,stsb", "--data-dir", str(data), "--multitask",
         "--multitask-batch-size", "16", "--max-seq-length", "16", "--output", str(out), "--no-progress",
         "--report-to", "csv", *flags]
    )  # fmt: skip


def test_lambda_survives_resume_and_the_resumed_run_is_the_uninterrupted_one(micro, tmp_path):
    model, data, teachers = micro
    flags = ("--teachers", str(teachers), "--max-steps", "6", "--save-every", "3", "--log-every", "1")
    whole = tmp_path / "whole"
    assert _multitask(model, data, whole, *flags) == 0
    logged = _rows(whole / "runs" / "multitask" / "seed-1" / "metrics.csv")
    assert [float(logged[s]["train/lambda"]) for s in range(1, 7)] == pytest.approx([s / 6 for s in range(6)])
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    seed_dir = cut / "runs" / "multitask" / "seed-1"
    shutil.rmtree(seed_dir / "checkpoints" / "step-00000006")  # as if killed after the checkpoint of step 3
    (seed_dir / "checkpoints" / "latest").unlink()
    (seed_dir / "result.json").unlink()
    assert _multitask(model, data, cut, *flags, "--resume") == 0
    again = _rows(seed_dir / "metrics.csv")
    for step in (4, 5, 6):
        assert float(again[step]["train/lambda"]) == pytest.approx(step / 6 - 1 / 6)
        assert float(again[step]["train/loss"]) == pytest.approx(float(logged[step]["train/loss"]), rel=1e-5)
    ours = json.loads((cut / "results.json").read_text())["results"]
    theirs = json.loads((whole / "results.json").read_text())["results"]
    assert ours == theirs


def test_one_model_with_a_head_per_task_and_server_files_for_every_task(micro, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    model, data, teachers = micro
    out = tmp_path / "student"
    flags = ("--teachers", str(teachers), "--max-steps", "4", "--seeds", "2", "--save-best", "--predict-test")
    assert _multitask(model, data, out, *flags) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["multitask"] and set(results["results"]) == {"cola", "mrpc", "stsb"}
    assert all(len(row["seeds"]) == 2 for row in results["results"].values())
    assert results["settings"]["teachers"].keys() == {"cola", "mrpc", "stsb"}
    assert sorted(p.name for p in (out / "glue_test").iterdir()) == ["CoLA.tsv", "MRPC.tsv", "STS-B.tsv"]
    saved = out / "checkpoints" / "multitask"
    assert sorted(p.name for p in saved.iterdir() if p.name.startswith(("model", "README", "config"))) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    assert "MultiTaskModel.from_pretrained" in (saved / "README.md").read_text()
    student = MultiTaskModel.from_pretrained(saved)
    tokenizer = AutoTokenizer.from_pretrained(str(saved))
    encoder = AutoModel.from_pretrained(str(saved)).eval()  # transformers alone loads the shared encoder
    batch = tokenizer(["the module class"], ["the class list"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(
            encoder(**batch).last_hidden_state, student.encoder(**batch).last_hidden_state
        )
    assert student.predict("mrpc", tokenizer, ["the module"], ["the class"])[0] in ("0", "1")
    score = student.predict("stsb", tokenizer, ["the module"], ["the class"])[0]
    # single-task fine-tuning from it (Table 3.3) starts from its task's head, rescaled to 0-5 scores
    single = GlueModel(load_encoder(saved), 1, "stsb", None).eval()
    assert single.load_multitask_head(saved)
    with torch.no_grad():
        assert float(
            single(**tokenizer(["the module"], ["the class"], return_tensors="pt"))[1]
        ) == pytest.approx(score, rel=1e-4, abs=1e-5)


def test_ablation_flags_reach_the_run(micro, tmp_path):
    model, data, teachers = micro
    out = tmp_path / "fixed"
    flags = (
        "--teachers",
        str(teachers),
        "--max-steps",
        "2",
        "--fixed-lambda",
        "0",
        "--no-task-sampling",
        "--layer-decay",
        "1",
        "--log-every",
        "1",
    )
    assert _multitask(model, data, out, *flags) == 0
    settings = json.loads((out / "results.json").read_text())["settings"]
    assert settings["multitask"]["fixed_lambda"] == 0.0 and settings["multitask"]["task_sampling"] is False
    assert settings["layer_decay"] == 1.0 and settings["epochs"] == 6 and settings["batch_size"] == 16
    logged = _rows(out / "runs" / "multitask" / "seed-1" / "metrics.csv")
    assert float(logged[2]["train/lambda"]) == 0.0


def test_significance_tests():
    assert (
        mann_whitney([0.1, 0.2, 0.3], [0.4, 0.5, 0.6])
        == pytest.approx(min_mann_whitney_p(3))
        == pytest.approx(0.1)
    )
    assert mann_whitney([0.1, 0.2, 0.3], [0.1, 0.2, 0.3]) == pytest.approx(1.0)
    assert bootstrap_p([0.1, 0.11, 0.12, 0.1], [0.5, 0.52, 0.51, 0.5]) < 0.01
    assert bootstrap_p([0.1, 0.5, 0.3], [0.2, 0.4, 0.3]) > 0.3
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})

    def arm(values: dict[str, list[float]]) -> dict:
        rows = {
            t: {"task": t, "seed_ids": [1, 2, 3], "seeds": v, "metric": "accuracy"} for t, v in values.items()
        }
        return {"results": rows}

    report = compare_arms(
        {
            "single": arm({"rte": [0.5, 0.55, 0.6], "cola": [0.3, 0.2, 0.25], "wnli": [0.5, 0.5, 0.5]}),
            "multi": arm({"rte": [0.7, 0.75, 0.8], "cola": [0.3, 0.25, 0.2], "wnli": [0.1, 0.1, 0.1]}),
        }
    )
    assert "wnli" not in report["arms"]["single"]  # not averaged, not compared
    assert report["arms"]["single"]["average"]["1"] == pytest.approx(0.4)
    row = report["comparisons"][0]["tasks"]["rte"]
    assert row["difference"] == pytest.approx(0.2) and row["mann_whitney_p"] == pytest.approx(0.1)
    assert math.isclose(report["comparisons"][0]["tasks"]["cola"]["difference"], 0.0, abs_tol=1e-12)
