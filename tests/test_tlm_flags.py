"""`tlm train`, `tlm retrieve` and `tartan` refuse a flag where it cannot act instead of ignoring it, resolve the
defaults of such flags when they are not given (and say them in --help), refuse a `--resume` with nothing to
resume, and leave no empty output behind a failed index build; CSV/TSV labels `1` and `1.0` are one class."""

# ruff: noqa: F811  (pytest fixtures imported from test_tlm_train are parameters here)
from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.app.cli import build_parser, main
from electra.core.errors import UserError
from electra.finetune.models import resolve_model_dir
from electra.tlm.indexing import build_index
from electra.tlm.tasks import LabelVocab, read_task_file

from .test_tlm_train import SMALL, _cache, data  # noqa: F401  (shared fixtures)


def _train_argv(data: Path, out: Path, *extra: str) -> list[str]:
    argv = ["tlm", "train", "--task-train", str(data / "train.tsv"), "--task-dev", str(data / "dev.tsv")]
    argv += ["--task-test", str(data / "test.tsv"), "--out", str(out), "--no-progress"]
    return [*argv, *(f"--set={item}" for item in SMALL), *extra]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--objective", "none", "--rho1", "2"],
            "--rho1 weighs the LM objective, which --objective none does not train; choose an LM --objective or "
            "drop --rho1.",
        ),
        (["--objective", "none", "--rho2", "0"], "--rho2 weighs the LM objective"),
        (
            ["--finetune-epochs", "0", "--finetune-lr", "3e-4"],
            "--finetune-lr is for the fine-tuning epochs, and --finetune-epochs 0 runs none; give "
            "--finetune-epochs N or drop --finetune-lr.",
        ),
        (
            ["--finetune-epochs", "0", "--finetune-layer-decay", "0.9"],
            "--finetune-layer-decay is for the fine",
        ),
        (["--finetune-epochs", "0", "--finetune-batch-size", "8"], "--finetune-batch-size is for the fine"),
    ],
)
def test_tlm_train_refuses_flags_it_would_ignore(data, tmp_path, capsys, extra, message):
    """Before: --rho1/--rho2 under --objective none (no LM to weigh) and the --finetune-* settings with
    --finetune-epochs 0 (no stage 2) were accepted and changed nothing."""
    out = tmp_path / "run"
    assert main(_train_argv(data, out, *extra)) == 2
    assert message in _one_line_error(capsys)
    assert not out.exists()


def test_a_negative_finetune_epochs_is_named_before_the_flags_it_would_silence(data, tmp_path, capsys):
    assert main(_train_argv(data, tmp_path / "run", "--finetune-epochs", "-1", "--finetune-lr", "1e-3")) == 2
    assert "--finetune-epochs must not be negative" in _one_line_error(capsys)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--rho1", "-1"], "rho1 must be a whole number, at least 0, got -1"),
        (["--rho2", "-2"], "rho2 must be at least 0, got -2.0"),
    ],
)
def test_a_negative_rate_is_refused_in_one_line_before_any_work(data, tmp_path, capsys, extra, message):
    """--rho1 and --rho2 are checked once, where `TLMSettings` is built from the flags: one line, nothing written."""
    out = tmp_path / "run"
    assert main(_train_argv(data, out, *extra)) == 2
    assert message in _one_line_error(capsys)
    assert not out.exists()


def test_tlm_train_fills_in_the_defaults_of_flags_not_given(data, tmp_path, capsys):
    """The defaults, now None in argparse, are resolved before the run: run.json records the values trained with
    (a value given is kept, the others are the documented defaults), and --help still says them."""
    out = tmp_path / "run"
    argv = _train_argv(data, out, "--objective", "none", "--steps", "2", "--batch-size", "8")
    assert main([*argv, "--finetune-epochs", "1", "--finetune-lr", "3e-4"]) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["finetune_lr"] == 3e-4 and record["finetune_epochs"] == 1
    assert (record["rho1"], record["rho2"]) == (3, 20.0)
    assert (record["finetune_layer_decay"], record["finetune_batch_size"]) == (0.8, 32)
    assert json.loads((out / "results.json").read_text())["stage1_steps"] == 2
    # the record names its command, so a consumer given OUT names it too (before: its own config.json, the run's,
    # was read as a model's)
    assert record["command"] == "tlm train"
    with pytest.raises(UserError, match=f"--model {out} is an `electra tlm train` output, not a model"):
        resolve_model_dir(out)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["tlm", "train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in (
        "retrieved (external) batches per task batch (default 3)",
        "weight of the LM loss on task (internal) data (default 20.0)",
        "stage-2 peak learning rate (default 0.0001)",
        "stage-2 layer-wise learning-rate decay (default 0.8)",
        "stage-2 batch size (default 32)",
    ):
        assert shown in text, shown


