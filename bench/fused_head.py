"""A training step with the fused vocabulary head (`generators/fused_nll.py`) against the plain log-softmax head,
in one process, taking turns, so the host's drift and its memory state hit both alike: the cloze scorer's and
Electric's two-tower head over every position, and ELECTRA's (or ELECTRA-TT's) generator head at the masked
positions, where the fused chunks also draw the samples.

Whether a fresh 128 MB tensor is page-faulted in 4 KB at a time or gets huge pages depends on the kernel's
transparent-huge-page settings and on how fragmented memory is at that moment, so the plain head's cost varies
between processes on one host; the page faults per step are printed beside the times.

    python bench/fused_head.py                      # cloze, tiny, 8,192-piece vocabulary, batch 32 × 128
    python bench/fused_head.py --size small --vocab-size 30522 --rounds 5
    python bench/fused_head.py --objective electric --vocab-size 30522
    python bench/fused_head.py --objective electra --size small --vocab-size 30522
    python bench/fused_head.py --objective electra --size small --vocab-size 30522 --dtype bf16   # CPU autocast
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import time

import torch

from electra.core.cpu_memory import keep_freed_memory
from electra.core.outputs import SpecialIds
from electra.generators import fused_nll
from electra.objectives import build_config
from electra.training.model import PretrainingModel
from electra.training.optim import build_adamw, parameter_groups

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="tiny")
    parser.add_argument(
        "--objective", default="cloze", choices=("cloze", "electric", "electra", "electra-tt")
    )
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=8, help="turns of each head (the first is warm-up)")
    parser.add_argument("--steps", type=int, default=2, help="training steps per turn")
    parser.add_argument(
        "--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16: the steps run under CPU autocast"
    )
    parser.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="glibc keeps freed blocks, as the training engine sets it on a CPU (electra/core/cpu_memory.py): the "
        "plain head's fresh tensors then fault fewer pages in",
    )
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.keep_freed_memory:
        keep_freed_memory()
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16) if args.dtype == "bf16" else contextlib.nullcontext()
    )
    torch.manual_seed(0)
    overrides = {"objective": args.objective, "vocab_size": args.vocab_size, "max_seq_length": args.seq_len}
    model = PretrainingModel(build_config(args.size, overrides=overrides), SPECIAL).train()
    optimizer = build_adamw(parameter_groups(model, 1e-4, 0.01), lr=1e-4)
    ids = torch.randint(10, args.vocab_size, (args.batch_size, args.seq_len))
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }
    fused_applies = fused_nll.applies
    heads = {"fused": fused_applies, "plain": lambda contexts: False}
    seconds: dict[str, list[float]] = {name: [] for name in heads}
    faults: dict[str, list[float]] = {name: [] for name in heads}
    try:
        for _ in range(max(2, args.rounds)):
            for name, applies in heads.items():
                fused_nll.applies = applies
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter()
                for _ in range(args.steps):
                    with autocast:
                        loss = model(**batch).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                seconds[name].append((time.perf_counter() - start) / args.steps)
                faults[name].append(
                    (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / args.steps
                )
    finally:
        fused_nll.applies = fused_applies
    tokens = ids.numel()
    report = {
        "objective": args.objective,
        "size": args.size,
        "dtype": args.dtype,
        "vocab_size": args.vocab_size,
        "tokens_per_step": tokens,
        "heads": {},
    }
    print(
        f"{args.objective} step, size={args.size} vocab={args.vocab_size} batch={args.batch_size}x{args.seq_len} "
        f"{args.dtype}"
    )
    print(f"{'head':<8} {'tok/s min':>10} {'median':>10} {'max':>10} {'faults/step':>12}")
    for name in heads:
        rates = sorted(tokens / s for s in seconds[name][1:])  # the first turn of each is warm-up
        row = {
            "tokens_per_second": {"min": rates[0], "median": statistics.median(rates), "max": rates[-1]},
            "page_faults_per_step": statistics.median(faults[name][1:]),
        }
        report["heads"][name] = row
        print(
            f"{name:<8} {rates[0]:>10,.0f} {row['tokens_per_second']['median']:>10,.0f} {rates[-1]:>10,.0f} "
            f"{row['page_faults_per_step']:>12,.0f}"
        )
    ratio = (
        report["heads"]["fused"]["tokens_per_second"]["median"]
        / report["heads"]["plain"]["tokens_per_second"]["median"]
    )
    report["fused_over_plain"] = ratio
    print(f"fused / plain (medians): {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return report


if __name__ == "__main__":
    main()
