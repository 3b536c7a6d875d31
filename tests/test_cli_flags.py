"""One spelling per meaning across the commands, the run_mlm.py/Trainer names users expect, and --version."""

from __future__ import annotations

import os

import pytest

from electra import __version__
from electra.cli import build_parser, main
from electra.run_log import CSV_NAME, parse_report_to, read_metrics
from tests.conftest import MICRO


def _leaves(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                yield from _leaves(sub) if nested else [(name, sub)]


def test_every_command_takes_the_common_flags_and_output_spellings():
    writers = {"pretrain", "glue", "squad", "rescore", "retrieve", "train", "sciie", "compare"}
    for name, parser in _leaves(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        assert {"--no-progress", "--report-to"} <= options, name
        if name in writers:
            assert {"--output", "--out", "--output-dir"} <= options, name


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"electra {__version__}"


def test_report_to_and_no_progress(small_corpus, tmp_path, capsys):
    assert parse_report_to(None) == ("csv", "tensorboard") and parse_report_to("none") == ()
    flags = [f"--set={k}={v}" for k, v in {**MICRO, "max_steps": 2, "save_every": 2}.items()]
    base = [
        "pretrain",
        "--corpus",
        str(small_corpus),
        "--cache-dir",
        str(tmp_path / "c"),
        "--no-plot",
        *flags,
    ]
    assert main([*base, "--output", str(tmp_path / "csv"), "--report-to", "csv", "--no-progress"]) == 0
    assert (tmp_path / "csv" / CSV_NAME).is_file() and not (tmp_path / "csv" / "logs").exists()
    assert read_metrics(tmp_path / "csv")[-1]["step"] == 2
    err = capsys.readouterr().err
    assert "pretraining:" not in err and "Packing examples" not in err  # no bar: ours, nor datasets'
    import datasets

    assert datasets.is_progress_bar_enabled()  # the library's state is given back with the environment
    assert os.environ.get("TQDM_DISABLE") is None and os.environ.get("ELECTRA_REPORT_TO") is None  # restored
    assert main([*base, "--output", str(tmp_path / "tb"), "--report-to", "tensorboard"]) == 0
    assert (tmp_path / "tb" / "logs").is_dir() and not (tmp_path / "tb" / CSV_NAME).exists()
    assert main([*base, "--output", str(tmp_path / "x"), "--report-to", "mlflow"]) == 2
    assert "'mlflow' is not one of csv, tensorboard, wandb or none" in capsys.readouterr().err


def test_per_device_batch_size_is_trainers_meaning(small_corpus, tmp_path, capsys):
    flags = [
        f"--set={k}={v}"
        for k, v in {**MICRO, "max_steps": 1, "save_every": 1}.items()
        if k != "train_batch_size"
    ]
    argv = [
        "pretrain",
        "--corpus",
        str(small_corpus),
        "--cache-dir",
        str(tmp_path / "c"),
        "--no-plot",
        *flags,
    ]
    assert (
        main(
            [
                *argv,
                "--output",
                str(tmp_path / "r"),
                "--per-device-batch-size",
                "4",
                "--gradient-accumulation-steps",
                "2",
            ]
        )
        == 0
    )
    assert "batch 8 = 1 processes x 4 x 2 accumulation" in capsys.readouterr().out