def test_argparse_defaults_of_conditional_flags_are_none():
    """A flag that acts only under a condition must default to None, or "given" cannot be told from "default"."""
    parser = build_parser()
    train = parser.parse_args(["tlm", "train", "--task-train", "a", "--task-dev", "b", "--task-test", "c"])
    for name in ("rho1", "rho2", "finetune_lr", "finetune_layer_decay", "finetune_batch_size"):
        assert getattr(train, name) is None, name
    retrieve = parser.parse_args(["tlm", "retrieve", "--corpus", "c", "--task-train", "t", "--out", "o"])
    for name in (
        "objective",
        "size",
        "reference_steps",
        "reference_lr",
        "iss_layer",
        "iss_batch_size",
        "seed",
    ):
        assert getattr(retrieve, name) is None, name
    tartan = parser.parse_args(
        ["tartan", "--init-from", "m", "--task-train", "a", "--task-dev", "b"] + ["--task-test", "c"]
    )
    assert tartan.finetune_lr is None and tartan.meta_lr is None


def _retrieve_argv(data: Path, out: Path, *extra: str) -> list[str]:
    argv = ["tlm", "retrieve", "--corpus", str(data / "corpus"), "--task-train", str(data / "train.tsv")]
    return [*argv, "--top-k", "3", "--out", str(out), "--no-progress", *extra]


@pytest.mark.parametrize(
    "extra",
    [
        ["--seed", "7"],
        ["--reference-lr", "1e-3"],
        ["--reference-steps", "5"],
        ["--objective", "mlm"],
        ["--size", "small"],
        ["--iss-layer", "0"],
        ["--iss-batch-size", "4"],
        ["--set", "hidden_size=32"],
    ],
)
def test_retrieve_refuses_every_iss_flag_under_bm25(data, tmp_path, capsys, extra):
    """Before: only --task-dev, --init-from, --vocab and --set were refused with --select bm25; the ISS flags
    with a default (--seed, --reference-lr, --objective, ...) were ignored in silence."""
    out = tmp_path / "ret"
    assert main(_retrieve_argv(data, out, *extra)) == 2
    flag = extra[0]
    assert (
        f"{flag} is for the ISS reference model, which --select bm25 does not train; add --select iss (with "
        f"--task-dev and --select-size) or drop {flag}."
    ) in _one_line_error(capsys)
    assert not out.exists()


def test_retrieve_help_says_the_iss_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["tlm", "retrieve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in (
        "joint task + LM steps of the reference model (default 100)",
        "peak learning rate of the reference model (default 0.0001)",
        "passages (and dev rows) per gradient batch (default 16)",
        "LM objective of the joint loss (registry) (default electra)",
        "(default -1: the last layer)",
    ):
        assert shown in text, shown


