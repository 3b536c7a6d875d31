"""Two nodes simulated on this host: two `torchrun --nnodes 2 --node_rank R` launches (one process each) meeting at
a rendezvous on 127.0.0.1, as two machines of a cluster would. Pretraining and GLUE train across them, one process
writes, and a run stopped on one node (its scheduler's signal) resumes across both to the weights of a run that was
never stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.export.checkpoint import checkpoint_step, latest_checkpoint
from electra.training import preemption
from electra.training.run_log import read_metrics
from tests.conftest import MICRO, save_tiny_electra, write_distinct_corpus
from tests.test_multiprocess_consumers import _stsb

pytestmark = pytest.mark.slow  # each test starts two launchers and their workers (about a minute on 2 cores)

STEPS = 12


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _nodes(args: list[str], cwd: Path) -> list[subprocess.Popen]:
    """One launcher per simulated node, both started at once (the rendezvous waits for both)."""
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", TQDM_DISABLE="1")
    launchers = []
    for rank in (0, 1):
        launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1"]
        launch += ["--node_rank", str(rank), "--master_addr", "127.0.0.1", "--master_port", str(port)]
        launchers.append(
            subprocess.Popen(
                [*launch, "-m", "electra", *args],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return launchers


def _finish(launchers: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    results = []
    for launcher in launchers:
        out, err = launcher.communicate(timeout=600)
        results.append((launcher.returncode, out, err))
    return results


def _pretrain(corpus: Path, output: Path, cache: Path, resume: bool = False) -> list[str]:
    settings = {**MICRO, "max_steps": STEPS, "save_every": 1000, "log_every": 1}
    args = ["pretrain", "--size", "tiny", "--corpus", str(corpus), "--output", str(output)]
    args += ["--cache-dir", str(cache), "--no-plot", "--no-progress"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    return args + (["--resume"] if resume else [])


def _worker_of(launcher: subprocess.Popen) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("the launcher started no worker")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")
def test_pretraining_across_two_nodes_writes_once_and_resumes_after_a_stop(tmp_path):
    corpus, cache = write_distinct_corpus(tmp_path / "corpus"), tmp_path / "cache"
    straight = tmp_path / "straight"
    for code, _, err in _finish(_nodes(_pretrain(corpus, straight, cache), tmp_path)):
        assert code == 0, err[-3000:]
    record = json.loads((straight / "run.json").read_text())
    assert record["world_size"] == 2
    steps = [row["step"] for row in read_metrics(straight, "train")]
    assert steps == [float(s) for s in range(1, STEPS + 1)]  # one writer: every step logged once

    stopped = tmp_path / "stopped"
    launchers = _nodes(_pretrain(corpus, stopped, cache), tmp_path)
    worker = _worker_of(launchers[1])  # the second node's process
    deadline = time.monotonic() + 600
    while not (stopped / "metrics.csv").is_file() or len(read_metrics(stopped, "train")) < 3:
        assert time.monotonic() < deadline and launchers[0].poll() is None
        time.sleep(0.01)
    sent = time.monotonic()
    os.kill(worker, signal.SIGUSR1)  # what the second node's scheduler sends
    results = _finish(launchers)
    seconds = time.monotonic() - sent
    at = checkpoint_step(latest_checkpoint(stopped / "checkpoints"))
    assert at == max(row["step"] for row in read_metrics(stopped, "train")) and at < STEPS
    errors = "".join(err for _, _, err in results)
    assert f"after update {at}; its checkpoint is saved" in errors, errors[-3000:]
    print(f"two nodes: both launchers ended {seconds:.2f} s after the signal, at update {at}")

    for code, _, err in _finish(_nodes(_pretrain(corpus, stopped, cache, resume=True), tmp_path)):
        assert code == 0, err[-3000:]
    a = load_file(str(straight / "discriminator" / "model.safetensors"))
    b = load_file(str(stopped / "discriminator" / "model.safetensors"))
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert preemption.PREEMPTED_STATUS == 75


def test_glue_across_two_nodes_reports_once(tmp_path):
    model, data = save_tiny_electra(tmp_path / "tiny", dropout=False), _stsb(tmp_path)
    args = ["glue", "--model", str(model), "--task", "stsb", "--data-dir", str(data), "--max-steps", "6"]
    args += ["--batch-size", "16", "--learning-rate", "1e-3", "--max-seq-length", "32", "--no-progress"]
    args += ["--output", str(tmp_path / "two")]
    results = _finish(_nodes(args, tmp_path))
    for code, _, err in results:
        assert code == 0, err[-3000:]
    # progress lines come from each node's first process (Accelerate's print); the results table from the first
    # process of all, once
    assert [out.count("stsb seed 1:") for _, out, _ in results] == [1, 1]
    assert sum(out.count("other metrics (median)") for _, out, _ in results) == 1
    report = json.loads((tmp_path / "two" / "results.json").read_text())
    assert report["runs"]["stsb"][0]["steps"] == 6
