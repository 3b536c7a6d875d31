"""A scheduler's signal while a run trains (SIGTERM, or SIGUSR1 as SLURM's `--signal` sends it) stops the run after
the update in progress, with a checkpoint of that update, and exit status 75; `--resume` then ends on the weights
and losses of a run that was never stopped, with no update lost. Outside training the signal stops the command at
once, as before."""

from __future__ import annotations

import json
import math
import os
import signal
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
from electra.training.stop_rules import StopRules
from tests.conftest import MICRO, one_thread_environment, pretrain_child, write_distinct_corpus

STEPS = 16


class _OneProcess:
    num_processes = 1


class _Args:
    flops_budget = None
    time_budget = None
    max_steps = STEPS
    log_every = 10


def test_a_signal_while_training_stops_after_the_update_in_progress():
    stops = StopRules(_Args(), _OneProcess(), None, 0, 0.0)
    with preemption.deferring():
        assert not stops.after_update(1, 0.0)
        assert preemption.defer(signal.SIGUSR1)  # what the command line's handler does with the signal
        assert stops.after_update(2, 0.0) and stops.reason == "preempted" and stops.preempted
    assert not preemption.defer(signal.SIGTERM)  # outside training: the command stops at once


def _command(corpus: Path, output: Path, cache: Path, resume: bool = False) -> list[str]:
    # no periodic checkpoint: the one a stopped run leaves is the one the signal made
    settings = {**MICRO, "max_steps": STEPS, "save_every": 1000, "log_every": 1}
    return pretrain_child(corpus, output, cache, settings, resume)


_environment = one_thread_environment


