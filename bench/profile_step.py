"""Where one pretraining step's time goes, as a table of operator groups (share of the step), so the next
optimisation starts from a measurement.

Two clocks. `--clock wall` (the default) reads the wall clock around every ATen operator the step dispatches (a
`TorchDispatchMode`; CPU operators are synchronous, so that is their cost), and what no operator accounts for
(Python, the autograd engine, this timing itself) is a line of its own. `--clock profiler` is the PyTorch
profiler's self time. The profiler charges each operator its own overhead too, which swamps small ones: at
ELECTRA-Small it gave GELU 179 ms per step (7.0%), where the wall clock around the same calls gives 100 ms (3.5%).

    python bench/profile_step.py --size small                  # ELECTRA-Small, batch 32 × 128, fp32, 3 steps
    python bench/profile_step.py --objective electric --size tiny --rows 25 --clock profiler

On a GPU the table is of kernels: each kernel's device time as a share of the time the GPU was busy, with the
GEMMs as one line, and a first line comparing the busy time with the step's wall time (a step that keeps the GPU
busy for a third of its wall time is bound by the host or by launches, not by its kernels). Compiled steps are
profiled the same way (`--compile-mode`), CUDA graphs included:

    python bench/profile_step.py --device cuda --size small --batch-size 128 --dtype bf16 --compile-mode reduce-overhead
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from electra.core.config_files import parse_overrides
from electra.core.cpu_memory import keep_freed_memory
from electra.core.outputs import SpecialIds
from electra.objectives import build_config
from electra.training.model import PretrainingModel
from electra.training.optim import build_adamw, parameter_groups

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4)

# Operators that do the same kind of work, reported as one line (the rest keep their own names).
GROUPS = {
    "matmul (mm, addmm, bmm, linear)": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attention softmax (forward and backward)": ("aten::_softmax", "aten::_softmax_backward_data"),
    "GELU (forward and backward)": ("aten::gelu", "aten::gelu_backward"),
    "LayerNorm (forward and backward)": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "optimizer (fused AdamW)": ("aten::_fused_adamw_",),
}


OUTSIDE = "outside operators (Python, autograd engine, timing)"
GPU_GEMM = "matmul kernels (GEMM)"
# Substrings of the names cuBLAS, cuBLASLt and CUTLASS give their matrix-product kernels.
GEMM_KERNEL_MARKS = ("gemm", "cutlass", "xmma", "sm80_", "sm90_", "cublas")


def group_of(name: str) -> str:
    for group, names in GROUPS.items():
        if name in names:
            return group
    return name


def group_of_kernel(name: str) -> str:
    """GEMM kernels as one line (their names say tile shapes, not which product); other kernels by name."""
    lowered = name.lower()
    return GPU_GEMM if any(mark in lowered for mark in GEMM_KERNEL_MARKS) else name


class _OperatorClock(TorchDispatchMode):
    """Adds the wall time of every ATen call to its operator's total (calls made inside one are not seen again)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = defaultdict(float)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        start = time.perf_counter()
        result = func(*args, **(kwargs or {}))
        self.seconds["aten::" + func.overloadpacket.__name__] += time.perf_counter() - start
        return result


def wall_clock_times(step: Callable[[], None], steps: int) -> dict[str, float]:
    """Seconds per operator over `steps` steps, and the rest of their wall time under `OUTSIDE`."""
    clock = _OperatorClock()
    start = time.perf_counter()
    with clock:
        for _ in range(steps):
            step()
    times = dict(clock.seconds)
    times[OUTSIDE] = max(0.0, time.perf_counter() - start - sum(times.values()))
    return times


