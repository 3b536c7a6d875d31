"""One spelling per meaning across the commands, the run_mlm.py/Trainer names users expect, and --version."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from electra import __version__
from electra.app.cli import build_parser, main
from electra.training.run_log import CSV_NAME, parse_report_to, read_metrics
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


def test_help_shows_defaults_only_where_there_is_a_value(capsys):
    """glue, compare and probe print argparse's defaults; "(default: None)" after a flag that has none, or
    "(default: True)" after a --no-x switch, said nothing or the opposite of what the switch does."""
    for name, parser in _leaves(build_parser()):
        text = parser.format_help()
        for noise in ("(default: None)", "(default: False)", "(default: True)"):
            assert noise not in text, (name, noise)
    assert "(default: 1)" in dict(_leaves(build_parser()))["glue"].format_help()  # --seeds keeps its value


def _commands(parser) -> tuple[str, ...]:
    import argparse

    return tuple(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_a_named_command_builds_only_its_own_parser(capsys):
    """`electra rescore` (and `python pretrain.py`) builds the parsers of one module. Each module's entry in the
    table names exactly the commands its `register` adds, so a run's parser lacks none of its aliases; with no
    command, or one mistyped, every command is built and listed."""
    import argparse

    from electra.app.cli import SUBCOMMANDS

    for module, commands in SUBCOMMANDS.items():
        subparsers = argparse.ArgumentParser().add_subparsers()
        module.register(subparsers)
        assert tuple(subparsers.choices) == commands, module.__name__
        for command in commands:
            assert _commands(build_parser(command)) == commands
    assert _commands(build_parser()) == tuple(c for commands in SUBCOMMANDS.values() for c in commands)
    with pytest.raises(SystemExit):
        main(["rescroe"])
    assert "invalid choice: 'rescroe'" in capsys.readouterr().err


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
    # instead a line per log step (before: nothing between the start and the end)
    assert re.search(r"^pretraining step 2/2: loss \d+\.\d{3}, .*tok/s \d+", err, re.MULTILINE), err
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
    assert "batch 8 = 1 process x 4 x 2 accumulation" in capsys.readouterr().out


def test_trainer_underscore_spellings_are_aliases():
    """Before: README promised Trainer's names, but `--report_to`, `--output_dir` and
    `--per_device_train_batch_size` were "unrecognized arguments"."""
    parser = build_parser()
    args = parser.parse_args(
        [
            "pretrain",
            "--output_dir",
            "o",
            "--per_device_train_batch_size",
            "4",
            "--report_to=csv",
            "--max_steps=3",
        ]
    )
    assert (args.output, args.per_device_batch_size, args.report_to, args.max_steps) == ("o", 4, "csv", 3)
    args = parser.parse_args(
        ["glue", "--model", "m", "--task", "sst2", "--output_dir", "g", "--report_to", "none"]
    )
    assert (args.output, args.report_to) == ("g", "none")
    assert parser.parse_args(["pretrain", "--set", "max_steps=3"]).set == [
        "max_steps=3"
    ]  # values are untouched


def test_a_list_flag_given_twice_keeps_both_lists():
    """Before: `rescore --test a.json --test b.json` rescored b.json alone (argparse's last list won), and so did a
    second --model, --scores, ngram's --nbest and tlm retrieve's --corpus, without a word."""
    parser = build_parser()
    args = parser.parse_args(
        ["rescore", "--dev", "d.json", "--test", "a.json", "--test", "b.json", "c.json", "--model", "m1",
         "--model", "m2", "--scores", "s1", "--scores", "s2"]
    )  # fmt: skip
    assert (args.test, args.model, args.scores) == (
        ["a.json", "b.json", "c.json"],
        ["m1", "m2"],
        ["s1", "s2"],
    )
    assert parser.parse_args(["rescore", "--dev", "d.json"]).test == []  # the default list is not shared
    args = parser.parse_args(
        ["ngram", "--corpus", "c", "--nbest", "a.json", "--nbest", "b.json", "--out", "o"]
    )
    assert args.nbest == ["a.json", "b.json"]
    args = parser.parse_args(
        ["tlm", "retrieve", "--corpus", "x", "--corpus", "y", "--task-train", "t.tsv", "--out", "o"]
    )
    assert args.corpus == ["x", "y"]


@pytest.mark.parametrize(
    "argv, line",
    [
        (  # ran, and config.json recorded a generator the MLM baseline never had
            ["pretrain", "--objective", "mlm", "--generator", "unigram"],
            "electra pretrain: error: config: objective=mlm uses no generator; remove generator=unigram (or "
            "--generator).",
        ),
        (  # --resume used to win silently
            ["pretrain", "--resume", "--overwrite"],
            "electra pretrain: error: --resume continues the run in --output and --overwrite deletes it; give one "
            "of them.",
        ),
    ],
)
def test_contradicting_pretrain_flags_are_refused_before_any_work(tmp_path, monkeypatch, capsys, argv, line):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--corpus", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["pretrain", "--max-stpes", "5"],
            "electra pretrain: error: unrecognized arguments: --max-stpes 5 (did you mean --max-steps?)",
        ),
        (  # a prefix is not a flag: argparse used to read it as --max-steps without a word
            ["pretrain", "--max-step", "5"],
            "electra pretrain: error: unrecognized arguments: --max-step 5 (did you mean --max-steps?)",
        ),
        (
            ["pretrain", "--size", "tinyy"],
            "electra pretrain: error: argument --size: invalid choice: 'tinyy' (choose from 'tiny', 'mini', "
            "'small', 'base', 'large')",
        ),
        (
            ["tlm", "retrieve", "--corpus", "c", "--task-train", "t", "--out", "o", "--tpo-k", "3"],
            "electra tlm retrieve: error: unrecognized arguments: --tpo-k 3 (did you mean --top-k?)",
        ),
        (["glue", "--task", "sst2"], "electra glue: error: the following arguments are required: --model"),
    ],
)
def test_a_bad_flag_is_one_line_from_its_command(capsys, argv, line):
    """Before: an unknown flag was reported by `electra` with the top-level usage, and every argparse error came
    after a multi-line usage block."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_report_to_wandb_without_wandb_is_refused_before_any_work(
    small_corpus, tmp_path, capsys, monkeypatch
):
    """Before: the refusal came after the tokenizer was trained, leaving config.json, run.json and tokenizer/."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a)
    )
    out = tmp_path / "out"
    argv = [
        "pretrain",
        "--corpus",
        str(small_corpus),
        "--output",
        str(out),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    assert main([*argv, "--report-to", "csv,wandb", *(f"--set={k}={v}" for k, v in MICRO.items())]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "electra pretrain: error: --report-to wandb: Weights & Biases is not installed (pip install wandb)."
    ]
    assert not out.exists() and not (tmp_path / "c").exists()


def test_an_error_names_the_whole_command(tmp_path, capsys):
    """Before: a step's error began `electra tlm: error:`, naming the group but not the step that refused."""
    argv = ["tlm", "retrieve", "--corpus", str(tmp_path), "--task-train", str(tmp_path / "t.tsv")]
    assert main([*argv, "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.startswith("electra tlm retrieve: error: ")
    assert main(["glue", "--model", str(tmp_path), "--task", "rte", "--data-dir", str(tmp_path / "no")]) == 2
    assert capsys.readouterr().err.startswith("electra glue: error: ")


@pytest.mark.parametrize(
    "argv",
    [["flops", "--size", "tiny"], ["tlm", "retrieve", "--corpus", "c", "--task-train", "t", "--out", "o"]],
)
def test_a_one_process_command_under_a_launcher_is_refused(monkeypatch, capsys, argv):
    """Before: `torchrun --nproc_per_node 2 -m electra tlm retrieve ...` ran the whole retrieval in each
    process, both writing the same selection files (torn writes, the summary twice). Commands that do not share
    their work now refuse a multi-process launch in one line; the ones that do still run (pretrain's settings)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs in one process, and the launcher started 2" in err[0], err
    assert main(["pretrain", "--help-config"]) == 0
    assert "max_steps = " in capsys.readouterr().out


def test_output_into_a_closed_pipe_ends_quietly():
    """Before: `electra flops --paper --json | head -1` with more output than the pipe holds ended in a
    `BrokenPipeError` traceback once head had gone. Now the command stops quietly with SIGPIPE's exit status."""
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write: every write breaks the pipe
    try:
        done = subprocess.run(
            [sys.executable, "-m", "electra", "flops", "--paper", "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141 and done.stderr == "", done.stderr


_SLEEPS_IN_A_SCRATCH_FOLDER = """
import os, signal, sys, tempfile, time
from tests.conftest import run_command_as

def command(args):
    ready, started = os.pipe()
    child = os.fork()
    if child == 0:  # a worker forked while the command runs (a datasets map, a DataLoader) keeps the default
        os.write(started, b"1")  # Python drops a signal that arrives while the child is still being set up
        time.sleep(60)
        os._exit(0)
    os.read(ready, 1)
    os.kill(child, signal.SIGTERM)
    _, status = os.waitpid(child, 0)
    print("child", os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exited", flush=True)
    with tempfile.TemporaryDirectory(prefix="electra-scratch-") as scratch:
        print(scratch, flush=True)
        time.sleep(60)

sys.exit(run_command_as("flops", command))
"""


def test_sigterm_lets_the_command_clean_up_and_says_so(tmp_path):
    """Before: SIGTERM (`kill`, a scheduler's time limit) killed a command outright, so no `finally` ran: a
    killed `electra probe --random-baseline` left its model-sized scratch folder in /tmp. Now SIGTERM stops the
    command as Ctrl-C does, in one line and with status 143, and a forked worker still dies of it as before."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "sleeps.py"
    script.write_text(_SLEEPS_IN_A_SCRATCH_FOLDER)
    env = dict(os.environ, PYTHONPATH=str(Path.cwd()))
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout.readline().strip() == f"child {int(signal.SIGTERM)}"
        scratch = Path(process.stdout.readline().strip())
        assert scratch.is_dir()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert err.strip().splitlines() == ["electra flops: terminated (SIGTERM)"], err
    assert not scratch.exists()


@pytest.mark.parametrize("new, old", [("tag-bilstm", "tag-cvt"), ("parse-bilstm", "parse-cvt")])
def test_a_renamed_command_still_answers_to_its_old_name(new, old):
    """The CNN-BiLSTM commands are named for their model (Cross-View Training is their --cvt flag); the old names
    stay aliases for a release, with the same flags and the same action."""
    parser = build_parser()
    argv = ["--train", "train.txt", "--cvt", "--unlabeled", "corpus.txt", "--max-steps", "7"]
    renamed, kept = parser.parse_args([new, *argv]), parser.parse_args([old, *argv])
    assert renamed.func is kept.func
    assert {k: v for k, v in vars(renamed).items() if k != "command"} == {
        k: v for k, v in vars(kept).items() if k != "command"
    }
    assert renamed.max_steps == 7 and renamed.cvt
