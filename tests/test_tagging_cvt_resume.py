"""`electra tag-bilstm` / `parse-bilstm` with --save-every and --resume: a run killed after a checkpoint and resumed ends
with the same weights, evaluations and predictions as one never stopped; a longer --max-steps goes on; finished
seeds are reused; a checkpoint of other settings is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

import electra.tagging.cvt_train as cvt_train
from electra.app.cli import main
from electra.core.files import read_safetensors

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tagging_files(tmp_path) -> list[str]:
    data = [
        (["the", "cat", "sat"], ["B-NP", "I-NP", "O"]),
        (["a", "big", "dog", "ran", "home"], ["B-NP", "I-NP", "I-NP", "O", "B-NP"]),
        (["cats", "sleep"], ["B-NP", "O"]),
    ] * 4
    for name, rows in (("train.txt", data), ("test.txt", data[:3])):
        text = "\n\n".join("\n".join(f"{w} X {t}" for w, t in zip(words, tags)) for words, tags in rows)
        (tmp_path / name).write_text(text + "\n")
    (tmp_path / "raw.txt").write_text("The dog sat on the mat. A cat ran home.\n\nDogs sleep.\n")
    argv = ["tag-bilstm", "--train", str(tmp_path / "train.txt"), "--test", str(tmp_path / "test.txt")]
    argv += [
        "--columns",
        "word,pos,chunk",
        "--dev-sentences",
        "3",
        "--cvt",
        "--unlabeled",
        str(tmp_path / "raw.txt"),
    ]
    return argv


def _parsing_files(tmp_path) -> list[str]:
    sentence = "1\tthe\t_\t_\t_\t_\t2\tdet\t_\t_\n2\tcat\t_\t_\t_\t_\t3\tnsubj\t_\t_\n3\tsat\t_\t_\t_\t_\t0\troot\t_\t_\n"
    other = "1\ta\t_\t_\t_\t_\t2\tdet\t_\t_\n2\tdog\t_\t_\t_\t_\t0\troot\t_\t_\n"
    (tmp_path / "train.conllu").write_text("\n".join([sentence, other] * 6))
    (tmp_path / "test.conllu").write_text("\n".join([sentence, other]))
    return [
        "parse-bilstm",
        "--train",
        str(tmp_path / "train.conllu"),
        "--test",
        str(tmp_path / "test.conllu"),
    ]


SMALL = [
    "--batch-size",
    "4",
    "--warmup-steps",
    "2",
    "--word-dim",
    "8",
    "--char-dim",
    "4",
    "--char-filters",
    "3",
]
SMALL += ["--lstm1", "8", "--lstm2", "8", "--projection", "8", "--eval-every", "3", "--save-every", "2"]


def _weights(folder):
    return read_safetensors(folder / "model.safetensors")


def _history(folder):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in json.loads((folder / "results.json").read_text())["history"]]  # fmt: skip


@pytest.mark.parametrize("files", [_tagging_files, _parsing_files])
def test_a_killed_run_resumes_to_the_same_weights_and_scores(tmp_path, monkeypatch, capsys, files):
    argv = [*files(tmp_path), *SMALL, "--dev-sentences", "3", "--max-steps", "8"]
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    assert main([*argv, "--output", str(straight)]) == 0

    real = cvt_train.save_checkpoint

    def save_then_die(path, *args):
        real(path, *args)
        if args[-2].labeled == 4:  # the Progress
            raise KeyboardInterrupt("killed after the update-4 checkpoint")

    monkeypatch.setattr(cvt_train, "save_checkpoint", save_then_die)
    assert main([*argv, "--output", str(cut)]) == 130  # the command's answer to Ctrl-C
    monkeypatch.setattr(cvt_train, "save_checkpoint", real)
    assert not (cut / "seed-1" / "results.json").exists()
    assert main([*argv, "--output", str(cut)]) == 2  # no silent restart over a cut-short run
    assert "--resume" in capsys.readouterr().err
    assert main([*argv, "--output", str(cut), "--resume"]) == 0
    assert "resumed from" in capsys.readouterr().err
    a, b = _weights(straight / "seed-1"), _weights(cut / "seed-1")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _history(straight / "seed-1") == _history(cut / "seed-1")
    predictions = "test_predictions.txt"
    assert (straight / "seed-1" / predictions).read_text() == (cut / "seed-1" / predictions).read_text()


def test_a_longer_max_steps_goes_on_and_finished_seeds_are_reused(tmp_path, capsys):
    argv = [*_tagging_files(tmp_path), *SMALL, "--dev-sentences", "3", "--output", str(tmp_path / "out")]
    assert main([*argv, "--max-steps", "4", "--seeds", "2"]) == 0
    assert main([*argv, "--max-steps", "4", "--seeds", "2", "--resume"]) == 0
    assert capsys.readouterr().err.count("finished earlier, reusing") == 2
    (tmp_path / "out" / "seed-2" / "results.json").unlink()  # seed 2 goes on from its update-4 checkpoint
    assert main([*argv, "--max-steps", "8", "--seeds", "2", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "seed 1: finished earlier" in err and "seed 2: resumed from" in err
    rows = json.loads((tmp_path / "out" / "seed-2" / "results.json").read_text())["history"]
    assert [row["step"] for row in rows] == [3, 4, 6, 8]


def test_a_checkpoint_of_other_settings_is_refused_in_one_line(tmp_path, capsys):
    argv = [*_tagging_files(tmp_path), *SMALL, "--dev-sentences", "3", "--output", str(tmp_path / "out")]
    assert main([*argv, "--max-steps", "4"]) == 0
    (tmp_path / "out" / "seed-1" / "results.json").unlink()
    capsys.readouterr()
    assert main([*argv, "--max-steps", "6", "--resume", "--learning-rate", "0.1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "checkpoint.safetensors: this checkpoint is of another run (learning_rate 0.5 -> 0.1)" in err[-1]
    assert not any("step" in line for line in err)  # refused before any training
    assert main([*argv, "--max-steps", "2", "--resume"]) == 2
    assert "past --max-steps 2" in capsys.readouterr().err
    assert main([*argv, "--max-steps", "4", "--resume", "--overwrite"]) == 2
