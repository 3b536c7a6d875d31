"""Training throughput and model-FLOPs utilisation of our pretraining step, against the step users assemble from
`transformers` by hand, on the CPU or a GPU, in the same run.

Baseline (same shapes and optimizer): `ElectraForMaskedLM` generator computing full-vocabulary logits at every
position, `ElectraForPreTraining` discriminator, shared embeddings, eager attention, fp32, Gumbel sampling over the
masked rows. Ours: `electra.training.model.PretrainingModel` (the configured objective), in each requested precision, eager
and (with --compile) under `torch.compile`, the optimizer the engine uses (AdamW, fused on CUDA).

For every variant it prints tokens/s (min/median/max over the timed steps), the FLOPs per token actually executed
(FlopCounterMode on the real model's forward, plus a backward of twice the forward: not the paper's accounting),
the machine's dense matmul peak for that precision measured just before and just after that variant, the resulting
MFU, and peak memory. Why a peak per variant: on a shared host what a process gets of the machine drifts over
minutes, and a peak taken beside each variant shows whether the matmul rate moved with it (on a 2-core EPYC it
stayed at 176-184 GFLOP/s while the same step ran 10% slower than an hour before: the memory system had moved,
which a 2048³ product does not feel). Why the higher of two readings: a peak is what the hardware can do, and a
neighbour's burst can only lower a reading; one reading taken in such a burst (139 against 174-185 GFLOP/s in the
runs beside it) had put a step at 73% MFU that ran at 55-59% of what those runs read.

    python bench/pretrain_throughput.py --size small --batch-size 32 --steps 20
    python bench/pretrain_throughput.py --device cuda --batch-size 128 --dtypes bf16 --compile --no-baseline
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import time

import torch
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

from electra.core.config_files import parse_overrides
from electra.core.cpu_memory import keep_freed_memory
from electra.core.outputs import SpecialIds
from electra.flops.measured import flop_counter
from electra.flops.peak import matmul_peak, native_precision, peak_dtype
from electra.generators.fused_nll import plain_head
from electra.nn.hf_configs import discriminator_hf_config, generator_hf_config
from electra.objectives import build_config
from electra.training.model import PretrainingModel
from electra.training.optim import build_adamw, parameter_groups

SPECIAL = SpecialIds(pad=0, cls=101, sep=102, mask=103)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class NaiveElectra(torch.nn.Module):
    """What a user writes from the transformers docs: full-sequence generator logits, HF losses."""

    def __init__(self, disc_config: ElectraConfig, gen_config: ElectraConfig):
        super().__init__()
        self.discriminator = ElectraForPreTraining(disc_config)
        self.generator = ElectraForMaskedLM(gen_config)
        self.generator.electra.embeddings = self.discriminator.electra.embeddings
        self.generator.generator_lm_head.weight = self.discriminator.electra.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask, token_type_ids):
        special = (input_ids == SPECIAL.cls) | (input_ids == SPECIAL.sep) | (input_ids == SPECIAL.pad)
        probability = torch.full(input_ids.shape, 0.15, device=input_ids.device).masked_fill(special, 0.0)
        masked = torch.bernoulli(probability).bool()
        labels = input_ids.masked_fill(~masked, -100)
        masked_input = input_ids.clone()
        masked_input[masked & (torch.rand(input_ids.shape, device=input_ids.device) < 0.85)] = SPECIAL.mask
        gen = self.generator(
            masked_input, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels
        )
        with torch.no_grad():
            logits = gen.logits[masked].float()
            gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp(1e-9, 1 - 1e-9)))
            sampled = (logits + gumbel).argmax(-1)
        corrupted = input_ids.clone()
        corrupted[masked] = sampled
        disc_labels = (corrupted != input_ids).long()
        disc = self.discriminator(
            corrupted, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=disc_labels
        )
        return gen.loss + 50.0 * disc.loss


def make_batch(batch_size: int, length: int, vocab: int, device: torch.device) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab, (batch_size, length), generator=generator)
    ids[:, 0] = SPECIAL.cls
    ids[:, length // 2] = SPECIAL.sep
    ids[:, -1] = SPECIAL.sep
    types = torch.zeros_like(ids)
    types[:, length // 2 + 1 :] = 1
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": types}
    return {k: v.to(device) for k, v in batch.items()}


def loss_of(output) -> torch.Tensor:
    return output if torch.is_tensor(output) else output.loss


def executed_flops_per_step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> float:
    """Matmul FLOPs of one forward as FlopCounterMode sees them, times 3 (a backward costs twice the forward)."""
    with torch.no_grad(), plain_head(), flop_counter() as counter:  # model FLOPs: no recomputation charged
        model(**batch)
    return 3.0 * counter.get_total_flops()


def peak_memory_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def _rate(flops_per_second: float) -> str:
    """GFLOP/s on a CPU's scale, TFLOP/s on a GPU's."""
    if flops_per_second < 1e12:
        return f"{flops_per_second / 1e9:7.1f} GFLOP/s"
    return f"{flops_per_second / 1e12:7.2f} TFLOP/s"


def measure(
    name, model, batch, dtype, device, steps, warmup, compile_mode, flops_per_step, peak_reading, window=1
) -> dict:
    """Times `steps` training steps in windows of `window` steps with one device sync per window (as training
    runs: the host queues work ahead), after `warmup` steps that include any compilation. `peak_reading()` measures
    the matmul peak; it runs before and after the steps, and the MFU is charged against the higher reading."""
    peak_before = peak_reading()
    torch.manual_seed(0)
    model.to(device).train()
    optimizer = build_adamw(parameter_groups(model, 1e-4, 0.01), lr=1e-4)
    runner = model if compile_mode is None else torch.compile(model, mode=compile_mode)
    autocast = (
        torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    )

    def step() -> None:
        with autocast:
            loss = loss_of(runner(**batch))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def synced() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = synced()
    for _ in range(warmup):
        step()
    warmup_seconds = synced() - start
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    times = []
    for _ in range(max(1, steps // window)):
        start = synced()
        for _ in range(window):
            step()
        times.append((synced() - start) / window)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_after = peak_reading()
    peak = max(peak_before, peak_after)
    timed_steps = len(times) * window
    tokens = batch["input_ids"].numel()
    rates = sorted(tokens / t for t in times)
    median = statistics.median(rates)
    row = {
        "variant": name,
        "tokens_per_second": {"min": rates[0], "median": median, "max": rates[-1]},
        "step_seconds_median": statistics.median(times),
        "warmup_seconds": warmup_seconds,
        "executed_flops_per_token": flops_per_step / tokens,
        "peak_flops_per_second": peak,
        "peak_readings": {"before": peak_before, "after": peak_after},
        "mfu": median * flops_per_step / tokens / peak,
        "peak_memory_gib": peak_memory_bytes(device) / 2**30,
        # Host work the kernel did for the process: page faults of fresh allocations show up here.
        "page_faults_per_step": (usage.ru_minflt - usage_before.ru_minflt) / timed_steps,
        "kernel_seconds_per_step": (usage.ru_stime - usage_before.ru_stime) / timed_steps,
    }
    print(
        f"{name:<34} {rates[0]:>10,.0f} {median:>10,.0f} {rates[-1]:>10,.0f} tok/s   "
        f"{row['executed_flops_per_token'] / 1e6:7.1f} MFLOP/tok   MFU {100 * row['mfu']:5.1f}%   "
        f"peak {_rate(peak)} (before {_rate(peak_before).split()[0]}, after {_rate(peak_after).split()[0]})   "
        f"mem {row['peak_memory_gib']:6.2f} GiB   warmup {warmup_seconds:6.1f} s   "
        f"faults/step {row['page_faults_per_step']:9,.0f}   sys {row['kernel_seconds_per_step']:5.2f} s/step",
        flush=True,
    )
    return row


def chosen_dtypes(requested: str | None, device: torch.device) -> list[str]:
    """The precisions to time: the requested ones (with a note for any this device only emulates), or by default
    fp32 plus bf16 where the hardware has it. A CPU without native bf16 runs a bf16 Small step at about 1% of its fp32
    speed, minutes per step: timing it by default would look like a hang."""
    if requested is None:
        native_bf16 = native_precision(device, torch.bfloat16)
        if not native_bf16:
            print(
                "bf16 skipped: this CPU has no native bf16 (AVX-512-BF16 or AMX); --dtypes fp32,bf16 times it anyway"
            )
        return ["fp32", "bf16"] if native_bf16 else ["fp32"]
    dtypes = [d.strip() for d in requested.split(",") if d.strip()]
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown:
        raise SystemExit(f"--dtypes: unknown {', '.join(unknown)}; choose from {', '.join(DTYPES)}")
    for name in dtypes:
        if not native_precision(device, DTYPES[name]):
            print(
                f"note: {name} has no native support on this CPU; its step is emulated and may take minutes"
            )
    return dtypes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="small")
    parser.add_argument(
        "--objective",
        default="electra",
        help="comma list: each objective is timed in the same run, with the achieved FLOP rate of each against "
        "the first (executed FLOPs per second)",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (min/median/max over them)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument(
        "--dtypes",
        help="comma list of fp32, bf16, fp16 (autocast); default fp32 and, where the device has native bf16, bf16",
    )
    parser.add_argument("--compile", action="store_true", help="also time each dtype under torch.compile")
    parser.add_argument(
        "--compile-modes",
        default="",
        help="comma list of torch.compile modes to time (default, reduce-overhead, max-autotune, ...); --compile "
        "is --compile-modes default",
    )
    parser.add_argument(
        "--window", type=int, default=1, help="steps per timing window (one device sync per window)"
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the naive transformers step")
    parser.add_argument(
        "--cpu-dropout",
        default="lanes",
        help="comma list of the config's cpu_dropout choices (lanes, torch): each is timed in the same run",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--json", help="write every figure here as JSON")
    args = parser.parse_args()
    device = torch.device(args.device)
    objectives = [o.strip() for o in args.objective.split(",") if o.strip()]
    overrides = {
        "vocab_size": args.vocab_size,
        "max_seq_length": args.seq_len,
        "objective": objectives[0],
        **parse_overrides(args.set),
    }
    batch = make_batch(args.batch_size, args.seq_len, args.vocab_size, device)
    dtypes = chosen_dtypes(args.dtypes, device)
    modes = [m.strip() for m in args.compile_modes.split(",") if m.strip()]
    if args.compile and "default" not in modes:
        modes.insert(0, "default")
    print(
        f"size={args.size} objective={args.objective} device={device} batch={args.batch_size} seq={args.seq_len} "
        f"vocab={args.vocab_size} threads={torch.get_num_threads()} torch={torch.__version__}"
        + (f" gpu={torch.cuda.get_device_name(device)}" if device.type == "cuda" else "")
    )
    # whose peak each precision's MFU divides by: its own, or fp32's where it is emulated
    charged = {name: peak_dtype(device, DTYPES[name]) for name in {"fp32", *dtypes}}
    peaks = {name: matmul_peak(device, dtype) for name, dtype in charged.items()}
    for name, peak in sorted(peaks.items()):
        emulated = charged[name] != DTYPES[name]
        print(
            f"matmul peak {name}: {_rate(peak).strip()} (2 n^3 / best time; measured again before and after each "
            "variant, which is charged the higher)"
            + (f"; {name} is emulated here, so its MFU is against the fp32 peak" if emulated else "")
        )
    print(f"{'variant':<34} {'min':>10} {'median':>10} {'max':>10}")
    rows = []
    if not args.no_baseline:
        torch.manual_seed(0)
        eager = build_config(args.size, overrides={**overrides, "attn_implementation": "eager"})
        naive = NaiveElectra(discriminator_hf_config(eager), generator_hf_config(eager)).to(device)
        flops = executed_flops_per_step(naive, batch)
        rows.append(
            measure(
                "baseline (HF naive, fp32)",
                naive,
                batch,
                torch.float32,
                device,
                args.steps,
                args.warmup,
                None,
                flops,
                lambda: matmul_peak(device, torch.float32),
                args.window,
            )
        )
        del naive
    if device.type == "cpu":
        keep_freed_memory()  # as the training engine does; after the baseline, which keeps glibc's defaults
    dropouts = [d.strip() for d in args.cpu_dropout.split(",") if d.strip()]
    ours_rows: list[list[dict]] = []  # per objective and dropout, in the order given (a name may repeat)
    for objective, dropout in [(o, d) for o in objectives for d in dropouts]:
        ours_rows.append([])
        torch.manual_seed(0)
        config = build_config(
            args.size, overrides={**overrides, "objective": objective, "cpu_dropout": dropout}
        )
        ours = PretrainingModel(config, SPECIAL).to(device)
        flops = executed_flops_per_step(ours, batch)
        for name in dtypes:
            for mode in [None, *modes]:
                label = f"ours {objective} {name}" + (
                    "" if mode is None else " compiled" if mode == "default" else f" compiled {mode}"
                )
                label += f" {dropout} dropout" if len(dropouts) > 1 else ""
                row = measure(
                    label,
                    ours,
                    batch,
                    DTYPES[name],
                    device,
                    args.steps,
                    args.warmup,
                    mode,
                    flops,
                    lambda dtype=charged[name]: matmul_peak(device, dtype),
                    args.window,
                )
                rows.append(row)
                ours_rows[-1].append(row)
        del ours
    for others in ours_rows[1:]:  # same dtype and mode, same run: achieved executed FLOP/s against the first
        for mine, theirs in zip(others, ours_rows[0]):
            rate = mine["tokens_per_second"]["median"] * mine["executed_flops_per_token"]
            reference = theirs["tokens_per_second"]["median"] * theirs["executed_flops_per_token"]
            print(
                f"FLOP rate {mine['variant']:<34} {rate / 1e9:9.1f} GFLOP/s = {rate / reference:5.2f}x "
                f"{theirs['variant']}'s"
            )
    if not args.no_baseline:
        base = rows[0]["tokens_per_second"]["median"]
        for row in rows[1:]:
            print(
                f"ratio {row['variant']:<34} {row['tokens_per_second']['median'] / base:5.2f}x the baseline"
            )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "peaks": peaks, "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
