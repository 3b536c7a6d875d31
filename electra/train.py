"""The pretraining loop, through Hugging Face Accelerate (one process, several GPUs, or several CPU processes).

Plain and explicit on purpose: one optimizer step per global batch (micro-batches accumulated with `no_sync`),
AdamW without decay on biases and LayerNorm, warmup and linear decay, clipping, periodic checkpoints that make a
resumed run identical to an uninterrupted one, CSV + TensorBoard logs, a FLOP meter, and exports at the end.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from electra.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from electra.config import PretrainConfig, differing_fields, load_saved_config
from electra.data import PretrainingCollator, ResumableBatchOrder, build_pretraining_dataset, token_counts
from electra.errors import UserError
from electra.modeling import build_pretraining_model
from electra.tokenization import load_or_train_tokenizer

# Settings that may change between the interrupted run and its resumption without changing the result.
RESUMABLE_CHANGES = {
    "log_every",
    "save_every",
    "keep_checkpoints",
    "dataloader_workers",
    "flops_budget",
    "extra",
}


@dataclass
class RunInputs:
    corpus: str
    output_dir: Path
    vocab: str | None = None
    cache_dir: str | None = None
    num_proc: int | None = None
    resume: bool = False
    plot: bool = True
    doc_boundary: str = "auto"
    strict_utf8: bool = False


def no_decay(name: str) -> bool:
    return name.endswith(".bias") or "LayerNorm" in name or "layer_norm" in name


def build_optimizer(model: torch.nn.Module, config: PretrainConfig) -> torch.optim.AdamW:
    decay, plain = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (plain if no_decay(name) else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    fused = all(p.is_cuda for p in model.parameters()) and torch.cuda.is_available()
    return torch.optim.AdamW(
        groups,
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
        fused=fused or None,
    )


def lr_multiplier(step: int, config: PretrainConfig) -> float:
    """Linear warmup to the peak, then linear decay to zero at `max_steps` (step counts from 0)."""
    warmup = max(1, config.warmup_steps)
    if step < warmup:
        return (step + 1) / warmup
    remaining = config.max_steps - step
    return max(0.0, remaining / max(1, config.max_steps - warmup))


def train(config: PretrainConfig, inputs: RunInputs) -> dict:
    """Run (or resume) one pretraining run; returns the final metrics."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    output_dir = inputs.output_dir
    checkpoints_dir = output_dir / "checkpoints"
    resume_from = _check_output_dir(config, output_dir, checkpoints_dir, inputs.resume)

    accelerator = Accelerator(mixed_precision=config.mixed_precision, cpu=not torch.cuda.is_available())
    world = accelerator.num_processes
    if config.train_batch_size % (world * config.gradient_accumulation_steps):
        raise UserError(
            f"train_batch_size {config.train_batch_size} is not divisible by processes ({world}) x "
            f"gradient_accumulation_steps ({config.gradient_accumulation_steps})."
        )
    micro_batch = config.train_batch_size // (world * config.gradient_accumulation_steps)
    set_seed(config.seed)

    with accelerator.main_process_first():
        tokenizer = load_or_train_tokenizer(
            inputs.vocab,
            inputs.corpus,
            config.tokenizer_vocab_size,
            config.lowercase,
            _sub(inputs.cache_dir, "tokenizers"),
        )
        dataset = build_pretraining_dataset(
            inputs.corpus,
            tokenizer,
            config,
            cache_dir=_sub(inputs.cache_dir, "examples"),
            num_proc=inputs.num_proc,
            doc_boundary=inputs.doc_boundary,
            show_progress=accelerator.is_main_process,
            strict_utf8=inputs.strict_utf8,
        )
    config.vocab_size = len(tokenizer)
    counts = token_counts(dataset, len(tokenizer)) if config.generator == "unigram" else None
    model = build_pretraining_model(config, tokenizer, token_counts=counts)
    optimizer = build_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, config))
    flops_per_step = _flops_per_step(config)

    step = 0
    if resume_from is not None:
        step = json.loads((resume_from / "trainer_state.json").read_text())["step"]
    elif accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        config.save(output_dir / "config.json")
        tokenizer.save_pretrained(str(output_dir / "tokenizer"))

    order = ResumableBatchOrder(len(dataset), micro_batch, config.seed, accelerator.process_index, world)
    collate = PretrainingCollator(
        tokenizer.pad_token_id, pad_to=config.max_seq_length if config.compile else None
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_sampler=_MicroBatches(order, step * config.gradient_accumulation_steps),
        collate_fn=collate,
        num_workers=config.dataloader_workers,
    )
    batches = iter(loader)  # creating the iterator draws from the RNG: do it before restoring the RNG state

    flops_spent, elapsed_before = 0.0, 0.0
    if resume_from is not None:
        state = load_checkpoint(resume_from, model, optimizer, scheduler, rank=accelerator.process_index)
        flops_spent, elapsed_before = state.get("flops_spent", 0.0), state.get("elapsed_seconds", 0.0)
        accelerator.print(f"resumed from {resume_from} at step {step}")
    model, optimizer = accelerator.prepare(model, optimizer)
    if config.compile:
        model = torch.compile(model)

    logger = _MetricLogger(output_dir, enabled=accelerator.is_main_process, resume_step=step)
    progress = tqdm(
        total=config.max_steps, initial=step, disable=not accelerator.is_main_process, desc="pretraining"
    )
    accelerator.print(
        f"{len(dataset):,} examples | {sum(p.numel() for p in model.parameters()):,} parameters | "
        f"batch {config.train_batch_size} = {world} processes x {micro_batch} x {config.gradient_accumulation_steps} accumulation"
        + (f" | {flops_per_step:.3g} train FLOPs/step" if flops_per_step else "")
    )
    flops_check = None
    if flops_per_step and resume_from is None and accelerator.is_main_process:
        flops_check = _check_flop_counter(
            accelerator.unwrap_model(model), collate([dataset[0], dataset[1]]), config
        )
        accelerator.print(
            f"FLOP counter check: measured/analytic matmul FLOPs = {flops_check['ratio']:.4f}"
            + ("" if flops_check["ok"] else "  (WARNING: more than 2% apart; the logged FLOPs may be off)")
        )
    model.train()
    window_metrics: dict[str, torch.Tensor] = {}
    window_steps, window_tokens, window_start = 0, 0, time.perf_counter()
    run_start = time.perf_counter()
    last: dict[str, float] = {}
    stop_reason = "max_steps"
    while step < config.max_steps:
        for micro in range(config.gradient_accumulation_steps):
            cpu_batch = next(batches)
            window_tokens += int(cpu_batch["attention_mask"].sum())  # counted on the host: no device sync
            batch = {k: v.to(accelerator.device, non_blocking=True) for k, v in cpu_batch.items()}
            sync = micro == config.gradient_accumulation_steps - 1
            with contextlib.nullcontext() if sync else accelerator.no_sync(model):
                with accelerator.autocast():
                    output = model(**batch)
                accelerator.backward(output.loss / config.gradient_accumulation_steps)
            for name, value in output.metrics.items():
                window_metrics[name] = (
                    window_metrics.get(name, 0.0) + value / config.gradient_accumulation_steps
                )
        grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        window_steps += 1
        flops_spent += flops_per_step or 0.0
        progress.update(1)
        budget_spent = config.flops_budget is not None and flops_spent >= config.flops_budget
        if step % config.log_every == 0 or step == config.max_steps or budget_spent:
            seconds = time.perf_counter() - window_start
            means = {k: v / window_steps for k, v in window_metrics.items()}
            reduced = accelerator.reduce(torch.stack(list(means.values())).float(), reduction="mean")
            tokens = accelerator.reduce(
                torch.tensor(float(window_tokens), device=accelerator.device), reduction="sum"
            )
            last = {k: float(v) for k, v in zip(means, reduced.tolist())}
            last.update(
                step=step,
                learning_rate=scheduler.get_last_lr()[0],
                grad_norm=float(grad_norm) if grad_norm is not None else math.nan,
                tokens_per_second=float(tokens) / max(seconds, 1e-9),
                train_flops=flops_spent,
                elapsed_seconds=elapsed_before + time.perf_counter() - run_start,
            )
            logger.log(last)
            progress.set_postfix(loss=f"{last['loss']:.3f}", **_short(last))
            window_metrics, window_steps, window_tokens, window_start = {}, 0, 0, time.perf_counter()
        if budget_spent:
            stop_reason = "flops_budget"
        if step % config.save_every == 0 or step == config.max_steps or budget_spent:
            trainer_state = {
                "flops_spent": flops_spent,
                "elapsed_seconds": elapsed_before + time.perf_counter() - run_start,
            }
            save_checkpoint(
                checkpoints_dir,
                step,
                accelerator.unwrap_model(model),
                optimizer,
                scheduler,
                trainer_state,
                rank=accelerator.process_index,
                is_main=accelerator.is_main_process,
                barrier=accelerator.wait_for_everyone,
                keep=config.keep_checkpoints,
            )
        if budget_spent:
            break
    progress.close()
    logger.close()
    if accelerator.is_main_process:
        written = accelerator.unwrap_model(model).export(output_dir, tokenizer)
        summary = dict(last, stop_reason=stop_reason, exports={k: str(v) for k, v in written.items()})
        if flops_check is not None:
            summary["flop_counter_check"] = flops_check
        (output_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if inputs.plot:
            from electra.plot import plot_run

            plot_run(output_dir)
        accelerator.print(
            f"done at step {step} ({stop_reason}); exports: {', '.join(str(v) for v in written.values())}"
        )
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return dict(last, stop_reason=stop_reason, step=step)


class _MicroBatches:
    """A DataLoader batch sampler over the resumable order, starting at a given micro-batch."""

    def __init__(self, order: ResumableBatchOrder, start: int):
        self.order, self.start = order, start

    def __iter__(self):
        return self.order.batches(self.start)


def _check_output_dir(
    config: PretrainConfig, output_dir: Path, checkpoints_dir: Path, resume: bool
) -> Path | None:
    existing = latest_checkpoint(checkpoints_dir)
    if not resume:
        if existing is not None or (output_dir / "summary.json").exists():
            raise UserError(
                f"{output_dir} already holds a run; pass --resume to continue it or choose another --output."
            )
        return None
    if existing is None:
        raise UserError(f"--resume: {checkpoints_dir} has no complete checkpoint to resume from.")
    saved = load_saved_config(output_dir / "config.json")
    saved.vocab_size = config.vocab_size
    changed = differing_fields(saved, config, ignore=RESUMABLE_CHANGES | {"vocab_size"})
    if changed:
        raise UserError(
            f"--resume: {output_dir / 'config.json'} differs from this run in {', '.join(changed)}; "
            "rerun with the original settings or start a new --output."
        )
    return existing


def _flops_per_step(config: PretrainConfig) -> float | None:
    try:
        from flops.analytic import count_flops
    except ImportError:
        return None
    return float(count_flops(config).train_flops_per_step)


def _check_flop_counter(model: torch.nn.Module, batch: dict, config: PretrainConfig) -> dict:
    """Measure one real forward pass under FlopCounterMode against the analytic count (RNG left untouched)."""
    from flops.measured import startup_check

    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return startup_check(model, {k: v.to(device) for k, v in batch.items()}, config)


def _sub(root: str | None, name: str) -> str | None:
    return str(Path(root) / name) if root else None


def _short(metrics: dict[str, float]) -> dict[str, str]:
    keys = {"discriminator_accuracy": "disc_acc", "generator_accuracy": "gen_acc", "mlm_accuracy": "mlm_acc"}
    out = {short: f"{metrics[key]:.3f}" for key, short in keys.items() if key in metrics}
    out["tok/s"] = f"{metrics['tokens_per_second']:.0f}"
    return out


class _MetricLogger:
    """metrics.csv (append-only, survives resumes) and TensorBoard event files under OUTPUT/logs."""

    def __init__(self, output_dir: Path, enabled: bool, resume_step: int):
        self.enabled = enabled
        self.path = output_dir / "metrics.csv"
        self.writer = None
        self.fields: list[str] | None = None
        if not enabled:
            return
        if self.path.exists():
            rows = list(csv.DictReader(self.path.open()))
            kept = [row for row in rows if int(float(row["step"])) <= resume_step]
            self.fields = list(rows[0].keys()) if rows else None
            if self.fields:
                with self.path.open("w", newline="") as handle:
                    writer = csv.DictWriter(handle, fieldnames=self.fields)
                    writer.writeheader()
                    writer.writerows(kept)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(output_dir / "logs"), purge_step=resume_step or None)
        except ImportError:  # tensorboard is optional at run time; the CSV always exists
            self.writer = None

    def log(self, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        if self.fields is None:
            self.fields = list(metrics)
            with self.path.open("w", newline="") as handle:
                csv.DictWriter(handle, fieldnames=self.fields).writeheader()
        with self.path.open("a", newline="") as handle:
            csv.DictWriter(handle, fieldnames=self.fields, extrasaction="ignore").writerow(metrics)
        if self.writer is not None:
            for name, value in metrics.items():
                if name != "step":
                    self.writer.add_scalar(name, value, int(metrics["step"]))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
