"""`bench/gpu_checks.sh cpu` runs the GPU checks' own paths on the CPU (the profile, the throughput pair, a launched
pretraining run with the time clock), so the script a GPU's few minutes depend on is exercised on every change."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import write_distinct_corpus

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checks(tmp_path_factory) -> Path:
    if shutil.which("accelerate") is None:
        pytest.fail("accelerate's launcher is not on PATH; `pip install -e .` installs it")
    work = tmp_path_factory.mktemp("gpu-checks")
    corpus = write_distinct_corpus(work / "corpus")
    out = work / "out"
    done = subprocess.run(
        ["bash", "bench/gpu_checks.sh", "cpu", str(out), str(corpus)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_throughput_pair_is_timed_at_the_cpu_shapes(checks):
    report = json.loads((checks / "throughput.json").read_text())
    assert (report["args"]["device"], report["args"]["size"]) == ("cpu", "tiny")
    assert (report["args"]["batch_size"], report["args"]["seq_len"], report["args"]["steps"]) == (4, 32, 3)
    assert [row["variant"] for row in report["rows"]] == ["baseline (HF naive, fp32)", "ours electra fp32"]
    for row in report["rows"]:
        rate = row["tokens_per_second"]
        assert 0 < rate["min"] <= rate["median"] <= rate["max"]
        assert 0 < row["mfu"] < 1


def test_the_profile_shares_the_step_among_operators(checks):
    profile = json.loads((checks / "profile.json").read_text())
    assert profile["device"] == "cpu" and profile["seconds_per_step"] > 0
    shares = [row["share"] for row in profile["rows"]]
    assert shares == sorted(shares, reverse=True)
    assert 0.5 < sum(shares) <= 1.0 + 1e-6  # the 30 largest rows hold most of the step


def test_the_launched_run_stops_at_its_steps_with_its_curves(checks):
    summary = json.loads((checks / "summary.json").read_text())
    assert summary["step"] == 4 and summary["stop_reason"] == "max_steps"
    with (checks / "metrics.csv").open() as handle:
        logged = list(csv.DictReader(handle))
    rows = [row for row in logged if row["train/flops"]]  # the training rows (the last row is the evaluation)
    assert [int(row["step"]) for row in rows] == [2, 4]
    assert [int(row["step"]) for row in logged if row["eval/loss"]] == [4]
    # every step costs the same FLOPs, so the count at step 4 is twice the count at step 2
    assert float(rows[1]["train/flops"]) == pytest.approx(2 * float(rows[0]["train/flops"]), rel=1e-9)
    assert summary["flops"] == pytest.approx(float(rows[1]["train/flops"]), rel=1e-9)
    assert (checks / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wall seconds:" in (checks / "pretrain.log").read_text()
