"""TLM training: stage 1 trains the task and a language-modelling objective jointly from scratch, stage 2 fine-tunes
on the task alone; accuracy and macro-F1 on dev and test at the end.

Stage 1, per step: one task batch T and ρ1 batches E_1..E_ρ1 of the retrieved corpus,

    loss = CE(classifier(T), y) + ρ2 · LM(T) + mean_j LM(E_j)

where LM is this library's pretraining loss for `--objective` (`mlm`, `electra`, `electric`): masking happens
inside the pretraining model, so the task batch serves both terms. `--objective none` is the task-only baseline
(same architecture, trained from scratch on the task loss alone). All terms are one forward and one backward,
so multi-GPU (Accelerate / DDP) sees a single graph per step. A FLOP budget stops stage 1 at equal compute.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from electra.errors import UserError
from tlm.interleave import interleave
from tlm.tasks import Column, LabelVocab, TaskExample, read_task_file

logger = logging.getLogger(__name__)

LM_OBJECTIVES = ("mlm", "electra", "electric")
OBJECTIVES = (*LM_OBJECTIVES, "none")
LOSS_PARTS = ("loss", "task", "lm_internal", "lm_external")
_EMBEDDING_LOOKUPS = ("word_embeddings", "position_embeddings", "token_type_embeddings")


@dataclass
class TLMSettings:
    task_train: str
    task_dev: str
    task_test: str
    out: str
    retrieved: str | None = None  # the `electra tlm retrieve --out` folder (or any corpus path)
    objective: str = "electra"
    size: str = "tiny"
    config_file: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    rho1: int = 3
    rho2: float = 20.0
    batch_size: int | None = None  # task batch; external batches match it (default: the size's batch)
    steps: int | None = None  # stage-1 steps; default from --flops-budget, else the size's max_steps
    flops_budget: float | None = None  # stage-1 training FLOPs
    finetune_epochs: int = 3
    finetune_lr: float = 1e-4
    finetune_layer_decay: float = 0.8
    finetune_batch_size: int = 32
    eval_batch_size: int = 128
    vocab: str | None = None
    text_columns: Sequence[Column] | None = None
    label_column: Column | None = None
    header: bool | None = None
    task_format: str | None = None
    seed: int = 42
    cache_dir: str | None = None
    progress: bool = True


# ---------------------------------------------------------------------------------------------------------------
# Data


def corpus_of(retrieved: str | Path) -> Path:
    """`OUT/corpus` of a retrieval run, or the path itself when it is already a corpus."""
    path = Path(retrieved)
    if not path.exists():
        raise UserError(f"{path}: retrieved corpus does not exist; run `electra tlm retrieve` first.")
    return path / "corpus" if (path / "corpus").is_dir() else path


def encode_task(
    examples: Sequence[TaskExample], labels: Sequence[int], tokenizer, max_length: int
) -> list[dict]:
    """`[CLS] text [SEP]` ids (truncated to `max_length`) with the class id, ready for the collator."""
    encoded = tokenizer([e.text for e in examples], truncation=True, max_length=max_length)
    return [
        {"input_ids": ids, "token_type_ids": [0] * len(ids), "label": label}
        for ids, label in zip(encoded["input_ids"], labels)
    ]


class TaskCollator:
    """Pads task rows like the pretraining collator and adds the labels."""

    def __init__(self, pad_token_id: int):
        from electra.data import PretrainingCollator

        self.pad = PretrainingCollator(pad_token_id)

    def __call__(self, rows: Sequence[dict]) -> dict[str, torch.Tensor]:
        batch = self.pad(rows)
        batch["labels"] = torch.tensor([row["label"] for row in rows], dtype=torch.long)
        return batch


def batches_forever(
    rows, batch_size: int, seed: int, collate, rank: int = 0, world: int = 1
) -> Iterator[dict]:
    """Seeded shuffled batches, epoch after epoch (rows: a list or a `datasets.Dataset`)."""
    from electra.data import ResumableBatchOrder

    order = ResumableBatchOrder(len(rows), batch_size, seed, rank=rank, world_size=world)
    for indices in order.batches():
        if isinstance(rows, list):
            yield collate([rows[i] for i in indices])
        else:
            columns = rows[indices]
            yield collate([dict(zip(columns, values)) for values in zip(*columns.values())])


def eval_batches(rows: Sequence[dict], batch_size: int, collate) -> Iterator[dict]:
    """Batches of rows sorted by length, so little padding is computed (metrics do not depend on row order)."""
    ordered = sorted(rows, key=lambda row: len(row["input_ids"]))
    for start in range(0, len(ordered), batch_size):
        yield collate(ordered[start : start + batch_size])


# ---------------------------------------------------------------------------------------------------------------
# Model


class TLMModel(nn.Module):
    """The classifier (`ElectraForSequenceClassification` on the pretraining model's encoder) and the LM objective.

    One forward computes every loss term of a stage-1 step, so a DDP wrapper sees one graph.
    """

    def __init__(self, classifier: nn.Module, lm: nn.Module | None):
        super().__init__()
        self.classifier = classifier
        self.lm = lm  # None for the task-only baseline: no unused parameters for DDP to complain about

    def forward(
        self, internal: dict[str, torch.Tensor], externals: Sequence[dict], rho2: float
    ) -> dict[str, torch.Tensor]:
        task = self.classifier(
            input_ids=internal["input_ids"],
            attention_mask=internal["attention_mask"],
            token_type_ids=internal["token_type_ids"],
            labels=internal["labels"],
        ).loss
        zero = task.new_zeros(())
        lm_internal, lm_external = zero, zero
        if self.lm is not None and rho2 > 0:
            lm_internal = self.lm(
                internal["input_ids"], internal["attention_mask"], internal["token_type_ids"]
            ).loss
        if self.lm is not None and externals:
            lm_external = torch.stack(
                [self.lm(b["input_ids"], b["attention_mask"], b["token_type_ids"]).loss for b in externals]
            ).mean()
        loss = task + rho2 * lm_internal + lm_external
        return {"loss": loss, "task": task, "lm_internal": lm_internal, "lm_external": lm_external}


def build_models(config, tokenizer, labels: LabelVocab, objective: str) -> TLMModel:
    """The pretraining model of `objective` (ELECTRA's for the task-only baseline, whose encoder alone is used)."""
    from transformers import ElectraForSequenceClassification

    from electra.hf_configs import discriminator_hf_config
    from electra.modeling import build_pretraining_model

    lm = build_pretraining_model(config, tokenizer)
    hf = discriminator_hf_config(config, tokenizer.pad_token_id)
    hf.num_labels = len(labels)
    hf.id2label = dict(enumerate(labels.labels))
    hf.label2id = {label: i for i, label in enumerate(labels.labels)}
    classifier = ElectraForSequenceClassification(hf)
    classifier.electra = lm.encoder  # the shared encoder: the LM objective trains what the classifier reads
    return TLMModel(classifier, lm if objective in LM_OBJECTIVES else None)


# ---------------------------------------------------------------------------------------------------------------
# FLOPs


def analytic_flop_rates(config) -> tuple[float, float] | None:
    """(task, LM) training FLOPs per token from the library's analytic counter, in the ELECTRA paper's conventions
    (training = forward + backward, backward = forward x `backward_factor`); None when `flops` is not installed."""
    try:
        from flops.analytic import count_flops
    except ImportError:
        return None
    length = config.max_seq_length
    report = count_flops(config, inference_seq_len=length)
    task = (1.0 + report.backward_factor) * report.inference_flops / length  # kept encoder + a per-token head
    return task, report.train_flops_per_sequence / length


def params_flop_rate(module: nn.Module) -> float:
    """Training FLOPs per token from parameters: 6 x weights used per token (embedding lookups cost nothing)."""
    weights = sum(
        p.numel() for name, p in module.named_parameters() if not any(k in name for k in _EMBEDDING_LOOKUPS)
    )
    return 6.0 * weights


class FlopCounter:
    """Training FLOPs of each step, from the tokens actually processed (padding included: it is computed).

    Rates per token come from the analytic counter (`flops.analytic.count_flops`, at `max_seq_length`) for both the
    classification pass and the LM objective, so TLM and the task-only baseline are charged in one convention;
    without it, both fall back to 6 x non-embedding weights.
    """

    def __init__(self, config, model: TLMModel):
        rates = analytic_flop_rates(config)
        if rates is not None:
            self.task_rate, lm_rate = rates
            self.source = "flops.analytic"
        else:
            self.task_rate = params_flop_rate(model.classifier)
            lm_rate = params_flop_rate(model.lm) if model.lm is not None else 0.0
            self.source = "6 x parameters"
        self.lm_rate = lm_rate if model.lm is not None else 0.0

    def step(self, internal_tokens: int, external_tokens: int, lm_on_internal: bool) -> float:
        flops = self.task_rate * internal_tokens + self.lm_rate * external_tokens
        if lm_on_internal:
            flops += self.lm_rate * internal_tokens
        return flops


# ---------------------------------------------------------------------------------------------------------------
# Metrics


def classification_metrics(
    predictions: Sequence[int], labels: Sequence[int], num_labels: int
) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score

    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "macro_f1": float(
            f1_score(labels, predictions, average="macro", labels=list(range(num_labels)), zero_division=0)
        ),
    }


@torch.no_grad()
def evaluate(
    accelerator, classifier: nn.Module, rows: Sequence[dict], batch_size: int, collate, num_labels: int
) -> dict:
    classifier.eval()
    predictions: list[int] = []
    labels: list[int] = []
    for batch in eval_batches(rows, batch_size, collate):
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        logits = classifier(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        ).logits
        predictions.extend(logits.argmax(-1).tolist())
        labels.extend(batch["labels"].tolist())
    classifier.train()
    return classification_metrics(predictions, labels, num_labels)


# ---------------------------------------------------------------------------------------------------------------
# Training


class LossLog:
    """Averages each loss part over `every` steps and writes it to CSV and to the Accelerate trackers."""

    def __init__(self, path: Path, accelerator, every: int, stage: str):
        self.path, self.accelerator, self.every, self.stage = path, accelerator, max(1, every), stage
        self.sums: dict[str, float] = {}
        self.count = 0
        self.fields = ["step", "flops", "lr", *LOSS_PARTS]
        if accelerator.is_main_process:
            with open(path, "w", newline="") as handle:
                csv.writer(handle).writerow(self.fields)

    def add(self, step: int, flops: float, lr: float, parts: dict[str, float], force: bool = False) -> None:
        for key, value in parts.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
        self.count += 1
        if (step % self.every and not force) or not self.count:
            return
        means = {k: v / self.count for k, v in self.sums.items()}
        if self.accelerator.is_main_process:
            with open(self.path, "a", newline="") as handle:
                csv.writer(handle).writerow(
                    [step, f"{flops:.6g}", f"{lr:.6g}", *(f"{means.get(k, 0.0):.6f}" for k in LOSS_PARTS)]
                )
        self.accelerator.log(
            {f"{self.stage}/{k}": v for k, v in means.items()} | {f"{self.stage}/flops": flops}, step=step
        )
        self.sums, self.count = {}, 0


def read_loss_log(path: str | Path) -> list[dict[str, float]]:
    with open(path, newline="") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def _no_decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    from electra.finetuning import NO_DECAY_PATTERN

    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if NO_DECAY_PATTERN.search(name) else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _mean_padded_tokens(batches: Iterator[dict], samples: int = 8) -> float:
    return float(np.mean([next(batches)["input_ids"].numel() for _ in range(samples)]))


def train_tlm(settings: TLMSettings) -> dict[str, Any]:
    """Both stages end to end; writes OUT/{config.json, tokenizer/, stage1.csv, stage2.csv, model/, results.json}."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    from electra.config import build_config
    from electra.finetuning import build_finetune_optimizer, linear_warmup_decay
    from electra.tokenization import load_or_train_tokenizer

    if settings.objective not in OBJECTIVES:
        raise UserError(f"--objective {settings.objective!r} is not one of {', '.join(OBJECTIVES)}.")
    if settings.rho1 < 0 or settings.rho2 < 0:
        raise UserError("--rho1 and --rho2 must not be negative.")
    use_lm = settings.objective in LM_OBJECTIVES
    lm_objective = settings.objective if use_lm else "electra"
    config = build_config(
        settings.size, settings.config_file, {**settings.overrides, "objective": lm_objective}
    )
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)

    accelerator = Accelerator(
        mixed_precision=config.mixed_precision, log_with="tensorboard", project_dir=str(out)
    )
    set_seed(settings.seed)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # ---- task data ----
    kwargs = dict(
        text_columns=settings.text_columns,
        label_column=settings.label_column,
        header=settings.header,
        fmt=settings.task_format,
    )
    train_examples = read_task_file(settings.task_train, **kwargs)
    dev_examples = read_task_file(settings.task_dev, **kwargs)
    test_examples = read_task_file(settings.task_test, **kwargs)
    labels = LabelVocab.from_examples(train_examples, settings.task_train)
    train_labels = labels.encode(train_examples, settings.task_train)
    dev_labels = labels.encode(dev_examples, settings.task_dev)
    test_labels = labels.encode(test_examples, settings.task_test)

    # ---- tokenizer: --vocab, else WordPiece trained on the retrieved corpus (or the task texts) ----
    external_corpus = corpus_of(settings.retrieved) if settings.retrieved else None
    if use_lm and settings.rho1 > 0 and external_corpus is None:
        raise UserError("--retrieved is required when rho1 > 0 (pass --rho1 0 for LM on the task data only).")
    vocab_corpus = external_corpus
    if settings.vocab is None and vocab_corpus is None:
        vocab_corpus = out / "task_texts.txt"
        vocab_corpus.write_text("\n\n".join(e.text for e in train_examples) + "\n")
    tokenizer = load_or_train_tokenizer(
        settings.vocab, vocab_corpus, config.tokenizer_vocab_size, config.lowercase
    )
    config.vocab_size = len(tokenizer)
    if accelerator.is_main_process:
        config.save(out / "config.json")
        tokenizer.save_pretrained(str(out / "tokenizer"))

    collate = TaskCollator(tokenizer.pad_token_id)
    train_rows = encode_task(train_examples, train_labels, tokenizer, config.max_seq_length)
    dev_rows = encode_task(dev_examples, dev_labels, tokenizer, config.max_seq_length)
    test_rows = encode_task(test_examples, test_labels, tokenizer, config.max_seq_length)

    batch_size = settings.batch_size or config.train_batch_size
    rank, world = accelerator.process_index, accelerator.num_processes
    rho1 = settings.rho1 if use_lm else 0
    rho2 = settings.rho2 if use_lm else 0.0
    internal = batches_forever(train_rows, batch_size, settings.seed, collate, rank, world)
    if rho1 > 0:
        from electra.data import PretrainingCollator, build_pretraining_dataset

        dataset = build_pretraining_dataset(external_corpus, tokenizer, config, cache_dir=settings.cache_dir)
        external = batches_forever(
            dataset, batch_size, settings.seed + 1, PretrainingCollator(tokenizer.pad_token_id), rank, world
        )
        logger.info("external corpus: %d examples from %s", len(dataset), external_corpus)
    else:
        external = iter(())

    # ---- model, FLOPs, schedule ----
    set_seed(settings.seed)  # the same initial encoder for every arm that shares an architecture
    model = build_models(config, tokenizer, labels, settings.objective)
    counter = FlopCounter(config, model)
    steps = settings.steps
    if steps is None and settings.flops_budget:
        probe_int = batches_forever(train_rows, batch_size, settings.seed + 7, collate)
        int_tokens = _mean_padded_tokens(probe_int) * world
        ext_tokens = 0.0
        if rho1 > 0:
            probe_ext = batches_forever(
                dataset, batch_size, settings.seed + 7, PretrainingCollator(tokenizer.pad_token_id)
            )
            ext_tokens = _mean_padded_tokens(probe_ext) * world * rho1
        per_step = counter.step(int(int_tokens), int(ext_tokens), rho2 > 0)
        steps = max(1, math.ceil(settings.flops_budget / per_step))
        logger.info(
            "FLOP budget %.3g at ~%.3g FLOPs/step: %d stage-1 steps", settings.flops_budget, per_step, steps
        )
    steps = steps or config.max_steps
    warmup = min(config.warmup_steps, steps // 10)
    optimizer = torch.optim.AdamW(
        _no_decay_groups(model, config.weight_decay),
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_warmup_decay(steps, warmup))
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    accelerator.init_trackers("tlm", config={"objective": settings.objective, "rho1": rho1, "rho2": rho2})

    # ---- stage 1: joint training ----
    log1 = LossLog(out / "stage1.csv", accelerator, config.log_every, "stage1")
    flops_used = 0.0
    step = 0
    model.train()
    bar = tqdm(
        total=steps,
        desc=f"TLM stage 1 ({settings.objective})",
        disable=not (settings.progress and accelerator.is_main_process),
    )
    for internal_batch, external_batches in interleave(internal, external, rho1):
        internal_batch = {k: v.to(accelerator.device) for k, v in internal_batch.items()}
        external_batches = [{k: v.to(accelerator.device) for k, v in b.items()} for b in external_batches]
        with accelerator.autocast():
            parts = model(internal_batch, external_batches, rho2)
        accelerator.backward(parts["loss"])
        if config.max_grad_norm:
            accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        external_tokens = sum(b["input_ids"].numel() for b in external_batches)
        flops_used += counter.step(internal_batch["input_ids"].numel(), external_tokens, rho2 > 0) * world
        values = {k: float(v.detach()) for k, v in parts.items()}
        if not all(math.isfinite(v) for v in values.values()):
            raise RuntimeError(
                f"stage 1 step {step}: a loss is not finite ({values}); lower the learning rate."
            )
        done = step >= steps or (settings.flops_budget is not None and flops_used >= settings.flops_budget)
        log1.add(step, flops_used, scheduler.get_last_lr()[0], values, force=done)
        bar.update(1)
        bar.set_postfix(
            task=f"{values['task']:.3f}",
            lm_int=f"{values['lm_internal']:.3f}",
            lm_ext=f"{values['lm_external']:.3f}",
        )
        if done:
            break
    bar.close()
    stage1_steps, stage1_flops = step, flops_used

    # ---- stage 2: fine-tune on the task alone ----
    classifier = accelerator.unwrap_model(model).classifier
    stage1_dev = evaluate(accelerator, classifier, dev_rows, settings.eval_batch_size, collate, len(labels))
    logger.info("after stage 1: dev %s", stage1_dev)
    ft_batch = settings.finetune_batch_size
    per_epoch = max(1, len(train_rows) // (ft_batch * world))
    ft_steps = per_epoch * settings.finetune_epochs
    best = {"epoch": 0, "dev": stage1_dev, "state": copy.deepcopy(classifier.state_dict())}
    log2 = LossLog(out / "stage2.csv", accelerator, config.log_every, "stage2")
    if ft_steps and settings.finetune_epochs > 0:
        ft_optimizer, ft_scheduler = build_finetune_optimizer(
            classifier,
            settings.finetune_lr,
            settings.finetune_layer_decay,
            ft_steps,
            weight_decay=config.weight_decay,
        )
        ft_model, ft_optimizer, ft_scheduler = accelerator.prepare(classifier, ft_optimizer, ft_scheduler)
        task_batches = batches_forever(train_rows, ft_batch, settings.seed + 2, collate, rank, world)
        bar = tqdm(
            total=ft_steps,
            desc="TLM stage 2 (task)",
            disable=not (settings.progress and accelerator.is_main_process),
        )
        for epoch in range(1, settings.finetune_epochs + 1):
            for _ in range(per_epoch):
                batch = {k: v.to(accelerator.device) for k, v in next(task_batches).items()}
                with accelerator.autocast():
                    loss = ft_model(**batch).loss
                accelerator.backward(loss)
                if config.max_grad_norm:
                    accelerator.clip_grad_norm_(ft_model.parameters(), config.max_grad_norm)
                ft_optimizer.step()
                ft_scheduler.step()
                ft_optimizer.zero_grad(set_to_none=True)
                step += 1
                flops_used += counter.task_rate * batch["input_ids"].numel() * world
                log2.add(
                    step,
                    flops_used,
                    ft_scheduler.get_last_lr()[0],
                    {"loss": loss.item(), "task": loss.item()},
                )
                bar.update(1)
            dev = evaluate(accelerator, classifier, dev_rows, settings.eval_batch_size, collate, len(labels))
            logger.info("stage 2 epoch %d: dev %s", epoch, dev)
            if dev["macro_f1"] > best["dev"]["macro_f1"]:
                best = {"epoch": epoch, "dev": dev, "state": copy.deepcopy(classifier.state_dict())}
        bar.close()
    classifier.load_state_dict(best["state"])
    test = evaluate(accelerator, classifier, test_rows, settings.eval_batch_size, collate, len(labels))

    results = {
        "objective": settings.objective,
        "size": settings.size,
        "rho1": rho1,
        "rho2": rho2,
        "seed": settings.seed,
        "stage1_steps": stage1_steps,
        "stage1_flops": stage1_flops,
        "total_flops": flops_used,
        "flops_budget": settings.flops_budget,
        "flop_source": counter.source,
        "best_epoch": best["epoch"],
        "stage1_dev": stage1_dev,
        "dev": best["dev"],
        "test": test,
        "labels": labels.labels,
    }
    if accelerator.is_main_process:
        accelerator.unwrap_model(classifier).save_pretrained(str(out / "model"), safe_serialization=True)
        tokenizer.save_pretrained(str(out / "model"))
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    accelerator.end_training()
    logger.info("test: %s", test)
    return results