def test_tartan_refuses_finetune_lr_without_finetune_epochs(tmp_path, capsys):
    """Before: `tartan --finetune-lr X` with the default --finetune-epochs 0 ran no fine-tuning and said nothing.
    (Refused before the inputs are read: these paths need not exist.)"""
    out = tmp_path / "run"
    argv = ["tartan", "--init-from", str(tmp_path / "m"), "--task-train", "a", "--task-dev", "b"]
    assert main([*argv, "--task-test", "c", "--out", str(out), "--finetune-lr", "1e-3"]) == 2
    assert (
        "--finetune-lr is for the fine-tuning epochs, and --finetune-epochs 0 runs none"
        in _one_line_error(capsys)
    )
    assert not out.exists()
    with pytest.raises(SystemExit):
        main(["tartan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "peak learning rate of those epochs (default 0.0001)" in text
    assert "META-TARTAN's step size η for the weights (default 0.1)" in text


@pytest.mark.parametrize("command", ["tlm", "tartan"])
@pytest.mark.parametrize("make", [False, True])
def test_resume_with_nothing_to_resume_is_refused(data, tmp_path, capsys, command, make):
    """Before: `tlm train --resume` (and `tartan --resume`) on a mistyped --out started a fresh run in silence."""
    out = tmp_path / "typo"
    if make:
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    if command == "tlm":
        argv = _train_argv(data, out, "--resume")
    else:
        argv = ["tartan", "--init-from", str(tmp_path / "m"), "--task-train", str(data / "train.tsv")]
        argv += ["--task-dev", str(data / "dev.tsv"), "--task-test", str(data / "test.tsv")]
        argv += ["--out", str(out), "--resume", "--no-progress"]
    assert main(argv) == 2
    err = _one_line_error(capsys)
    where = "holds no run" if make else "does not exist"
    assert f"--resume: {out} {where}, so there is nothing to resume" in err and "drop --resume" in err
    if make:
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    else:
        assert not out.exists()


def _short_corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "short.txt"
    corpus.write_text("too short\n\nalso short\n")
    return corpus


def test_a_failed_index_build_removes_the_output_it_created(data, tmp_path, capsys):
    """Before: a corpus with no passage to index was refused, but the --out folder the build had made (to hold
    OUT/index) stayed behind, empty; a folder the user had, and its files, stay."""
    corpus = _short_corpus(tmp_path)
    task = ["--task-train", str(data / "train.tsv"), "--no-progress"]
    out = tmp_path / "new" / "deeper" / "ret"
    assert main(["tlm", "retrieve", "--corpus", str(corpus), *task, "--out", str(out)]) == 2
    assert "has no passage of 5 words or more" in _one_line_error(capsys)
    assert not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep\n")
    assert main(["tlm", "retrieve", "--corpus", str(corpus), *task, "--out", str(mine)]) == 2
    _one_line_error(capsys)
    assert sorted(p.name for p in mine.iterdir()) == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["tlm", "retrieve", "--corpus", str(corpus), *task, "--out", str(empty)]) == 2
    _one_line_error(capsys)
    assert empty.is_dir() and not any(empty.iterdir())  # the user's own (empty) folder stays
    # an --index elsewhere: the folders made for it go, and the --out the run never made is not there either
    index = tmp_path / "indexes" / "a" / "idx"
    argv = [
        "tlm",
        "retrieve",
        "--corpus",
        str(corpus),
        *task,
        "--out",
        str(tmp_path / "o2"),
        "--index",
        str(index),
    ]
    assert main(argv) == 2
    _one_line_error(capsys)
    assert not (tmp_path / "indexes").exists() and not (tmp_path / "o2").exists()


def test_an_interrupted_build_removes_only_the_folders_it_made(tmp_path):
    """Through the library too, and for a Ctrl-C: folders made for the index go, the one that was there stays."""

    def interrupted():
        yield "a passage long enough to be indexed by the build"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_index(interrupted(), tmp_path / "made" / "index", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(UserError, match="no passage of 5 words"):
        build_index(["short"], tmp_path / "index", progress=False)
    assert tmp_path.is_dir() and not any(tmp_path.iterdir())


@pytest.mark.parametrize("suffix, delimiter", [("csv", ","), ("tsv", "\t")])
def test_delimited_labels_1_and_1_0_are_one_class(tmp_path, suffix, delimiter):
    """Before: a CSV/TSV label column with `1` in some rows and `1.0` in others (a spreadsheet's export) made two
    classes, and a dev file writing `1.0` where train writes `1` was refused as an unseen label. Now a number with
    a decimal point names the class by its shortest spelling, as JSONL's numbers already did."""
    train = tmp_path / f"train.{suffix}"
    rows = [
        ("good movie", "1"),
        ("bad movie", "0"),
        ("great film", "1.0"),
        ("awful film", "0.00"),
        ("ok", "0.50"),
    ]
    train.write_text(
        "text" + delimiter + "label\n" + "".join(f"{t}{delimiter}{label}\n" for t, label in rows)
    )
    examples = read_task_file(train)
    assert [e.label for e in examples] == ["1", "0", "1", "0", "0.5"]
    vocab = LabelVocab.from_examples(examples, str(train))
    assert vocab.labels == ["0", "0.5", "1"]
    dev = tmp_path / f"dev.{suffix}"
    dev.write_text(f"text{delimiter}label\nfine{delimiter}1.000\nmeh{delimiter}0.5\nnope{delimiter}1.5\n")
    dev_examples = read_task_file(dev)
    assert [e.label for e in dev_examples] == ["1", "0.5", "1.5"]
    with pytest.raises(UserError, match="label '1.5', which the training file never uses"):
        vocab.encode(dev_examples, str(dev))
    assert vocab.encode(dev_examples[:2], str(dev)) == [2, 1]
    # text labels, and numbers with no point, are taken as written
    other = tmp_path / f"other.{suffix}"
    other.write_text(f"a{delimiter}01\nb{delimiter}1\nc{delimiter}v1.0\n")
    assert [e.label for e in read_task_file(other)] == ["01", "1", "v1.0"]


def test_jsonl_labels_written_as_strings_follow_the_same_rule(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        '{"text": "a", "label": "1.0"}\n{"text": "b", "label": 1}\n{"text": "c", "label": 2.50}\n'
    )
    assert [e.label for e in read_task_file(path)] == ["1", "1", "2.5"]
