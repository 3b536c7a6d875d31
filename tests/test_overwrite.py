"""No silent overwrites: every command refuses to replace an earlier output unless `--overwrite` is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from electra.app.cli import main
from electra.core.errors import UserError
from tests.conftest import MICRO

TASK_FILES = ["--task-train", "t", "--task-dev", "d", "--task-test", "e"]
MICRO_FLAGS = [f"--set={k}={v}" for k, v in {**MICRO, "max_steps": 2, "save_every": 2}.items()]


def _refused(capsys, argv, fragment="already exists") -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("electra ") and fragment in err and "--overwrite" in err, err
    return err


def test_pretrain_keeps_a_foreign_directory_and_a_finished_run(small_corpus, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    base = [
        "pretrain",
        "--corpus",
        str(small_corpus),
        "--output",
        str(out),
        "--no-plot",
        "--cache-dir",
        str(tmp_path / "cache"),
        *MICRO_FLAGS,
    ]
    _refused(capsys, base, "is not empty (notes.txt)")
    assert main([*base, "--overwrite"]) == 0  # writes beside the user's file
    _refused(capsys, base, "already holds a run")
    assert main([*base, "--overwrite"]) == 0  # starts the run over
    assert (out / "notes.txt").read_text() == "mine"  # and never touches what is not its own


def test_an_overwrite_or_resume_beside_a_live_run_is_refused_and_deletes_nothing(
    small_corpus, tmp_path, capsys
):
    """Before: a second `pretrain --overwrite` into a folder a live run was writing deleted that run's logs/ and
    checkpoints before the lock refused it (the live run then died on its next log write), and a `--resume` there
    said its checkpoints were incomplete. Both are now refused as 'a run is writing here now', with nothing
    deleted; so is the --overwrite of a consumer (glue, squad, tlm), which deletes through the same function."""
    from electra.core.overwrite import start_over
    from tests.conftest import lock_held_elsewhere

    out = tmp_path / "out"
    base = ["pretrain", "--corpus", str(small_corpus), "--output", str(out), "--no-plot"]
    base += ["--cache-dir", str(tmp_path / "cache"), *MICRO_FLAGS]
    assert main(base) == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with lock_held_elsewhere(out) as pid:  # the live run
        for flag in ("--overwrite", "--resume"):
            assert main([*base, flag]) == 2
            err = capsys.readouterr().err.strip()
            assert err.endswith(
                f"{out}: a run is writing here now (pid {pid}); wait for it to finish, or choose another output."
            ), err
        with pytest.raises(UserError, match="a run is writing here now"):
            start_over(out, ["logs"], overwrite=True)
        assert sorted(p.relative_to(out) for p in out.rglob("*") if p.name != ".electra.lock") == before
    assert main([*base, "--overwrite"]) == 0  # a dead holder holds nothing


def test_consumers_refuse_to_replace_their_results(tmp_path, capsys):
    """Before: glue, squad, rescore, score --output and tlm replaced results.json, predictions.json, report.json,
    score files and the retrieved corpus without a word. The check comes before any work."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("results.json", "report.json", "scores.jsonl"):
        (out / name).write_text("{}")
    (out / "corpus").mkdir()
    sentences = tmp_path / "s.txt"
    sentences.write_text("a sentence\n")
    _refused(capsys, ["glue", "--model", "m", "--task", "sst2", "--output", str(out)])
    _refused(capsys, ["squad", "--model", "m", "--eval", "e.json", "--output", str(out)])
    _refused(capsys, ["rescore", "--model", "m", "--dev", "dev.json", "--output-dir", str(out)])
    _refused(
        capsys, ["score", "--model", "m", "--input", str(sentences), "--output", str(out / "scores.jsonl")]
    )
    _refused(capsys, ["tlm", "retrieve", "--corpus", "c", "--task-train", "t.tsv", "--out", str(out)])
    train = ["tlm", "train", "--task-train", "t", "--task-dev", "d", "--task-test", "e", "--out", str(out)]
    _refused(capsys, train)
    for name in ("results.json", "report.json", "scores.jsonl"):
        assert (out / name).read_text() == "{}"