def profiler_times(step: Callable[[], None], steps: int) -> dict[str, float]:
    """Seconds of profiler self time per operator over `steps` steps: each microsecond is charged to the operator
    that spent it, so the shares add up to the step."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    return {event.key: event.self_cpu_time_total / 1e6 for event in prof.key_averages()}


def kernel_times(
    step: Callable[[], None], steps: int, device: torch.device
) -> tuple[dict[str, float], int, float]:
    """Device seconds per kernel over `steps` steps, the number of kernels run, and the steps' wall seconds (the
    device synchronised before and after, so the wall time is the steps' own)."""
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    kernels = [event for event in prof.key_averages() if event.device_type == DeviceType.CUDA]
    seconds = {event.key: event.self_device_time_total / 1e6 for event in kernels}
    return seconds, sum(event.count for event in kernels), wall


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="small")
    parser.add_argument("--objective", default="electra")
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument(
        "--warmup",
        type=int,
        help="unprofiled steps first (default 1; 5 when compiled, as CUDA graphs record late)",
    )
    parser.add_argument("--rows", type=int, default=15, help="lines of the table")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16 runs under autocast")
    parser.add_argument(
        "--compile-mode",
        help="profile the step under torch.compile with this mode (default, reduce-overhead, ...)",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "profiler"),
        help="wall time around each operator (the default for an eager CPU step), or the profiler's self time "
        "(the only clock for a GPU or a compiled step: their work does not pass through ATen's dispatcher one "
        "operator at a time)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--json", help="also write the table to this JSON file")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device")
    whole_graph = device.type == "cuda" or args.compile_mode is not None
    if args.clock == "wall" and whole_graph:
        parser.error(
            "--clock wall times eager CPU operators only; a GPU or compiled step takes --clock profiler"
        )
    clock = args.clock or ("profiler" if whole_graph else "wall")
    warmup = args.warmup if args.warmup is not None else (5 if args.compile_mode else 1)
    overrides = {
        "objective": args.objective,
        "vocab_size": args.vocab_size,
        "max_seq_length": args.seq_len,
        **parse_overrides(args.set),
    }
    keep_freed_memory()  # as the training engine does
    torch.manual_seed(0)
    model = PretrainingModel(build_config(args.size, overrides=overrides), SPECIAL).to(device).train()
    optimizer = build_adamw(parameter_groups(model, 1e-4, 0.01), lr=1e-4)
    runner = model if args.compile_mode is None else torch.compile(model, mode=args.compile_mode)
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if args.dtype == "bf16"
        else contextlib.nullcontext()
    )
    ids = torch.randint(10, args.vocab_size, (args.batch_size, args.seq_len))
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    batch = {
        "input_ids": ids.to(device),
        "attention_mask": torch.ones_like(ids).to(device),
        "token_type_ids": torch.zeros_like(ids).to(device),
    }

    def step() -> None:
        with autocast:
            loss = runner(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    what = (
        f"{args.objective} step, size={args.size} vocab={args.vocab_size} batch={args.batch_size}x{args.seq_len}, "
        f"{args.dtype}{'' if args.compile_mode is None else ' compiled ' + args.compile_mode} on {device.type}, "
        f"{args.steps} steps"
    )
    report: dict[str, Any] = {"clock": clock, "device": device.type}
    seconds: dict[str, float] = defaultdict(float)
    if device.type == "cuda":
        kernels, launched, wall = kernel_times(step, args.steps, device)
        for name, spent in kernels.items():
            seconds[group_of_kernel(name)] += spent
        busy = sum(seconds.values())
        report.update(
            seconds_per_step=wall / args.steps,
            device_busy_seconds_per_step=busy / args.steps,
            kernels_per_step=launched / args.steps,
        )
        print(
            f"{what}: {1e3 * wall / args.steps:.2f} ms per step (wall clock), the GPU busy "
            f"{1e3 * busy / args.steps:.2f} ms of it ({100 * busy / wall:.0f}%), {launched / args.steps:,.0f} kernels"
        )
    else:
        measure = wall_clock_times if clock == "wall" else profiler_times
        for name, spent in measure(step, args.steps).items():
            seconds[group_of(name)] += spent
        report["seconds_per_step"] = sum(seconds.values()) / args.steps
        print(f"{what}, {report['seconds_per_step']:.2f} s per step ({clock} clock)")
    total = sum(seconds.values())
    if total <= 0:
        raise SystemExit("the profiler recorded no time (on a GPU: no kernels; is CUPTI available?)")
    table = sorted(seconds.items(), key=lambda item: -item[1])[: args.rows]
    print(f"{'kernel' if device.type == 'cuda' else 'operator':<72} {'share':>7} {'ms/step':>9}")
    for name, spent in table:
        shown = name if len(name) <= 72 else name[:69] + "..."
        print(f"{shown:<72} {100 * spent / total:6.1f}% {spent * 1e3 / args.steps:9.3f}")
    report["rows"] = [
        {"operator": n, "share": t / total, "ms_per_step": 1e3 * t / args.steps} for n, t in table
    ]
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return report


if __name__ == "__main__":
    main()
