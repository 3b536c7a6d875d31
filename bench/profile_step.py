"""Where one pretraining step's time goes: the PyTorch profiler over a few training steps of our model, as a table
of operator groups (share of the step's CPU time), so the next optimisation starts from a measurement.

    python bench/profile_step.py --size small                  # ELECTRA-Small, batch 32 × 128, fp32, 3 steps
    python bench/profile_step.py --objective electric --size tiny --rows 25
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from electra.config import parse_overrides
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


def group_of(name: str) -> str:
    for group, names in GROUPS.items():
        if name in names:
            return group
    return name


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
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--json", help="also write the table to this JSON file")
    args = parser.parse_args(argv)
    overrides = {
        "objective": args.objective,
        "vocab_size": args.vocab_size,
        "max_seq_length": args.seq_len,
        **parse_overrides(args.set),
    }
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
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    # Self time: each microsecond is charged to the operator that spent it, so the shares add up to the step.
    self_us: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        self_us[group_of(event.key)] += event.self_cpu_time_total
    total = sum(self_us.values())
    table = sorted(self_us.items(), key=lambda item: -item[1])[: args.rows]
    print(
        f"{args.objective} step, size={args.size} vocab={args.vocab_size} batch={args.batch_size}x{args.seq_len}, "
        f"{args.steps} steps, {total / 1e6 / args.steps:.2f} s of CPU self time per step"
    )
    print(f"{'operator (self time)':<48} {'share':>7} {'ms/step':>9}")
    for name, micros in table:
        print(f"{name:<48} {100 * micros / total:6.1f}% {micros / 1e3 / args.steps:9.1f}")
    report = {
        "seconds_per_step": total / 1e6 / args.steps,
        "rows": [{"operator": n, "share": m / total} for n, m in table],
    }
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return report


if __name__ == "__main__":
    main()