@pytest.mark.parametrize("command", ["glue", "squad"])
def test_resume_is_not_an_overwrite(tmp_path, capsys, command):
    """`--resume` continues the command's own output: the overwrite check stands aside (and the command goes on to
    its next check, here the missing model)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    extra = ["--task", "sst2", "--data-dir", str(tmp_path)] if command == "glue" else ["--eval", "e.json"]
    assert (
        main([command, "--model", str(tmp_path / "missing"), *extra, "--output", str(out), "--resume"]) == 2
    )
    assert "already exists" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "command, args",
    [
        ("pretrain", ["--corpus", "{corpus}"]),
        ("glue", ["--model", "m", "--task", "sst2"]),
        ("squad", ["--model", "m", "--eval", "e.json"]),
        ("rescore", ["--model", "m", "--dev", "dev.json"]),
        ("tlm train", ["--task-train", "t", "--task-dev", "d", "--task-test", "e"]),
        ("compare", ["--corpus", "{corpus}"]),
    ],
)
@pytest.mark.parametrize("below", [False, True], ids=["file", "under-a-file"])
def test_an_output_that_is_a_file_is_refused_in_one_line(
    small_corpus, tmp_path, capsys, command, args, below
):
    """Before: pretrain and glue ended in NotADirectoryError, squad in FileExistsError, after work had started.
    Every command that writes a folder now answers while reading its flags, and writes nothing."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    output = afile / "sub" if below else afile
    with pytest.raises(SystemExit) as exit:
        main([*command.split(), *(a.format(corpus=small_corpus) for a in args), "--output", str(output)])
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"electra {command}: error: argument --output"), err
    assert err[0].endswith(f"{output}{f': {afile}' if below else ''} is a file; choose a directory."), err
    assert afile.read_text() == "mine" and sorted(tmp_path.iterdir()) == sorted([afile, small_corpus])


