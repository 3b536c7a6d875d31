"""No silent overwrites: every command refuses to replace an earlier output unless `--overwrite` is given."""

from __future__ import annotations

import pytest

from electra.cli import main
from tests.conftest import MICRO

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
