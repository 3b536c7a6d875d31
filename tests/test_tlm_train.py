"""TLM training: the ρ1 batch schedule, the joint loss and its logged parts, the FLOP budget, the CLI end to end."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from electra.app.cli import main
from electra.core.errors import UserError
from electra.tlm.evaluation import classification_metrics
from electra.tlm.interleave import interleave
from electra.tlm.model import LOSS_PARTS
from electra.tlm.settings import TLMSettings
from electra.tlm.train import read_loss_log, train_tlm
from tests.conftest import killed_after_checkpoint

TOPICS = {
    "sports": "team coach goal match season player league score win cup".split(),
    "money": "bank market stock price shares profit trade rate investor fund".split(),
    "tech": "software computer chip internet phone data network code device app".split(),
}
COMMON = "the a of in on with and for today new said after".split()
# A model small enough that a few dozen CPU steps take seconds.
SMALL = [
    "tokenizer_vocab_size=300",
    "num_hidden_layers=1",
    "hidden_size=64",
    "intermediate_size=128",
    "embedding_size=32",
    "max_seq_length=64",
    "log_every=1",
    "learning_rate=2e-3",
    "warmup_steps=0",
]


def _sentence(rng: random.Random, topic: str, n: int = 12) -> str:
    return " ".join(rng.choice(TOPICS[topic] + COMMON) for _ in range(n)) + "."


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A keyword-topic task (three labels) and a general corpus of topical paragraphs."""
    root = tmp_path_factory.mktemp("tlm")
    rng = random.Random(0)
    for split, n in (("train", 96), ("dev", 30), ("test", 30)):
        rows = [(t, _sentence(rng, t)) for t in (rng.choice(list(TOPICS)) for _ in range(n))]
        (root / f"{split}.tsv").write_text("".join(f"{text}\t{label}\n" for label, text in rows))
    (root / "corpus").mkdir()
    paragraphs = [" ".join(_sentence(rng, rng.choice(list(TOPICS))) for _ in range(4)) for _ in range(200)]
    (root / "corpus" / "general.txt").write_text("\n\n".join(paragraphs) + "\n")
    return root


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ELECTRA_CACHE", str(tmp_path_factory.getbasetemp() / "electra-cache"))


def test_interleave_follows_rho1_exactly():
    steps = list(interleave(range(4), iter(range(100)), rho1=3))
    assert steps == [(0, [0, 1, 2]), (1, [3, 4, 5]), (2, [6, 7, 8]), (3, [9, 10, 11])]
    # The schedule stops when external data runs out instead of sending a short group.
    assert list(interleave(range(4), iter(range(7)), rho1=3)) == [(0, [0, 1, 2]), (1, [3, 4, 5])]
    assert list(interleave("ab", iter(()), rho1=0)) == [("a", []), ("b", [])]


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"rho1": -1}, "rho1 must be a whole number, at least 0, got -1"),
        ({"rho1": 1.5}, "rho1 must be a whole number, at least 0, got 1.5"),
        ({"rho2": -0.5}, "rho2 must be at least 0, got -0.5"),
        ({"meta_lr": 0.0}, "meta_lr must be positive, got 0.0"),
        ({"objective": "xlnet"}, "--objective 'xlnet' is not one of electra, "),
        ({"weighting": "sum"}, "--weighting 'sum' is not one of tlm, uniform, meta."),
        ({"metric": "loss"}, "--metric 'loss' is not macro_f1 or accuracy."),
    ],
)
def test_settings_are_checked_once_where_they_are_built(setting, message):
    """`TLMSettings` is the one check of the task-aware settings (the interleaving, the weights and the training
    below it trust them): a bad one is refused in one line as the settings are built, before any work."""
    tasks = {"task_train": "t", "task_dev": "d", "task_test": "e", "out": "o"}
    with pytest.raises(UserError) as refused:
        TLMSettings(**tasks, **setting)
    assert message in str(refused.value) and len(str(refused.value).splitlines()) == 1


