"""Whole runs: real data, the CLI as users call it, several processes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from electra.app.cli import main
from electra.training.run_log import read_metrics

REPO = Path(__file__).resolve().parents[1]
MICRO_FLAGS = [
    "--set",
    "hidden_size=32",
    "--set",
    "num_attention_heads=2",
    "--set",
    "intermediate_size=64",
    "--set",
    "embedding_size=24",
    "--set",
    "num_hidden_layers=2",
    "--set",
    "max_seq_length=48",
    "--set",
    "tokenizer_vocab_size=600",
    "--set",
    "train_batch_size=8",
    "--set",
    "log_every=2",
]


def _rows(run_dir: Path) -> list[dict[str, float]]:
    return read_metrics(run_dir, "train")


@pytest.mark.slow
@pytest.mark.long
def test_tiny_learns_on_real_text(shared_data, tmp_path):
    """300 steps of `tiny` on the Brown corpus: losses fall and the discriminator ranks replaced tokens above chance.

    At this length the discriminator's accuracy is still at the always-"original" baseline on Brown (the default
    embedded-corpus run passes it after ~300 steps), so learning is checked by its AUC, which rises long before any
    token is judged more likely replaced than not. The AUC is high in the first steps (a random generator's samples
    are easy to spot), drops once the generator has learnt word frequencies, then climbs as context is learnt.
    """
    out = tmp_path / "run"
    code = main(
        [
            "pretrain",
            "--size",
            "tiny",
            "--corpus",
            str(shared_data / "corpus" / "brown"),
            "--output",
            str(out),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--max-steps",
            "300",
            "--set",
            "log_every=30",
            "--set",
            "save_every=300",
        ]
    )
    assert code == 0
    rows = _rows(out)
    first, last = rows[0], rows[-1]
    assert last["generator_loss"] < first["generator_loss"] - 1.5
    peak = max(row["discriminator_loss"] for row in rows)
    assert last["discriminator_loss"] < peak - 0.005  # falls once the generator's samples stop being random
    assert last["discriminator_auc"] > 0.52
    baseline = 1.0 - last["replaced_fraction"]  # accuracy of always answering "original"
    assert last["discriminator_accuracy"] >= baseline - 1e-3
    assert (out / "curves.png").stat().st_size > 10_000


@pytest.mark.slow
def test_two_cpu_processes(small_corpus, tmp_path):
    """Two gloo processes on a CPU-only machine. (accelerate's `--cpu` launcher starts only one process; its
    `--multi_gpu` launcher runs torchrun, and our Accelerator falls back to CPU + gloo when there is no GPU.)"""
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(REPO / "pretrain.py"),
        "--corpus",
        str(small_corpus),
        "--output",
        str(out),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--max-steps",
        "4",
        "--no-plot",
        *MICRO_FLAGS,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 processes x 4" in done.stdout
    assert [row["step"] for row in _rows(out)] == [2.0, 4.0]
    from safetensors.torch import load_file
    from transformers import ElectraForPreTraining

    ElectraForPreTraining.from_pretrained(out / "discriminator")
    # A two-process run equals itself on rerun (each process's own random stream is derived deterministically).
    again = [part if part != str(out) else str(tmp_path / "again") for part in command]
    done = subprocess.run(again, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    first = load_file(str(out / "discriminator" / "model.safetensors"))
    second = load_file(str(tmp_path / "again" / "discriminator" / "model.safetensors"))
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def _fails(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]  # progress bars may precede it; the error itself is one line
    assert last.startswith("electra pretrain: error:"), err
    return last


def test_bad_input_gives_one_line_errors(tmp_path, small_corpus, capsys):
    common = ["--cache-dir", str(tmp_path / "cache"), "--no-plot", *MICRO_FLAGS]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert "empty" in _fails(
        capsys, ["pretrain", "--corpus", str(empty), "--output", str(tmp_path / "a"), *common]
    )
    assert "does not exist" in _fails(
        capsys, ["pretrain", "--corpus", str(tmp_path / "nope"), "--output", str(tmp_path / "b"), *common]
    )
    latin = tmp_path / "latin"
    latin.mkdir()
    (latin / "x.txt").write_bytes(b"\x00\x9f\xff binary \x00\x01" * 50)
    assert "x.txt" in _fails(
        capsys, ["pretrain", "--corpus", str(latin), "--output", str(tmp_path / "c"), *common]
    )
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\nthe\n")
    assert "vocab.txt lacks" in _fails(
        capsys,
        [
            "pretrain",
            "--corpus",
            str(small_corpus),
            "--vocab",
            str(vocab),
            "--output",
            str(tmp_path / "d"),
            *common,
        ],
    )
    assert "hiden_size" in _fails(
        capsys,
        ["pretrain", "--corpus", str(small_corpus), "--set", "hiden_size=3", "--output", str(tmp_path / "e")],
    )
    assert "nothing" not in _fails(
        capsys,
        ["pretrain", "--corpus", str(small_corpus), "--resume", "--output", str(tmp_path / "f"), *common],
    )
    # No half-written cache survives a failed build: the next run with good data works from scratch.
    cache = tmp_path / "cache" / "examples"
    assert not cache.exists() or all(p.name.startswith(".") is False for p in cache.iterdir())


def test_a_wrong_path_is_answered_before_the_models_are_imported(tmp_path):
    """Before: a missing corpus took 4-8 s to report, torch and transformers being imported first."""
    code = (
        "import sys; from electra.app.cli import main; "
        f"assert main(['pretrain', '--corpus', {str(tmp_path / 'missing')!r}]) == 2; "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False False", done.stderr
    assert "does not exist" in done.stderr
