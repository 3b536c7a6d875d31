"""A real process death: `electra pretrain` running in a child process is killed with SIGKILL (no handler, no
`finally`, nothing flushed) once it has written a checkpoint and before it finishes, then `--resume` continues it.
The resumed run must end on the same weights, bit for bit, and log the same losses as an uninterrupted run, on a
corpus where every example differs (so resuming one batch early or late shows)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.export.checkpoint import latest_checkpoint
from electra.training.run_log import read_metrics
from tests.conftest import MICRO, one_thread_environment, pretrain_child, write_distinct_corpus

STEPS = 24
SAVE_EVERY = 4


def _command(corpus: Path, output: Path, cache: Path, resume: bool = False) -> list[str]:
    settings = {**MICRO, "max_steps": STEPS, "save_every": SAVE_EVERY, "log_every": 1, "keep_checkpoints": 2}
    return pretrain_child(corpus, output, cache, settings, resume)


_environment = one_thread_environment


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "discriminator" / "model.safetensors"))


def _losses(run: Path) -> list[tuple[float, float]]:
    return [(row["step"], row["loss"]) for row in read_metrics(run, "train")]


@pytest.mark.slow
def test_a_sigkilled_pretraining_process_resumes_bit_for_bit(tmp_path):
    corpus = write_distinct_corpus(tmp_path / "corpus")
    cache = tmp_path / "cache"  # shared: the vocabulary is trained once (WordPiece differs between processes)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = subprocess.run(
        _command(corpus, straight, cache), env=_environment(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]

    child = subprocess.Popen(
        _command(corpus, killed, cache),
        env=_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        checkpoint = None
        while checkpoint is None and child.poll() is None and time.monotonic() < deadline:
            checkpoint = latest_checkpoint(killed / "checkpoints")
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert checkpoint is not None
    at = int(latest_checkpoint(killed / "checkpoints").name.split("-")[1])
    assert SAVE_EVERY <= at < STEPS and not (killed / "summary.json").exists()

    resumed = subprocess.run(
        _command(corpus, killed, cache, resume=True),
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = _weights(straight), _weights(killed)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # The killed run's log keeps what it wrote before the kill; its rows from the checkpoint on are the resumed
    # run's. Every step's loss is the uninterrupted run's.
    assert dict(_losses(killed)) == dict(_losses(straight))
    assert [step for step, _ in _losses(straight)] == [float(s) for s in range(1, STEPS + 1)]
