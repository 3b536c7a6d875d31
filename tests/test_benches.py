"""The benchmarks run (a tiny shape, one repeat) and agree with what they compare: nothing here is timed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nbest_scoring_bench_paths_agree(tmp_path):
    report = _bench("nbest_scoring").main(
        ["--utterances", "3", "--hypotheses", "6", "--repeats", "1", "--json", str(tmp_path / "r.json")]
    )
    assert report["max_abs_difference"] < 1e-4  # shared towers score what per-sentence towers score
    assert report["left_tower_nodes_per_piece"] < 1 and report["right_tower_nodes_per_piece"] < 1
    assert report["shared"]["sentences_per_s"] > 0 and (tmp_path / "r.json").is_file()


def test_pll_throughput_bench_runs():
    result = _bench("pll_throughput").main(
        ["--size", "tiny", "--sentences", "4", "--length", "5", "--repeats", "1"]
    )
    assert result["electric_sentences_per_s"] > 0 and result["masked_lm_pll_sentences_per_s"] > 0


@pytest.mark.parametrize("name", ["pretrain_throughput", "task_aware", "tlm_agnews"])
def test_other_benches_import(name):
    assert callable(_bench(name).main)


def test_command_walk_counts_what_the_command_runs_and_not_what_imports_run(tmp_path):
    """A package whose command calls one module and, at run time, imports another whose class body calls a third:
    the walk holds the command's module and the one it calls, not the import's."""
    import subprocess
    import sys

    package = tmp_path / "site" / "electra"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "work.py").write_text("def work():\n    return 1\n")
    (package / "declare.py").write_text("def declare():\n    return 2\n")
    (package / "declared.py").write_text(
        "from electra.declare import declare\n\nclass Settings:\n    value = declare()\n"
    )
    (package / "command.py").write_text(
        "from electra.work import work\n\n\ndef run():\n    import electra.declared\n\n    return work()\n\n\n"
        'if __name__ == "__main__":\n    run()\n'
    )
    report = tmp_path / "report.json"
    argv = ["--trace", str(tmp_path / "site"), str(tmp_path), str(report), "--", "-m", "electra.command"]
    done = subprocess.run(
        [sys.executable, str(BENCH / "command_walk.py"), *argv],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": ""},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(report.read_text())
    assert found["files"] == ["electra.command", "electra.work"]
    assert found["moves"] == [["electra.command", "electra.work", 1]]


def test_pretrain_throughput_times_each_dropout_in_one_run(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    argv = "--size tiny --batch-size 2 --seq-len 16 --steps 1 --warmup 0 --vocab-size 1200 --dtypes fp32"
    monkeypatch.setattr(
        "sys.argv", ["bench", *argv.split(), "--cpu-dropout", "lanes,torch", "--json", str(out)]
    )
    _bench("pretrain_throughput").main()
    rows = json.loads(out.read_text())["rows"]
    assert [row["variant"] for row in rows] == [
        "baseline (HF naive, fp32)",
        "ours electra fp32 lanes dropout",
        "ours electra fp32 torch dropout",
    ]
    assert all(row["tokens_per_second"]["median"] > 0 and 0 < row["mfu"] for row in rows)
    assert all(row["page_faults_per_step"] >= 0 and row["kernel_seconds_per_step"] >= 0 for row in rows)


def test_pretrain_throughput_charges_the_higher_of_the_peaks_around_a_variant(monkeypatch):
    """A neighbour's burst can only lower a peak reading: a variant is charged the higher of the readings taken
    before and after it, so one low reading cannot inflate its MFU."""
    import torch

    bench = _bench("pretrain_throughput")
    readings = iter([100e9, 250e9])
    config = bench.build_config(
        "tiny", overrides={"vocab_size": 1200, "max_seq_length": 16, "attn_implementation": "eager"}
    )
    model = bench.NaiveElectra(bench.discriminator_hf_config(config), bench.generator_hf_config(config))
    batch = bench.make_batch(2, 16, 1200, torch.device("cpu"))
    row = bench.measure(
        "x", model, batch, torch.float32, torch.device("cpu"), 1, 0, None, 1e9, lambda: next(readings)
    )
    assert row["peak_readings"] == {"before": 100e9, "after": 250e9}
    assert row["peak_flops_per_second"] == 250e9
    step_rate = row["tokens_per_second"]["median"] * row["executed_flops_per_token"]
    assert row["mfu"] == pytest.approx(step_rate / 250e9)


@pytest.mark.parametrize(
    ("objective", "dtype"), [("cloze", "fp32"), ("electra", "fp32"), ("electra", "bf16")]
)
def test_fused_head_bench_times_both_heads(objective, dtype):
    report = _bench("fused_head").main(
        ["--objective", objective, "--vocab-size", "300", "--batch-size", "2", "--seq-len", "16", "--rounds", "2",
         "--steps", "1", "--dtype", dtype]
    )  # fmt: skip
    assert set(report["heads"]) == {"fused", "plain"} and report["fused_over_plain"] > 0
    assert report["dtype"] == dtype


@pytest.mark.parametrize("clock", ["wall", "profiler"])
def test_profile_step_bench_accounts_for_the_step(tmp_path, clock):
    report = _bench("profile_step").main(
        ["--size", "tiny", "--vocab-size", "300", "--batch-size", "2", "--seq-len", "16", "--steps", "1",
         "--rows", "50", "--clock", clock, "--json", str(tmp_path / "p.json")]
    )  # fmt: skip
    shares = [row["share"] for row in report["rows"]]
    assert report["seconds_per_step"] > 0 and shares == sorted(shares, reverse=True)
    assert any(row["operator"].startswith("matmul") for row in report["rows"]) and sum(shares) <= 1.0 + 1e-9
    assert json.loads((tmp_path / "p.json").read_text())["clock"] == clock


def test_profile_step_groups_gemm_kernels_and_keeps_other_kernels_by_name():
    bench = _bench("profile_step")
    gemms = [
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
        "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn",
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(...)",
    ]
    assert {bench.group_of_kernel(name) for name in gemms} == {bench.GPU_GEMM}
    fused = "triton_per_fused__to_copy_add_native_layer_norm_native_layer_norm_backward_3"
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false>>(...)"
    assert bench.group_of_kernel(fused) == fused and bench.group_of_kernel(flash) == flash


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compile-mode", "default", "--clock", "wall"], "takes --clock profiler"),
        (["--device", "cuda"], "no CUDA device"),
    ],
)
def test_profile_step_refuses_what_it_cannot_measure(argv, message, capsys):
    import torch

    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(SystemExit):
        _bench("profile_step").main(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("native", [True, False])
def test_pretrain_throughput_times_bf16_by_default_only_where_it_is_native(native, monkeypatch, capsys):
    """Without native bf16 a CPU's bf16 step takes minutes: the default leaves it out and says so; asked for, it
    runs with a note."""
    import torch

    bench = _bench("pretrain_throughput")
    monkeypatch.setattr(bench, "native_precision", lambda device, dtype: native or dtype == torch.float32)
    cpu = torch.device("cpu")
    assert bench.chosen_dtypes(None, cpu) == (["fp32", "bf16"] if native else ["fp32"])
    assert ("bf16 skipped" in capsys.readouterr().out) is not native
    assert bench.chosen_dtypes("fp32,bf16", cpu) == ["fp32", "bf16"]
    assert ("no native support" in capsys.readouterr().out) is not native
    with pytest.raises(SystemExit, match="unknown fp8"):
        bench.chosen_dtypes("fp32,fp8", cpu)
