"""Where one pretraining step's time goes, as a table of operator groups (share of the step), so the next
optimisation starts from a measurement.

Two clocks. `--clock wall` (the default) reads the wall clock around every ATen operator the step dispatches (a
`TorchDispatchMode`; CPU operators are synchronous, so that is their cost), and what no operator accounts for
(Python, the autograd engine, this timing itself) is a line of its own. `--clock profiler` is the PyTorch
profiler's self time. The profiler charges each operator its own overhead too, which swamps small ones: at
ELECTRA-Small it gave GELU 179 ms per step (7.0%), where the wall clock around the same calls gives 100 ms (3.5%).

    python bench/profile_step.py --size small                  # ELECTRA-Small, batch 32 × 128, fp32, 3 steps
    python bench/profile_step.py --objective electric --size tiny --rows 25 --clock profiler
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from electra.config import parse_overrides
from electra.cpu_memory import keep_freed_memory
from electra.model import PretrainingModel
from electra.objectives import build_config
from electra.optim import build_adamw, parameter_groups
from electra.outputs import SpecialIds

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


def group_of(name: str) -> str:
    for group, names in GROUPS.items():
        if name in names:
            return group
    return name


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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="small")
    parser.add_argument("--objective", default="electra")
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument(
        "--steps", type=int, default=3, help="profiled steps (after one unprofiled warm-up step)"
    )
    parser.add_argument("--rows", type=int, default=15, help="lines of the table")
    parser.add_argument(
        "--clock",
        choices=("wall", "profiler"),
        default="wall",
        help="wall time around each operator, or the PyTorch profiler's self time",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--json", help="also write the table to this JSON file")
    args = parser.parse_args(argv)
    overrides = {
        "objective": args.objective,
        "vocab_size": args.vocab_size,
        "max_seq_length": args.seq_len,
        **parse_overrides(args.set),
    }
    keep_freed_memory()  # as the training engine does
    torch.manual_seed(0)
    model = PretrainingModel(build_config(args.size, overrides=overrides), SPECIAL).train()
    optimizer = build_adamw(parameter_groups(model, 1e-4, 0.01), lr=1e-4)
    ids = torch.randint(10, args.vocab_size, (args.batch_size, args.seq_len))
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }

    def step() -> None:
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    measure = wall_clock_times if args.clock == "wall" else profiler_times
    seconds: dict[str, float] = defaultdict(float)
    for name, spent in measure(step, args.steps).items():
        seconds[group_of(name)] += spent
    total = sum(seconds.values())
    table = sorted(seconds.items(), key=lambda item: -item[1])[: args.rows]
    print(
        f"{args.objective} step, size={args.size} vocab={args.vocab_size} batch={args.batch_size}x{args.seq_len}, "
        f"{args.steps} steps, {total / args.steps:.2f} s per step ({args.clock} clock)"
    )
    print(f"{'operator':<52} {'share':>7} {'ms/step':>9}")
    for name, spent in table:
        print(f"{name:<52} {100 * spent / total:6.1f}% {spent * 1e3 / args.steps:9.1f}")
    report = {
        "clock": args.clock,
        "seconds_per_step": total / args.steps,
        "rows": [{"operator": n, "share": t / total} for n, t in table],
    }
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return report


if __name__ == "__main__":
    main()