def test_classification_metrics_by_hand():
    # Class 0: P=1/2 R=1 F1=2/3; class 1: P=1 R=1/2 F1=2/3; class 2: never predicted nor present -> 0.
    metrics = classification_metrics([0, 0, 1], [0, 1, 1], num_labels=2)
    assert metrics["accuracy"] == pytest.approx(2 / 3)
    assert metrics["macro_f1"] == pytest.approx(2 / 3)


def _settings(data: Path, out: Path, **kw) -> TLMSettings:
    from electra.core.config_files import parse_overrides

    base = dict(
        task_train=str(data / "train.tsv"),
        task_dev=str(data / "dev.tsv"),
        task_test=str(data / "test.tsv"),
        out=str(out),
        retrieved=str(data / "retrieved"),
        size="tiny",
        overrides=parse_overrides(SMALL),
        batch_size=8,
        finetune_epochs=1,
        progress=False,
    )
    base.update(kw)
    return TLMSettings(**base)


@pytest.fixture(scope="module")
def retrieved(data) -> Path:
    code = main(
        [
            "tlm",
            "retrieve",
            "--corpus",
            str(data / "corpus"),
            "--task-train",
            str(data / "train.tsv"),
            "--top-k",
            "3",
            "--out",
            str(data / "retrieved"),
        ]
    )
    assert code == 0
    return data / "retrieved"


def test_retrieve_cli_reuses_its_index(data, retrieved):
    meta = retrieved / "index" / "tlm_index.json"
    before = meta.stat().st_mtime_ns
    assert (
        main(
            [
                "tlm",
                "retrieve",
                "--overwrite",
                "--corpus",
                str(data / "corpus"),
                "--task-train",
                str(data / "dev.tsv"),
                "--top-k",
                "2",
                "--out",
                str(retrieved),
            ]
        )
        == 0
    )
    assert meta.stat().st_mtime_ns == before  # the same corpus: index loaded, not rebuilt
    summary = json.loads((retrieved / "summary.json").read_text())
    assert summary["queries"] == 30 and 0 < summary["retrieved_passages"] <= 60
    # Leave the training corpus as the train queries retrieved it for the tests below.
    assert (
        main(
            [
                "tlm",
                "retrieve",
                "--overwrite",
                "--corpus",
                str(data / "corpus"),
                "--task-train",
                str(data / "train.tsv"),
                "--top-k",
                "3",
                "--out",
                str(retrieved),
            ]
        )
        == 0
    )


def test_joint_training_logs_every_part_and_combines_them(data, retrieved, tmp_path):
    results = train_tlm(_settings(data, tmp_path / "run", objective="electra", rho1=2, rho2=0.5, steps=6))
    rows = read_loss_log(tmp_path / "run" / "stage1")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    for row in rows:
        assert set(LOSS_PARTS) <= set(row)
        assert min(row["task"], row["lm_internal"], row["lm_external"]) > 0
        assert row["loss"] == pytest.approx(
            row["task"] + 0.5 * row["lm_internal"] + row["lm_external"], rel=1e-4
        )
    flops = [r["flops"] for r in rows]
    assert all(b > a for a, b in zip(flops, flops[1:]))
    assert results["stage1_steps"] == 6 and results["flop_source"] == "electra.flops.analytic"
    # The saved classifier reproduces the reported test metrics (the best-dev state was saved, then tested).
    import torch
    from transformers import AutoTokenizer, ElectraForSequenceClassification

    from electra.tlm.tasks import read_task_file

    model = ElectraForSequenceClassification.from_pretrained(str(tmp_path / "run" / "model")).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "run" / "model"))
    examples = read_task_file(data / "test.tsv")
    with torch.no_grad():
        logits = model(**tokenizer([e.text for e in examples], padding=True, return_tensors="pt")).logits
    gold = [model.config.label2id[e.label] for e in examples]
    assert classification_metrics(logits.argmax(-1).tolist(), gold, 3) == pytest.approx(results["test"])
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["test"] == results["test"]


def test_flop_budget_stops_stage_one(data, retrieved, tmp_path):
    budget = 3e9
    results = train_tlm(
        _settings(
            data,
            tmp_path / "b",
            objective="mlm",
            rho1=1,
            rho2=1.0,
            steps=1000,
            flops_budget=budget,
            finetune_epochs=0,
        )
    )
    rows = read_loss_log(tmp_path / "b" / "stage1")
    assert rows[-1]["flops"] >= budget > rows[-2]["flops"]
    assert results["stage1_steps"] == len(rows) < 1000