def _logged_steps(run: Path) -> list[float]:
    if not (run / "metrics.csv").is_file():
        return []
    return [row["step"] for row in read_metrics(run, "train")]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[Path, Path, Path]:
    work = tmp_path_factory.mktemp("preemption")
    corpus, cache = write_distinct_corpus(work / "corpus"), work / "cache"
    done = subprocess.run(
        _command(corpus, work / "straight", cache),
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return corpus, cache, work / "straight"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_a_preempted_run_saves_its_last_update_and_resumes_bit_for_bit(straight, tmp_path, signum):
    corpus, cache, uninterrupted = straight
    stopped = tmp_path / "stopped"
    child = subprocess.Popen(
        _command(corpus, stopped, cache), env=_environment(), stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 600
        while len(_logged_steps(stopped)) < 3 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        sent = time.monotonic()
        os.kill(child.pid, signum)
        _, stderr = child.communicate(timeout=120)
        seconds = time.monotonic() - sent
    finally:
        child.kill()
    assert child.returncode == preemption.PREEMPTED_STATUS, stderr[-3000:]
    at = checkpoint_step(latest_checkpoint(stopped / "checkpoints"))
    # no update lost: the checkpoint holds every update the run logged, and the run stopped before its end
    assert at == max(_logged_steps(stopped)) and 3 <= at < STEPS
    assert f"stopped by {signal.Signals(signum).name} after update {at}; its checkpoint is saved" in stderr
    assert not (stopped / "export.json").exists()
    print(
        f"{signal.Signals(signum).name}: exit {seconds:.2f} s after the signal, at update {at}, 0 updates lost"
    )

    _resume_ends_like(_command(corpus, stopped, cache, resume=True), stopped, uninterrupted)
    losses = {row["step"]: row["loss"] for row in read_metrics(uninterrupted, "train")}
    assert {row["step"]: row["loss"] for row in read_metrics(stopped, "train")} == losses


def _torchrun(corpus: Path, output: Path, cache: Path, resume: bool = False) -> list[str]:
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return launch + _command(corpus, output, cache, resume)[1:]  # `-m electra pretrain ...` as above


def _worker(launcher: subprocess.Popen, rank: int) -> int:
    """The pid of the launcher's worker of this rank (its RANK in the environment)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for child in Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split():
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            if f"RANK={rank}".encode() in environ:
                return int(child)
        time.sleep(0.05)
    raise AssertionError(f"no worker of rank {rank}")


def _signal_rank_one(
    command: list[str], run: Path, logged: int, signum: int, env: dict | None = None
) -> tuple[str, float]:
    """Launch `command` under torchrun, send `signum` to its rank-1 worker once `run` has logged `logged` steps
    (SIGSTOP: a worker that hangs), and wait for the launch to end: (its standard error, seconds from the signal to
    the end)."""
    env = env or {**_environment(), "TQDM_DISABLE": "1"}
    launcher = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        rank1 = _worker(launcher, 1)
        deadline = time.monotonic() + 600
        while len(_logged_steps(run)) < logged and launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        sent = time.monotonic()
        os.kill(rank1, signum)
        _, stderr = launcher.communicate(timeout=300)
        return stderr, time.monotonic() - sent
    finally:
        launcher.kill()


def _resume_ends_like(command: list[str], run: Path, uninterrupted: Path) -> None:
    """`command` (a --resume) succeeds, and `run` ends on `uninterrupted`'s weights bit for bit."""
    env = {**_environment(), "TQDM_DISABLE": "1"}
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = load_file(str(uninterrupted / "discriminator" / "model.safetensors"))
    b = load_file(str(run / "discriminator" / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def _every_four(command: list[str]) -> list[str]:
    """The same run with a checkpoint every 4 updates (what it learns does not change)."""
    return [arg.replace("save_every=1000", "save_every=4") for arg in command]


@pytest.fixture(scope="module")
def straight_two(straight, tmp_path_factory) -> Path:
    """An uninterrupted two-process run, for both two-process tests to end on."""
    corpus, cache, _ = straight
    output = tmp_path_factory.mktemp("two") / "straight"
    env = {**_environment(), "TQDM_DISABLE": "1"}
    done = subprocess.run(
        _every_four(_torchrun(corpus, output, cache)), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return output


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")
def test_two_processes_agree_to_stop_after_the_same_update(straight, straight_two, tmp_path):
    """SIGUSR1 reaches one of two processes only: both stop after the same update, the checkpoint holds it, and a
    two-process --resume ends where an uninterrupted two-process run ends."""
    corpus, cache, _ = straight
    stopped = tmp_path / "stopped"
    stderr, seconds = _signal_rank_one(_torchrun(corpus, stopped, cache), stopped, 3, signal.SIGUSR1)
    at = checkpoint_step(latest_checkpoint(stopped / "checkpoints"))
    assert at == max(_logged_steps(stopped)) and 3 <= at < STEPS, stderr[-3000:]
    assert f"stopped by SIGUSR1 after update {at}; its checkpoint is saved" in stderr  # rank 1
    assert (
        f"stopped by another process's signal after update {at}; its checkpoint is saved" in stderr
    )  # rank 0
    print(
        f"two processes: all exited {seconds:.2f} s after SIGUSR1 to rank 1, at update {at}, 0 updates lost"
    )
    _resume_ends_like(_torchrun(corpus, stopped, cache, resume=True), stopped, straight_two)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")
def test_a_worker_killed_mid_update_ends_the_launch_and_the_resume_is_exact(straight, straight_two, tmp_path):
    """kill -9 of one of two workers in the middle of training: the other stops within seconds (its next collective
    finds the peer gone, and torchrun ends the launch), no checkpoint is left half-written, and a two-process
    --resume from the last complete checkpoint ends on an uninterrupted two-process run's weights bit for bit."""
    corpus, cache, _ = straight
    killed = tmp_path / "killed"
    # a checkpoint every 4 updates: the kill comes between two of them
    stderr, seconds = _signal_rank_one(
        _every_four(_torchrun(corpus, killed, cache)), killed, 6, signal.SIGKILL
    )
    assert seconds < 60, stderr[-3000:]
    print(f"kill -9 of one of two workers: every process had exited {seconds:.2f} s later")
    checkpoints = killed / "checkpoints"
    assert not list(checkpoints.glob(".*")), "a half-written checkpoint was left"
    assert (
        4 <= checkpoint_step(latest_checkpoint(checkpoints)) < STEPS and not (killed / "export.json").exists()
    )
    _resume_ends_like(_every_four(_torchrun(corpus, killed, cache, resume=True)), killed, straight_two)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")
def test_a_two_process_run_continues_on_one_with_elastic(straight, tmp_path):
    """Stopped on two processes, resumed on one with --elastic: the run goes on to its last update with twice the
    accumulation (the same global batch), says so in one line, and its record now names one process; without
    --elastic the same resume is refused."""
    corpus, cache, _ = straight
    stopped = tmp_path / "stopped"
    stderr, _ = _signal_rank_one(_torchrun(corpus, stopped, cache), stopped, 3, signal.SIGUSR1)
    at = checkpoint_step(latest_checkpoint(stopped / "checkpoints"))
    assert 3 <= at < STEPS, stderr[-3000:]
    env = {**_environment(), "TQDM_DISABLE": "1"}
    one = _command(corpus, stopped, cache, resume=True)
    refused = subprocess.run(one, env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "add --elastic" in refused.stderr
    resumed = subprocess.run([*one, "--elastic"], env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "--elastic: continuing a run of 2 process(es) on 1, 2 accumulation steps" in resumed.stdout
    assert _logged_steps(stopped) == [float(s) for s in range(1, STEPS + 1)]
    record = json.loads((stopped / "run.json").read_text())
    assert (record["world_size"], record["gradient_accumulation_steps"]) == (1, 2)
    assert all(math.isfinite(row["loss"]) for row in read_metrics(stopped, "train"))


@pytest.mark.long  # 40 s of it is waiting: the timeout, then the launcher's grace period for the hung worker
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")
def test_a_hung_process_stops_the_others_within_the_collective_timeout(straight, straight_two, tmp_path):
    """One of two workers stops answering (SIGSTOP) mid-training: the other gives up after the library's collective
    timeout, not the backend's 30 minutes, and says so in one line; the launch ends, no checkpoint is left
    half-written, and a two-process --resume ends like an uninterrupted run."""
    corpus, cache, _ = straight
    hung = tmp_path / "hung"
    env = {**_environment(), "TQDM_DISABLE": "1", "ELECTRA_COLLECTIVE_TIMEOUT": "10"}
    stderr, seconds = _signal_rank_one(
        _every_four(_torchrun(corpus, hung, cache)), hung, 5, signal.SIGSTOP, env
    )
    assert "did not answer within the collective timeout" in stderr, stderr[-3000:]
    assert seconds < 120, seconds  # the timeout, then the launcher's stop of the hung worker
    assert not list((hung / "checkpoints").glob(".*partial*"))
    assert checkpoint_step(latest_checkpoint(hung / "checkpoints")) >= 4
    print(f"a hung worker: the launch ended {seconds:.1f} s after it stopped answering (timeout 10 s)")
    _resume_ends_like(_every_four(_torchrun(corpus, hung, cache, resume=True)), hung, straight_two)


FULL_DISK = """
import errno, os
if os.environ.get("RANK") == "0":
    import electra.export.checkpoint as checkpoint
    real = checkpoint._save_optimizer
    def _full(optimizer, directory):
        if "step-00000008" in str(directory):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(optimizer, directory)
    checkpoint._save_optimizer = _full
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")
def test_a_full_disk_on_the_writing_process_stops_both_and_resumes(straight, straight_two, tmp_path):
    """The disk fills while the main process writes the step-8 checkpoint (ENOSPC from the optimizer's file): it
    removes what it wrote and stops with one line, the other process stops within seconds, step 4's checkpoint is
    intact, and a two-process --resume ends like an uninterrupted run."""
    corpus, cache, _ = straight
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(FULL_DISK)
    env = {**_environment(), "TQDM_DISABLE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "site"), env.get("PYTHONPATH")]))
    full = tmp_path / "full"
    started = time.monotonic()
    done = subprocess.run(
        _every_four(_torchrun(corpus, full, cache)), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode != 0
    assert "could not write the step-8 checkpoint (No space left on device)" in done.stderr, done.stderr[
        -3000:
    ]
    assert "Nothing half-written was left" in done.stderr
    assert "process 1 of 2 stopped because another process of the launch ended first" in done.stderr
    checkpoints = sorted(p.name for p in (full / "checkpoints").iterdir() if p.is_dir())
    assert checkpoints == ["step-00000004"]  # no partial folder beside it
    print(f"a full disk: the launch ended {time.monotonic() - started:.1f} s after it started")
    _resume_ends_like(_every_four(_torchrun(corpus, full, cache, resume=True)), full, straight_two)
