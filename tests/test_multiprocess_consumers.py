"""The consumers of the training engine (GLUE, SQuAD, TLM, `pretrain --per-device-batch-size`) under two CPU
processes started by torchrun, against the same command in one process.

Every model here has no dropout, so one and two processes train the same updates (the same global batches, the
gradients summed in another order) and must report the same metrics and write the same predictions. Each test
launches `python -m torch.distributed.run --standalone --nproc_per_node 2 -m electra ...` as a user would.
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from electra.app.cli import main
from tests.conftest import run_command_as, save_tiny_electra
from tests.golden_trace import WORDS

pytestmark = pytest.mark.slow  # each test launches torchrun (10-30 s on 2 cores)


def _torchrun(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "electra",
        *args,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", TQDM_DISABLE="1")
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def _model(root: Path) -> Path:
    """A tiny random ELECTRA without dropout and its word-level tokenizer (no shared data needed)."""
    return save_tiny_electra(root / "tiny", dropout=False)


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randrange(4, 12)))


def _stsb(root: Path) -> Path:
    """STS-B in the GLUE layout: 96 training pairs, 77 dev pairs (an odd count: no evenly split last batch), 41
    test pairs."""
    rng = random.Random(0)
    header = [
        "index",
        "genre",
        "filename",
        "year",
        "old_index",
        "source1",
        "source2",
        "sentence1",
        "sentence2",
    ]
    folder = root / "glue" / "STS-B"
    folder.mkdir(parents=True)
    for name, rows in (("train", 96), ("dev", 77), ("test", 41)):
        lines = ["\t".join(header + ([] if name == "test" else ["score"]))]
        for i in range(rows):
            row = [str(i), "main", "f", "2012", str(i), "none", "none", _sentence(rng), _sentence(rng)]
            lines.append("\t".join(row + ([] if name == "test" else [f"{rng.uniform(0, 5):.3f}"])))
        (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    return root / "glue"


def _squad_file(root: Path) -> Path:
    rng = random.Random(1)
    paragraphs = []
    for p in range(7):
        words = [rng.choice(WORDS) for _ in range(30)]
        qas = []
        for q in range(5):
            at = rng.randrange(28)
            start = len(" ".join(words[:at])) + (1 if at else 0)
            answer = {"text": " ".join(words[at : at + 2]), "answer_start": start}
            question = "what " + " ".join(rng.sample(WORDS, 3)) + " ?"
            qas.append({"id": f"p{p}q{q}", "question": question, "answers": [answer]})
        paragraphs.append({"context": " ".join(words), "qas": qas})
    path = root / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "words", "paragraphs": paragraphs}]}))
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _interrupt(run: Path, step: int) -> None:
    """Make a finished GLUE seed look killed right after its step-`step` checkpoint."""
    checkpoints = run / "checkpoints"
    for later in checkpoints.glob("step-*"):
        if int(later.name.split("-")[1]) > step:
            shutil.rmtree(later)
    (checkpoints / "latest").write_text(f"step-{step:08d}\n")
    (run / "result.json").unlink()


def test_glue_two_processes_report_what_one_reports_and_refuse_a_resume_with_another_count(tmp_path, capsys):
    """Before: `glue` built its Accelerator without asking for the CPU, so on a machine without a GPU each
    torchrun process ran alone on all the data, and the second stopped on the first's output lock. And a
    checkpoint was continued by another number of processes: 2 -> 1 quietly (rank 0's random stream only), 1 -> 2
    with one process's error and the other's gloo traceback."""
    model, data = _model(tmp_path), _stsb(tmp_path)
    flags = ["glue", "--model", str(model), "--task", "stsb", "--data-dir", str(data), "--max-steps", "6"]
    flags += ["--batch-size", "16", "--learning-rate", "1e-3", "--max-seq-length", "32", "--predict-test"]
    flags += ["--save-every", "3", "--no-progress"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*flags, "--output", str(one)]) == 0
    done = _torchrun([*flags, "--output", str(two)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("stsb seed 1:") == 1  # the main process reports, once
    first, second = (json.loads((out / "results.json").read_text()) for out in (one, two))
    for metric in ("pearson", "spearman"):
        assert second["results"]["stsb"]["per_seed"][metric] == pytest.approx(
            first["results"]["stsb"]["per_seed"][metric], abs=5e-4
        )
    run_one, run_two = first["runs"]["stsb"][0], second["runs"]["stsb"][0]
    assert run_two["steps"] == run_one["steps"] == 6
    assert run_two["eval_shapes"] == run_one["eval_shapes"]  # every dev and test pair once: 77 + 41
    assert sum(run_two["eval_shapes"].values()) == 77 + 41
    test_one = (one / "glue_test" / "STS-B.tsv").read_text().splitlines()
    test_two = (two / "glue_test" / "STS-B.tsv").read_text().splitlines()
    assert len(test_two) == 1 + 41 and [r.split("\t")[0] for r in test_two] == [
        r.split("\t")[0] for r in test_one
    ]
    assert [float(r.split("\t")[1]) for r in test_two[1:]] == pytest.approx(
        [float(r.split("\t")[1]) for r in test_one[1:]], abs=2e-3
    )
    seed_dir = two / "runs" / "stsb" / "seed-1"
    assert len(list((seed_dir / "logs").glob("events.out.tfevents.*"))) == 1  # one writer of the logs
    losses = [float(row["train/loss"]) for row in _rows(seed_dir / "metrics.csv")]
    expected = [float(row["train/loss"]) for row in _rows(one / "runs" / "stsb" / "seed-1" / "metrics.csv")]
    assert losses == pytest.approx(expected, rel=1e-4)
    assert sorted(p.name for p in (seed_dir / "checkpoints" / "step-00000006").glob("rng-rank*.json")) == [
        "rng-rank0.json",
        "rng-rank1.json",
    ]

    # Resumes with another number of processes are refused, in one line, by every process alike.
    _interrupt(seed_dir, 3)
    _interrupt(one / "runs" / "stsb" / "seed-1", 3)
    capsys.readouterr()
    assert main([*flags, "--output", str(two), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was written by 2 process(es), this launch has 1" in err[0], err
    done = _torchrun([*flags, "--output", str(one), "--resume"], tmp_path)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("electra glue: error:")]
    assert errors and all("was written by 1 process(es), this launch has 2" in line for line in errors), (
        errors
    )
    assert "[rank0]" not in done.stderr and "[rank1]" not in done.stderr  # no process's traceback
    # The same number of processes continues to the uninterrupted run's result.
    done = _torchrun([*flags, "--output", str(two), "--resume"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = json.loads((two / "results.json").read_text())
    assert resumed["results"]["stsb"]["per_seed"] == second["results"]["stsb"]["per_seed"]


def test_squad_batch_is_split_over_processes_and_predictions_match_one_process(tmp_path):
    """Before: `squad --batch-size` was per process (two processes trained batches of 2x the paper's 32 on twice
    the windows per step), unlike `glue` and `pretrain`, whose --batch-size is the whole step's."""
    model, data = _model(tmp_path), _squad_file(tmp_path)
    flags = ["squad", "--model", str(model), "--train", str(data), "--eval", str(data), "--max-steps", "4"]
    flags += ["--max-seq-length", "64", "--max-query-length", "16", "--doc-stride", "32", "--batch-size", "8"]
    flags += ["--eval-batch-size", "7", "--learning-rate", "1e-3", "--no-progress"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*flags, "--output", str(one)]) == 0
    done = _torchrun([*flags, "--output", str(two)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (json.loads((out / "results.json").read_text()) for out in (one, two))
    assert second["train"]["steps"] == first["train"]["steps"] == 4
    for loss in ("first_loss", "final_loss"):  # the whole batch's, not the main process's share
        assert second["train"][loss] == pytest.approx(first["train"][loss], rel=1e-4)
    assert second["eval"]["total"] == first["eval"]["total"] == 35
    assert second["eval"]["f1"] == pytest.approx(first["eval"]["f1"], abs=1e-9)
    losses = [float(row["train/loss"]) for row in _rows(two / "train" / "metrics.csv")]
    assert losses == pytest.approx(
        [float(row["train/loss"]) for row in _rows(one / "train" / "metrics.csv")], rel=1e-4
    )
    predictions = json.loads((two / "predictions.json").read_text())
    assert len(predictions) == 35 and predictions == json.loads((one / "predictions.json").read_text())


def test_tlm_batch_is_split_over_processes(tmp_path):
    """Before: `tlm train --batch-size` (and --finetune-batch-size) were per process: two processes spent twice the
    FLOPs per stage-1 step and ran half the stage-2 steps per epoch of one process with the same flags."""
    rng = random.Random(2)
    topics = {"a": WORDS[:6], "b": WORDS[6:]}
    for name, rows in (("train", 64), ("dev", 21), ("test", 19)):
        lines = []
        for i in range(rows):
            label = "ab"[i % 2]
            lines.append(" ".join(rng.choice(topics[label]) for _ in range(10)) + f"\t{label}")
        (tmp_path / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    flags = [
        "tlm",
        "train",
        "--objective",
        "mlm",
        "--rho1",
        "0",
        "--rho2",
        "1",
        "--steps",
        "2",
        "--batch-size",
        "8",
    ]
    flags += ["--finetune-epochs", "1", "--finetune-batch-size", "16", "--vocab", str(vocab), "--no-progress"]
    for split in ("train", "dev", "test"):
        flags += [f"--task-{split}", str(tmp_path / f"{split}.tsv")]
    for key, value in (("hidden_size", 32), ("num_hidden_layers", 1), ("intermediate_size", 64)):
        flags += ["--set", f"{key}={value}"]
    flags += ["--set", "num_attention_heads=2", "--set", "max_seq_length=32", "--set", "embedding_size=16"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*flags, "--output", str(one), "--cache-dir", str(tmp_path / "c1")]) == 0
    done = _torchrun([*flags, "--output", str(two), "--cache-dir", str(tmp_path / "c2")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (json.loads((out / "results.json").read_text()) for out in (one, two))
    assert second["stage1_steps"] == first["stage1_steps"] == 2
    assert second["stage1_flops"] == first["stage1_flops"]  # the same sequences per step
    stage2 = [int(row["step"]) for row in _rows(two / "stage2" / "metrics.csv")]
    assert max(stage2) == max(int(row["step"]) for row in _rows(one / "stage2" / "metrics.csv")) == 64 // 16
    # A batch the processes cannot share evenly is refused in one line before any work.
    done = _torchrun([*flags, "--output", str(tmp_path / "odd"), "--batch-size", "7"], tmp_path)
    assert done.returncode != 0
    assert "--batch-size 7 is the batch of one optimizer step over all processes" in done.stderr
    assert "[rank0]" not in done.stderr


def test_pretrain_per_device_batch_counts_every_process(tmp_path, small_corpus, micro_overrides):
    """Before: `pretrain --per-device-batch-size` read the process count from an Accelerate state made without
    asking for the CPU, which then stuck: under torchrun on a CPU both processes ran alone ("1 processes x 8")
    into the same output, and the second stopped on the first's lock."""
    sets = []
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "intermediate_size",
        "num_attention_heads",
        "embedding_size",
    ):
        sets += ["--set", f"{key}={micro_overrides[key]}"]
    for key in ("max_position_embeddings", "max_seq_length", "tokenizer_vocab_size", "warmup_steps"):
        sets += ["--set", f"{key}={micro_overrides[key]}"]
    done = _torchrun(
        ["pretrain", "--corpus", str(small_corpus), "--output", str(tmp_path / "run"), "--cache-dir"]
        + [
            str(tmp_path / "cache"),
            "--max-steps",
            "2",
            "--per-device-batch-size",
            "4",
            "--no-plot",
            "--no-progress",
        ]
        + sets,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "batch 8 = 2 processes x 4 x 1 accumulation" in done.stdout
    assert json.loads((tmp_path / "run" / "run.json").read_text())["world_size"] == 2


def test_two_streaming_processes_pack_disjoint_windows(tmp_path, small_corpus, micro_overrides, monkeypatch):
    """`--streaming` under two processes: each packs every other window of the corpus (its ledger names them),
    and the run trains and exports."""
    monkeypatch.setenv("ELECTRA_STREAM_WINDOW", "3000")
    sets = [f"--set={key}={micro_overrides[key]}" for key in sorted(micro_overrides) if key != "max_steps"]
    done = _torchrun(
        ["pretrain", "--corpus", str(small_corpus), "--output", str(tmp_path / "run"), "--streaming"]
        + ["--max-steps", "4", "--no-plot", "--no-progress", *sets],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "streaming (2 streams" in done.stdout
    windows = {}
    for rank in (0, 1):
        lines = (tmp_path / "run" / "stream" / f"slot-{rank}-of-2.txt").read_text().split("\n")
        windows[rank] = {int(line.split()[0]) for line in lines if line and not line.startswith("end")}
        assert windows[rank] and all(number % 2 == rank for number in windows[rank])
    assert (tmp_path / "run" / "discriminator" / "model.safetensors").is_file()


_ONE_PROCESS_ENDS = """
import os, sys, time
import torch.distributed as dist
from tests.conftest import run_command_as

def collective(args):
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        time.sleep(1)  # the other process is in its barrier by now
        print("electra pretrain: error: the first process's own reason.", file=sys.stderr, flush=True)
        os._exit(2)
    dist.barrier()

sys.exit(run_command_as("pretrain", collective))
"""


def test_a_process_whose_peer_ended_says_so_in_one_line(tmp_path):
    """Before: when one process of a launch stopped on its own one-line error (a full disk at its save, say), the
    other met it inside its next barrier and printed a 20-line `[rank1]: Traceback ... RuntimeError: [.../gloo/
    transport/tcp/pair.cc:553] Connection closed by peer ... GLHF!` that buried the real cause. Now it says in
    one line that another process ended first, and where to read why."""
    script = tmp_path / "one_process_ends.py"
    script.write_text(_ONE_PROCESS_ENDS)
    # torchrun stops the other processes at its next look after one ended: 5 s gives the second time to answer
    launch = [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "--monitor-interval",
        "5",
    ]
    command = [sys.executable, *launch, str(script)]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(Path.cwd()))
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("electra pretrain: error:")]
    assert ours[0] == "electra pretrain: error: the first process's own reason.", done.stderr
    assert len(ours) == 2, done.stderr
    assert ours[1].startswith("electra pretrain: error: process 1 of 2 stopped because another process"), ours
    assert "the backend said: Connection closed by peer" in ours[1], ours
    assert not [line for line in done.stderr.splitlines() if line.startswith("[rank1]")], done.stderr


def test_a_runtime_error_of_the_command_itself_keeps_its_traceback(monkeypatch):
    """The one-line peer message is only for failures raised inside torch.distributed: a bug of our own under a
    launcher still surfaces whole."""

    def broken(args):
        raise RuntimeError("a bug of our own")

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="a bug of our own"):
        run_command_as("pretrain", broken)