def test_task_only_baseline_learns_the_task(data, tmp_path):
    results = train_tlm(
        _settings(data, tmp_path / "none", objective="none", retrieved=None, steps=60, finetune_epochs=2)
    )
    rows = read_loss_log(tmp_path / "none" / "stage1")
    assert all(r["lm_internal"] == 0 and r["lm_external"] == 0 and r["loss"] == r["task"] for r in rows)
    first, last = sum(r["task"] for r in rows[:10]) / 10, sum(r["task"] for r in rows[-10:]) / 10
    assert last < first - 0.2  # ln 3 = 1.10 at the start
    assert results["test"]["accuracy"] > 0.6  # three balanced-ish classes: chance is about 1/3

    from transformers import ElectraForSequenceClassification

    model = ElectraForSequenceClassification.from_pretrained(str(tmp_path / "none" / "model"))
    assert model.config.num_labels == 3 and model.config.id2label[0] == "money"


def test_bad_input_gives_one_line_errors(data, tmp_path, capsys):
    bad_test = tmp_path / "test.tsv"
    bad_test.write_text("stock market news\tweather\n")
    args = [
        "tlm",
        "train",
        "--task-train",
        str(data / "train.tsv"),
        "--task-dev",
        str(data / "dev.tsv"),
        "--task-test",
        str(bad_test),
        "--objective",
        "none",
        "--out",
        str(tmp_path / "o"),
        "--steps",
        "1",
    ]
    assert main(args) == 2
    assert "label 'weather', which the training file never uses" in capsys.readouterr().err
    no_label = tmp_path / "nolabel.csv"
    no_label.write_text("title,text\nA,b\n")
    assert (
        main(
            [
                "tlm",
                "retrieve",
                "--overwrite",
                "--corpus",
                str(data / "corpus"),
                "--task-train",
                str(no_label),
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "label column 'label' not found" in capsys.readouterr().err
    assert (
        main(
            [
                "tlm",
                "retrieve",
                "--overwrite",
                "--corpus",
                str(data / "corpus"),
                "--task-train",
                str(data / "train.tsv"),
                "--out",
                str(tmp_path / "r"),
                "--index",
                str(tmp_path / "r" / "index"),
            ]
        )
        == 0
    )
    nothing = tmp_path / "nothing.tsv"
    nothing.write_text("zzyzx qwerty\tA\nplugh xyzzy\tB\n")
    assert (
        main(
            [
                "tlm",
                "retrieve",
                "--overwrite",
                "--corpus",
                str(data / "corpus"),
                "--task-train",
                str(nothing),
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "retrieved nothing" in capsys.readouterr().err


def test_electric_objective_trains_jointly(data, retrieved, tmp_path):
    results = train_tlm(
        _settings(data, tmp_path / "el", objective="electric", rho1=1, rho2=1.0, steps=2, finetune_epochs=0)
    )
    rows = read_loss_log(tmp_path / "el" / "stage1")
    assert len(rows) == 2 and all(r["lm_internal"] > 0 and r["lm_external"] > 0 for r in rows)
    assert results["stage1_steps"] == 2


def test_a_killed_run_resumes_to_the_same_results(data, retrieved, tmp_path, monkeypatch):
    """Both stages run on the engine: killed in stage 2 after a checkpoint, `resume` reloads stage 1's final
    weights, continues stage 2 from its checkpoint and ends where an uninterrupted run ends."""

    def settings(out: str, **kw) -> TLMSettings:
        return _settings(
            data,
            tmp_path / out,
            objective="electra",
            rho1=1,
            rho2=1.0,
            steps=4,
            finetune_epochs=2,
            save_every=2,
            **kw,
        )

    straight = train_tlm(settings("straight"))
    with killed_after_checkpoint(monkeypatch, 2, where="stage2"), pytest.raises(KeyboardInterrupt):
        train_tlm(settings("killed"))
    resumed = train_tlm(settings("killed", resume=True))
    for key in ("stage1_steps", "stage1_flops", "total_flops", "best_epoch", "stage1_dev", "dev", "test"):
        assert resumed[key] == straight[key], key


def test_a_resume_with_no_checkpoint_says_it_trains_from_the_start(
    data, retrieved, tmp_path, monkeypatch, capsys
):
    """Before: a run started without --save-every (none is the default) and killed in stage 1 was "resumed" by
    training stage 1 again from step 0 without a word, as if hours of training were being continued."""
    from electra.tlm.joint import JointTask

    settings = _settings(
        data,
        tmp_path / "run",
        objective="electra",
        rho1=1,
        rho2=1.0,
        steps=3,
        finetune_epochs=0,
        save_every=0,
    )
    real_step, calls = JointTask.step, []

    def step_then_die(self, model, batch):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed in stage 1")
        return real_step(self, model, batch)

    monkeypatch.setattr(JointTask, "step", step_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_tlm(settings)
    monkeypatch.setattr(JointTask, "step", real_step)
    capsys.readouterr()
    resumed = train_tlm(replace(settings, resume=True))
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("--resume")]
    stage1 = tmp_path / "run" / "stage1"
    assert said == [
        f"--resume: {stage1} holds no checkpoint (checkpoints are kept with --save-every N); stage 1 trains again "
        "from its first step."
    ]
    # A finished stage without a checkpoint cannot be reloaded either: it is trained again (to the same
    # results, the seeds being the same), and the message says why. (Killed after stage 1, before results.json:
    # a run that has its results is finished, and a resume changes nothing, `test_tlm_faults`.)
    (tmp_path / "run" / "results.json").unlink()
    again = train_tlm(replace(settings, resume=True))
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("--resume")]
    assert said == [
        f"--resume: {stage1} finished but kept no checkpoint of its weights (checkpoints are kept with "
        "--save-every N); stage 1 trains again from its first step."
    ]
    assert again["stage1_steps"] == resumed["stage1_steps"] == 3 and again["test"] == resumed["test"]
    # A resume that finds its checkpoints says nothing of the kind, though this one keeps none itself.
    kept = replace(settings, out=str(tmp_path / "kept"), save_every=3)
    train_tlm(kept)
    capsys.readouterr()
    (tmp_path / "kept" / "results.json").unlink()
    assert train_tlm(replace(kept, resume=True, save_every=0))["test"] == again["test"]
    assert "--resume" not in capsys.readouterr().err


def test_resume_refuses_another_objective_or_settings_in_one_line(data, retrieved, tmp_path):
    """Before: `tlm train --resume` with another --objective ended in a traceback (`size mismatch` loading stage 1's
    checkpoint into a model of another shape); other settings were continued and relabelled silently."""
    from electra.core.errors import UserError

    def settings(**kw) -> TLMSettings:
        base = dict(objective="electra", rho1=1, rho2=1.0, steps=2, finetune_epochs=0, save_every=2)
        return _settings(data, tmp_path / "run", **(base | kw))

    first = train_tlm(settings())
    results = (tmp_path / "run" / "results.json").read_text()
    with pytest.raises(UserError) as refused:
        train_tlm(settings(objective="electric", resume=True))
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and message.startswith("--resume:") and "--overwrite" in message
    assert 'objective (saved "electra", now "electric")' in message
    with pytest.raises(UserError, match=r"rho2 \(saved 1.0, now 2.0\), steps \(saved 2, now 3\)"):
        train_tlm(settings(rho2=2.0, steps=3, resume=True))
    # A run from before OUT/run.json existed is still compared through its config.json (the model's shape).
    (tmp_path / "run" / "run.json").unlink()
    with pytest.raises(
        UserError, match=r"config.json differs from this run in .*hidden_size \(saved 64, now 32\)"
    ):
        train_tlm(settings(overrides={**_settings(data, tmp_path).overrides, "hidden_size": 32}, resume=True))
    assert (tmp_path / "run" / "results.json").read_text() == results  # nothing rewritten
    # The same settings (progress and checkpointing may change) resume.
    again = train_tlm(settings(resume=True, progress=True, save_every=1))
    assert again["stage1_steps"] == first["stage1_steps"] == 2 and again["test"] == first["test"]


def test_resume_refuses_an_input_whose_contents_changed(data, retrieved, tmp_path):
    """Before: run.json recorded the task files' paths only, so a `--resume` after the dev file at that path was
    replaced (relabelled, resampled) continued the run on other data under the same results.json."""
    import shutil

    from electra.core.errors import UserError

    task = tmp_path / "task"
    task.mkdir()
    for split in ("train", "dev", "test"):
        shutil.copy(data / f"{split}.tsv", task / f"{split}.tsv")
    settings = _settings(
        data,
        tmp_path / "run",
        objective="electra",
        rho1=1,
        rho2=1.0,
        steps=2,
        finetune_epochs=0,
        save_every=2,
    )
    settings = replace(settings, **{f"task_{s}": str(task / f"{s}.tsv") for s in ("train", "dev", "test")})
    first = train_tlm(settings)
    original = (task / "dev.tsv").read_text()
    (task / "dev.tsv").write_text("".join(reversed(original.splitlines(keepends=True))))
    with pytest.raises(UserError) as refused:
        train_tlm(replace(settings, resume=True))
    message = str(refused.value)
    assert message.startswith(f"--resume: {(task / 'dev.tsv').resolve()} changed since {tmp_path / 'run'}")
    assert "--overwrite" in message and len(message.splitlines()) == 1
    (task / "dev.tsv").write_text(original)  # the same contents again: resumed
    assert train_tlm(replace(settings, resume=True))["test"] == first["test"]


def test_overwrite_starts_over_and_a_missing_input_deletes_nothing(data, retrieved, tmp_path, capsys):
    """Before: `--overwrite` left stage 1's checkpoints and its finished-stage marker, so the new run was mixed
    with the old one's; now the earlier run's files go, once the inputs are known to exist."""
    out = tmp_path / "run"

    def tlm(*extra: str) -> int:
        argv = ["tlm", "train", "--task-train", str(data / "train.tsv"), "--task-dev", str(data / "dev.tsv")]
        argv += ["--task-test", str(data / "test.tsv"), "--retrieved", str(retrieved), "--out", str(out)]
        argv += ["--objective", "electra", "--finetune-epochs", "0", "--save-every", "2", "--no-progress"]
        return main([*argv, *(f"--set={s}" for s in SMALL), *extra])

    assert tlm("--steps", "4") == 0
    assert tlm("--steps", "2", "--overwrite", "--task-dev", str(data / "missing.tsv")) == 2
    assert "missing.tsv: task file does not exist" in capsys.readouterr().err
    # a folder for a file: refused before --overwrite deletes anything
    assert tlm("--steps", "2", "--overwrite", "--task-dev", str(data)) == 2
    assert "is a directory; give the path of the task file" in capsys.readouterr().err
    assert (out / "stage1" / "checkpoints" / "step-00000004").is_dir()
    assert tlm("--steps", "2", "--overwrite") == 0
    assert sorted(p.name for p in (out / "stage1" / "checkpoints").glob("step-*")) == ["step-00000002"]
    assert json.loads((out / "results.json").read_text())["stage1_steps"] == 2


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--steps", "0"], "--steps must be at least 1"),
        (["--steps", "-5"], "--steps must be at least 1"),
        (["--flops-budget", "-1"], "--flops-budget must be at least 1"),
        (["--finetune-epochs", "-1"], "--finetune-epochs must not be negative"),
    ],
)
def test_numbers_that_size_the_run_are_checked_first(data, tmp_path, capsys, flags, message):
    """Before: `--steps 0` meant "unset" and ran the config's step count; `--flops-budget -1` ran one step; and
    `--steps -5` failed after the vocabulary and corpus work, naming max_steps instead of the flag."""
    argv = ["tlm", "train", "--task-train", str(data / "train.tsv"), "--task-dev", str(data / "dev.tsv")]
    argv += ["--task-test", str(data / "test.tsv"), "--objective", "none", "--out", str(tmp_path / "o")]
    assert main([*argv, *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