@pytest.mark.skipif(
    not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where nothing can be created"
)
def test_an_output_that_cannot_be_created_is_refused_before_any_work(small_corpus, tmp_path, capsys):
    """Before: `--output /proc/x` trained the vocabulary and built the examples, then died in a FileNotFoundError
    traceback at its first write. Now argparse answers in one line, and a probe leaves nothing behind."""
    with pytest.raises(SystemExit) as exit:
        main(["pretrain", "--corpus", str(small_corpus), "--output", "/proc/electra-test/run"])
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--output" in err[0] and "/proc/electra-test/run: cannot write here" in err[0], (
        err
    )
    writable = tmp_path / "new" / "deeper"
    assert main(["pretrain", "--corpus", str(tmp_path / "missing"), "--output", str(writable)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == [small_corpus]  # the probe made new/deeper and removed it


def test_pretrain_overwrite_never_touches_files_it_did_not_write(small_corpus, tmp_path, capsys):
    """Before: --overwrite in a folder of the user's deleted every name a run writes (their config.json, their
    logs/ with its notes), although the refusal said it would "write into it". A folder that is not a run of
    pretrain is refused even with --overwrite when it holds a name the run writes, and nothing in it changes."""
    out = tmp_path / "proj"
    (out / "logs").mkdir(parents=True)
    (out / "config.json").write_text('{"mine": 1}')
    (out / "logs" / "experiment-notes.txt").write_text("important")
    (out / "notes.txt").write_text("hi")
    base = ["pretrain", "--corpus", str(small_corpus), "--output", str(out), "--no-plot", *MICRO_FLAGS]
    for extra in ([], ["--overwrite"]):
        assert main([*base, "--cache-dir", str(tmp_path / "cache"), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "is not a run of this command but holds config.json, logs, which a run writes" in err, err
        assert "move them or choose another --output" in err
    assert (out / "config.json").read_text() == '{"mine": 1}'
    assert (out / "logs" / "experiment-notes.txt").read_text() == "important"
    assert sorted(p.name for p in out.rglob("*")) == [
        "config.json",
        "experiment-notes.txt",
        "logs",
        "notes.txt",
    ]

    # A user's README.md is a name the run writes too (the model card): refused, not replaced.
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "README.md").write_text("my project")
    argv = [
        *base[:4],
        str(tmp_path / "own"),
        *base[5:],
        "--cache-dir",
        str(tmp_path / "cache"),
        "--overwrite",
    ]
    assert main(argv) == 2
    assert "holds README.md" in capsys.readouterr().err
    assert (tmp_path / "own" / "README.md").read_text() == "my project"


def test_pretrain_overwrite_of_its_own_run_says_what_it_deletes(small_corpus, tmp_path, capsys):
    """In a run of pretrain (its run record is there), --overwrite deletes that run's files and only those; the
    refusal lists them. A run.json the user wrote is not a run record."""
    out = tmp_path / "run"
    base = ["pretrain", "--corpus", str(small_corpus), "--output", str(out), "--no-plot", "--cache-dir"]
    base += [str(tmp_path / "cache"), *MICRO_FLAGS]
    assert main(base) == 0
    (out / "notes.txt").write_text("mine")
    err = _refused(capsys, base, "already holds a run")
    assert (
        "--overwrite to delete that run's files (checkpoints, logs, metrics.csv" in err
        and "nothing else" in err
    )
    # A file of the user's inside one of the run's folders: --overwrite deleted it with the folder. Now it is
    # refused, naming it, and nothing is deleted; once it is moved out, --overwrite goes ahead.
    (out / "discriminator" / "my_eval.txt").write_text("mine")
    (out / "checkpoints" / "keep.txt").write_text("mine")
    err = _refused(capsys, [*base, "--overwrite"], "which no run writes")
    assert "checkpoints/keep.txt, discriminator/my_eval.txt" in err, err
    assert (out / "discriminator" / "my_eval.txt").is_file() and (out / "checkpoints" / "latest").is_file()
    (out / "discriminator" / "my_eval.txt").rename(tmp_path / "my_eval.txt")
    (out / "checkpoints" / "keep.txt").unlink()
    assert main([*base, "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "mine"

    other = tmp_path / "other"
    other.mkdir()
    (other / "run.json").write_text('{"mine": true}')
    assert main([*base[:4], str(other), *base[5:], "--overwrite"]) == 2
    assert "holds run.json, which a run writes" in capsys.readouterr().err
    assert (other / "run.json").read_text() == '{"mine": true}'


def test_start_over_deletes_a_runs_own_files_and_nothing_else(tmp_path):
    """`--overwrite` for the resumable consumers: the earlier run's files go (its unreached seeds and checkpoints
    would otherwise pass for the new run's on --resume); a user's files, and anything the run reads, stay."""
    from electra.core.errors import UserError
    from electra.core.overwrite import start_over

    out = tmp_path / "out"
    (out / "runs" / "stsb" / "seed-2").mkdir(parents=True)
    (out / "runs" / "stsb" / "seed-2" / "result.json").write_text("{}")
    (out / "results.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    produced = ("results.json", "runs", "checkpoints")
    with pytest.raises(UserError, match="already exists.*--overwrite"):
        start_over(out, produced, overwrite=False)
    with pytest.raises(UserError, match="would delete .*runs, which this run reads"):
        start_over(out, produced, overwrite=True, reads=[out / "runs" / "stsb"])
    assert (out / "runs" / "stsb" / "seed-2" / "result.json").is_file()
    start_over(out, produced, overwrite=True, reads=[None, tmp_path / "model"])
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]

    foreign = tmp_path / "foreign"  # the same names, but no run record: not this command's to delete
    (foreign / "runs").mkdir(parents=True)
    for overwrite in (False, True):  # without --overwrite too: "pass --overwrite" would not help
        with pytest.raises(
            UserError, match="no run.json shows that a run wrote them, so they are not replaced"
        ):
            start_over(foreign, produced, overwrite=overwrite)
    assert (foreign / "runs").is_dir()
    start_over(tmp_path / "new", produced, overwrite=False)  # nothing there: nothing to refuse


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["glue", "--model", "m", "--task", "sst2", "--learning-rate", "0"],
            "learning_rate must be positive, got 0.0",
        ),
        (
            ["glue", "--model", "m", "--task", "sst2", "--layer-decay", "1.5"],
            "layer_decay must be in (0, 1], got 1.5",
        ),
        (
            ["squad", "--model", "m", "--eval", "e.json", "--learning-rate=-1e-4"],
            "learning_rate must be positive",
        ),
        (
            ["squad", "--model", "m", "--eval", "e.json", "--warmup-fraction", "2"],
            "warmup_fraction must be in [0, 1]",
        ),
        (
            ["tlm", "train", *TASK_FILES, "--finetune-lr", "0"],
            "finetune_lr must be positive, got 0.0",
        ),
        (
            ["tartan", "--init-from", "m", *TASK_FILES, "--weighting", "meta", "--meta-lr=-1"],
            "meta_lr must be positive, got -1.0",
        ),
    ],
)
def test_fine_tuning_settings_out_of_range_are_refused_before_overwrite_deletes(
    tmp_path, capsys, argv, fragment
):
    """Before: GLUE read a learning rate of 0 as "the size's default", a negative rate trained the wrong way and a
    layer decay over 1 gave the lowest layers the largest rates (GLUE, SQuAD, TLM's stage 2, META-TARTAN's η);
    GLUE built its settings only after --overwrite had deleted the earlier run's results. Now the settings are
    checked first, in one line."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"earlier": true}')
    assert main([*argv, "--output", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err
    assert (out / "results.json").read_text() == '{"earlier": true}'


def _probe_rounds(rank: int, root: str, rounds: int, barrier, failures) -> None:
    """One launcher process: probe a fresh --output each round, at the same moment as the other process."""
    import os

    from electra.core.errors import UserError
    from electra.core.overwrite import refuse_unwritable_directory

    os.environ["RANK"] = str(rank)
    for i in range(rounds):
        barrier.wait()
        try:
            refuse_unwritable_directory(Path(root) / f"run{i}" / "out")
        except UserError as exc:
            failures.put(str(exc))


def test_processes_of_one_launch_do_not_fail_each_others_output_probe(tmp_path):
    """Before: under torchrun every process probed --output by making the missing folders and removing them again,
    and two processes doing that at once failed each other ("cannot write here (File exists)", seen in
    `tests/test_multiprocess_consumers.py`). Only the main process writes outputs, so it alone probes now."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier, failures = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_probe_rounds, args=(rank, str(tmp_path), 300, barrier, failures))
        for rank in (0, 1)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert all(worker.exitcode == 0 for worker in workers)
    assert failures.empty(), failures.get()
    assert not any(tmp_path.iterdir())  # the probe still leaves nothing behind
