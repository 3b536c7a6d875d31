"""Behaviour is preserved: a fixed-seed `tiny` run still computes what the recorded trace says (tests/golden_trace.py).

On the machine that recorded it the numbers are bitwise equal; on another CPU of the same kind the matrix kernels
may sum in another order, so losses are compared to 1e-4 and the discrete metrics (accuracies, fractions) to one
token in a thousand. Another torch release changes kernels too, and over 20 steps of training the difference
compounds: with torch 2.6 against a trace recorded on 2.13, gradient norms moved by up to 1.2e-3 (relative), losses
by 2.3e-4 and the AUC by 7.8e-4 (inside its tolerance), so under a release other than the trace's the continuous
values are compared to 3e-3. So are they on a CPU of another kind (the trace records ATen's CPU capability, AVX2 or
AVX512: MKL and ATen choose their kernels by it): on an AVX-512 Xeon a trace recorded on an AVX2 EPYC moved a
gradient norm by 5e-4 at step 15. That is still under what a changed objective, mask or schedule moves.
The corpus is the file the package ships (`electra/data/embedded/`), the same bytes on every Python and host; a
digest other than the recorded one means the corpus changed and the recording is stale: a failure, never a skip.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests import golden_trace

TRACE = Path(__file__).parent / "golden" / "trace.json"
CONTINUOUS = ("loss", "grad_norm", "learning_rate", "flops", "energy")


def _close(name: str, recorded: float, now: float, relative: float = 1e-4) -> bool:
    """`relative` is the tolerance of the continuous values; the discrete ones are held to one token in a thousand."""
    if math.isnan(recorded) or math.isnan(now):
        return math.isnan(recorded) and math.isnan(now)
    if any(part in name for part in CONTINUOUS):
        return now == pytest.approx(recorded, rel=relative, abs=1e-7)
    return abs(now - recorded) <= 1e-3 + 1e-3 * abs(recorded)


def _same_kernels(recorded: dict) -> bool:
    """Whether this run's kernels are the recording's: the same torch release on a CPU of the same kind (a trace
    from before the kind was recorded came from an AVX2 host)."""
    same_release = recorded["torch"] == golden_trace.torch_release()
    return same_release and recorded.get("cpu", "AVX2") == golden_trace.cpu_kind()


def test_the_recording_is_of_the_embedded_corpus(tmp_path):
    """Fast, and not marked slow: a changed corpus fails here in every run of the suite, not only the slow one."""
    import hashlib

    from electra.data.embedded_corpus import ensure_embedded_corpus

    digest = hashlib.sha256(ensure_embedded_corpus(tmp_path).read_bytes()).hexdigest()
    recorded = json.loads(TRACE.read_text())["corpus_sha256"]
    assert digest == recorded, (
        f"the embedded corpus's SHA-256 is {digest}, the trace was recorded on {recorded}: the recording is "
        "stale; re-record it (python -m tests.golden_trace --write tests/golden/trace.json) and say why"
    )


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("golden")
    _, _, digest = golden_trace.corpus_and_vocab(work)
    recorded = json.loads(TRACE.read_text())
    assert digest == recorded["corpus_sha256"], (
        f"the embedded corpus's SHA-256 is {digest}, the trace was recorded on {recorded['corpus_sha256']}: the "
        "recording is stale; re-record it (python -m tests.golden_trace --write tests/golden/trace.json) and say why"
    )
    return {"now": golden_trace.record(work), "recorded": recorded}


@pytest.mark.slow
def test_every_objective_trains_as_recorded(trace):
    now, recorded = trace["now"]["steps"], trace["recorded"]["steps"]
    relative = 1e-4 if _same_kernels(trace["recorded"]) else 3e-3
    assert set(now) == set(recorded) == set(golden_trace.OBJECTIVES)
    bitwise = True
    for objective, rows in recorded.items():
        assert len(now[objective]) == len(rows) == golden_trace.STEPS, objective
        for step, (was, is_) in enumerate(zip(rows, now[objective]), start=1):
            assert set(is_) == set(was), f"{objective} step {step}: metrics {set(is_) ^ set(was)}"
            for name, value in was.items():
                bitwise &= is_[name] == value or (math.isnan(value) and math.isnan(is_[name]))
                assert _close(name, value, is_[name], relative), (
                    f"{objective} step {step} {name}: {value} -> {is_[name]}"
                )
    print("golden trace bitwise equal:", bitwise)


@pytest.mark.slow
def test_glue_fine_tune_scores_as_recorded(trace):
    """Held to 1e-3 on the recording's kernels; on others (an AVX-512 host against an AVX2 recording moved the
    Pearson correlation by 1.3e-3) to the 3e-3 the trace allows every continuous value there."""
    relative = 1e-3 if _same_kernels(trace["recorded"]) else 3e-3
    for name, value in trace["recorded"]["glue_stsb"].items():
        assert trace["now"]["glue_stsb"][name] == pytest.approx(value, rel=relative, abs=1e-4), name


@pytest.mark.slow
def test_every_scoring_method_scores_as_recorded(trace):
    assert set(trace["now"]["pll"]) == set(trace["recorded"]["pll"])
    for key, values in trace["recorded"]["pll"].items():
        relative = 1e-4 if _same_kernels(trace["recorded"]) else 3e-3
        assert trace["now"]["pll"][key] == pytest.approx(values, rel=relative), key
