"""TLM training: stage 1 trains the task and a language-modelling objective jointly from scratch, stage 2 fine-tunes
on the task alone; accuracy and macro-F1 on dev and test at the end. The same joint stage, started from a
checkpoint (`init_from`) and weighted uniformly or by meta-learned weights (`electra.tlm.tartan`), is MT-/META-TARTAN.

Stage 1, per step: one task batch T and ρ1 batches E_1..E_ρ1 of the retrieved corpus,

    loss = CE(classifier(T), y) + ρ2 · LM(T) + mean_j LM(E_j)

where LM is this library's pretraining loss for `--objective` (any registered objective: `mlm`, `electra`,
`electric`, ...): masking happens inside the pretraining model, so the task batch serves both terms. `--objective
none` is the task-only baseline (same architecture, trained from scratch on the task loss alone). All terms are one
forward and one backward, so multi-GPU (Accelerate / DDP) sees a single graph per step. A FLOP budget stops stage 1
at equal compute. Both stages run on the library's engine (`electra.training.engine`): logs in OUT/stage1/ and OUT/stage2/
(metrics.csv, TensorBoard), and with `save_every` checkpoints there that `resume` continues from.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import set_seed
from electra.tlm.interleave import interleave
from electra.tlm.outputs import refuse_missing_resume
from electra.tlm.retrieval import check_selection
from electra.tlm.tartan import (
    WEIGHTINGS,
    LossScales,
    MetaWeights,
    check_finite,
    combine,
    fit_meta_head,
    fixed_weights,
    flat,
    surrogate_loss,
    write_weight_history,
)
from electra.tlm.tasks import Column, LabelVocab, TaskExample, read_task_file
from safetensors.torch import load_model
from sklearn.metrics import accuracy_score, f1_score
from torch import nn
from transformers import ElectraForSequenceClassification

from electra.core.config import (
    INPUT_DIGESTS,
    RESUME_FIX,
    TASK_AWARE_RANGES,
    PretrainConfig,
    check_ranges,
    check_run_record,
    keep_run_record,
    load_saved_config,
    refuse_changed_settings,
)
from electra.core.errors import UserError
from electra.core.files import file_sha256, read_json_record, write_json_atomically
from electra.core.outputs import StepOutput
from electra.data.packing import PretrainingCollator, ResumableBatchOrder, build_pretraining_dataset
from electra.data.tokenization import load_or_train_tokenizer
from electra.export.layout import save_tokenizer
from electra.nn.hf_configs import discriminator_hf_config
from electra.objectives import build_config, flop_report, objective_names
from electra.training.continued import checkpoint_shape, load_initial_weights, preset_of
from electra.training.engine import (
    BEST_WEIGHTS,
    EarlyStopping,
    Engine,
    Task,
    TrainArgs,
    make_accelerator,
    per_process_batch,
)
from electra.training.model import build_pretraining_model
from electra.training.optim import warmup_steps_of
from electra.training.pretraining import RESUMABLE_CHANGES, corpus_sample, run_vocabulary, train_args
from electra.training.run_log import read_metrics

logger = logging.getLogger(__name__)

TASK_ONLY = "none"  # the task-only baseline: no LM objective
LOSS_PARTS = ("loss", "task", "lm_internal", "lm_external")
STAGE1_DONE = "result.json"
# Settings that only change where and how a run is watched or saved, not what it learns: a resume may change them.
RESUMABLE_SETTINGS = frozenset({"out", "progress", "save_every", "resume", "cache_dir", "eval_batch_size"})
_PATH_SETTINGS = ("task_train", "task_dev", "task_test", "retrieved", "config_file", "vocab", "init_from")
STAGE1_NAMES = {"tlm": "TLM stage 1", "uniform": "MT-TARTAN", "meta": "META-TARTAN"}
_EMBEDDING_LOOKUPS = ("word_embeddings", "position_embeddings", "token_type_embeddings")


@dataclass
class TLMSettings:
    task_train: str
    task_dev: str
    task_test: str
    out: str
    retrieved: str | None = None  # the `electra tlm retrieve --out` folder (or any corpus path)
    objective: str = "electra"
    size: str | None = None  # a size preset; None: --init-from's own size, else tiny
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
    save_every: int = 0  # checkpoint each stage every N updates (0: never)
    resume: bool = False  # continue from OUT/stage1 and OUT/stage2 checkpoints
    # Start from this checkpoint (its shape and tokenizer) instead of from scratch.
    init_from: str | None = None
    weighting: str = "tlm"  # tlm | uniform (MT-TARTAN) | meta (META-TARTAN): how stage 1 weighs its terms
    meta_lr: float = 0.1  # META-TARTAN's η
    meta_head_steps: int = 1  # SGD steps fitting φ* per training step
    meta_head_lr: float = 0.1
    learning_rate: float | None = None  # stage-1 peak learning rate (default: the config's)
    eval_every: int = 0  # stage-1 dev evaluations every N steps, keeping the best (0: none)
    patience: int | None = None  # stop stage 1 after this many evaluations without a gain
    metric: str = "macro_f1"  # dev metric for keeping the best state: macro_f1 | accuracy
    # Divide every stage-1 term by its running mean before weighting (electra.tlm.tartan.LossScales).
    balance_losses: bool = False

    def __post_init__(self) -> None:
        check_ranges(self, TASK_AWARE_RANGES)  # a negative rate trains the wrong way; a zero one not at all

    def read_split(self, path: str) -> list[TaskExample]:
        """A task split read with these settings' columns, header and format."""
        return read_task_file(
            path,
            text_columns=self.text_columns,
            label_column=self.label_column,
            header=self.header,
            fmt=self.task_format,
        )


# ---------------------------------------------------------------------------------------------------------------
# Data


def corpus_of(retrieved: str | Path) -> Path:
    """`OUT/corpus` of a retrieval run (once `electra.tlm.retrieval.check_selection` finds it whole), or the path itself
    when it is already a corpus."""
    path = Path(retrieved)
    if not path.exists():
        raise UserError(f"{path}: retrieved corpus does not exist; run `electra tlm retrieve` first.")
    check_selection(path)
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
        self.pad = PretrainingCollator(pad_token_id)

    def __call__(self, rows: Sequence[dict]) -> dict[str, torch.Tensor]:
        batch = self.pad(rows)
        batch["labels"] = torch.tensor([row["label"] for row in rows], dtype=torch.long)
        return batch


def batches_forever(
    rows, batch_size: int, seed: int, collate, rank: int = 0, world: int = 1, start: int = 0
) -> Iterator[dict]:
    """Seeded shuffled batches, epoch after epoch, from batch number `start` (rows: a list or a `datasets.Dataset`)."""
    order = ResumableBatchOrder(len(rows), batch_size, seed, rank=rank, world_size=world)
    for indices in order.batches(start):
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

    One forward computes every loss term of a joint step, so a DDP wrapper sees one graph. `meta_head` is
    META-TARTAN's separate end-task head φ* (`electra.tlm.tartan`); it never receives the engine's gradients.
    """

    def __init__(self, classifier: nn.Module, lm: nn.Module | None, meta_head: nn.Module | None = None):
        super().__init__()
        self.classifier = classifier
        self.lm = lm  # None for the task-only baseline: no unused parameters for DDP to complain about
        self.meta_head = meta_head

    def task_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(cross-entropy of the classifier on `batch`, the encoder's sequence output)."""
        features = self.classifier.electra(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        ).last_hidden_state
        logits = self.classifier.classifier(features)
        return nn.functional.cross_entropy(logits.float(), batch["labels"]), features

    def losses(
        self, internal: dict[str, torch.Tensor], externals: Sequence[dict], lm_on_internal: bool
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The unweighted terms this step has (task always; the LM on the task texts and on the external texts when
        asked for and present) and the task batch's sequence output."""
        task, features = self.task_loss(internal)
        terms = {"task": task}
        if self.lm is not None and lm_on_internal:
            terms["lm_internal"] = self.lm(
                internal["input_ids"], internal["attention_mask"], internal["token_type_ids"]
            ).loss
        if self.lm is not None and externals:
            terms["lm_external"] = torch.stack(
                [self.lm(b["input_ids"], b["attention_mask"], b["token_type_ids"]).loss for b in externals]
            ).mean()
        return terms, features

    def forward(
        self, internal: dict[str, torch.Tensor], externals: Sequence[dict], weights: dict[str, float]
    ) -> dict[str, torch.Tensor]:
        """Σ weight·term over the terms named in `weights` (TLM: task + ρ2·LM(T) + mean_j LM(E_j))."""
        terms, _ = self.losses(internal, externals, weights.get("lm_internal", 0.0) > 0)
        loss = sum(weights[name] * value for name, value in terms.items())
        zero = terms["task"].new_zeros(())
        return {"loss": loss, **{name: terms.get(name, zero) for name in LOSS_PARTS[1:]}}


def build_models(
    config,
    tokenizer,
    labels: LabelVocab,
    objective: str,
    init_from: str | None = None,
    meta_head: bool = False,
) -> TLMModel:
    """The pretraining model of `objective` (ELECTRA's for the task-only baseline, whose encoder alone is used),
    started from `init_from` when given, with a classifier on its encoder."""
    lm = build_pretraining_model(config, tokenizer)
    if init_from is not None:
        fresh = load_initial_weights(lm, init_from)
        logger.info("started from %s; freshly initialised: %s", init_from, fresh)
    hf = discriminator_hf_config(config, tokenizer.pad_token_id)
    hf.num_labels = len(labels)
    hf.id2label = dict(enumerate(labels.labels))
    hf.label2id = {label: i for i, label in enumerate(labels.labels)}
    classifier = ElectraForSequenceClassification(hf)
    classifier.electra = lm.encoder  # the shared encoder: the LM objective trains what the classifier reads
    head = copy.deepcopy(classifier.classifier) if meta_head else None
    if head is not None:
        head.requires_grad_(
            False
        )  # fitted by electra.tlm.tartan.fit_meta_head only, never by the engine's optimizer
    return TLMModel(classifier, None if objective == TASK_ONLY else lm, head)


# ---------------------------------------------------------------------------------------------------------------
# FLOPs


def analytic_flop_rates(config) -> tuple[float, float]:
    """(task, LM) training FLOPs per token from the library's analytic counter, in the ELECTRA paper's conventions
    (training = forward + backward, backward = forward x `backward_factor`)."""
    length = config.max_seq_length
    report = flop_report(config, inference_seq_len=length)
    task = (1.0 + report.backward_factor) * report.inference_flops / length  # kept encoder + a per-token head
    return task, report.train_flops_per_sequence / length


class FlopCounter:
    """Training FLOPs of each step, from the tokens actually processed (padding included: it is computed).

    Rates per token come from the analytic counter (`electra.objectives.flop_report`, at `max_seq_length`) for both
    the classification pass and the LM objective, so TLM and the task-only baseline are charged in one convention.
    """

    source = "electra.flops.analytic"

    def __init__(self, config, model: TLMModel):
        self.task_rate, lm_rate = analytic_flop_rates(config)
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


class JointTask(Task):
    """Stage 1: one task batch and ρ1 external batches per step, every loss term in one forward.

    The terms are weighted as `plan["weighting"]` says (`electra.tlm.tartan`): TLM's fixed weights, MT-TARTAN's uniform
    ones, or META-TARTAN's learned ones (which also draw one dev batch per step for the meta gradient). With
    `plan["eval_every"]` the task is evaluated on dev during training, for early stopping on the end task.
    """

    progress_keys = {"task": "task", "lm_internal": "lm_int", "lm_external": "lm_ext"}

    def __init__(
        self,
        model: TLMModel,
        internal_rows,
        external_rows,
        plan: dict[str, Any],
        counter: FlopCounter,
        dev_rows: Sequence[dict] = (),
    ):
        self.model, self.internal_rows, self.external_rows = model, internal_rows, external_rows
        self.plan, self.counter, self.dev_rows = plan, counter, dev_rows
        self.terms = active_terms(model, plan["rho1"], plan["rho2"])
        self.meta = MetaWeights(self.terms, plan["meta_lr"]) if plan["weighting"] == "meta" else None
        self.weights = None if self.meta else fixed_weights(plan["weighting"], self.terms, plan["rho2"])
        self.scales = LossScales() if plan.get("balance_losses") else None
        if self.meta is not None:
            self.progress_keys = {**self.progress_keys, **{f"w_{t}": f"w_{t[:6]}" for t in self.terms}}

    def batches(self, start: int):
        p = self.plan
        internal = batches_forever(
            self.internal_rows, p["batch_size"], p["seed"], p["collate"], p["rank"], p["world"], start
        )
        external: Iterator[dict] = iter(())
        if p["rho1"] > 0:
            external = batches_forever(
                self.external_rows,
                p["batch_size"],
                p["seed"] + 1,
                p["external_collate"],
                p["rank"],
                p["world"],
                start * p["rho1"],
            )
        joint = interleave(internal, external, p["rho1"])
        if self.meta is None:
            return joint
        dev = batches_forever(self.dev_rows, p["batch_size"], p["seed"] + 3, p["collate"], start=start)
        return ((internal, externals, dev_batch) for (internal, externals), dev_batch in zip(joint, dev))

    def step(self, model, batch) -> StepOutput:
        if self.meta is not None:
            return self._meta_step(model, *batch)
        internal, externals = batch
        parts = model(internal, externals, self.weights)
        loss = parts["loss"]
        if self.scales is not None:  # the same terms of the same forward, each divided by its running mean
            balanced = self.scales.divide({name: parts[name] for name in self.terms})
            loss = sum(self.weights[name] * balanced[name] for name in self.terms)
        return StepOutput(loss, {**{k: v.detach() for k, v in parts.items()}, "loss": loss.detach()})

    def _meta_step(self, model, internal, externals, dev) -> StepOutput:
        """META-TARTAN (`electra.tlm.tartan`): per-term gradients, meta gradient through φ*, weight update, surrogate loss."""
        p = self.plan
        raw, features = model.losses(internal, externals, "lm_internal" in self.terms)
        terms = self.scales.divide(raw) if self.scales is not None else raw
        parameters = [q for q in model.parameters() if q.requires_grad]
        body_ids = {id(q) for q in model.classifier.electra.parameters()}
        body = [i for i, q in enumerate(parameters) if id(q) in body_ids]
        gradients = {
            name: torch.autograd.grad(terms[name], parameters, allow_unused=True) for name in self.terms
        }
        head_loss = fit_meta_head(
            model.meta_head, features[:, :1], internal["labels"], p["meta_head_steps"], p["meta_head_lr"]
        )
        dev_loss = nn.functional.cross_entropy(
            model.meta_head(
                model.classifier.electra(
                    input_ids=dev["input_ids"],
                    attention_mask=dev["attention_mask"],
                    token_type_ids=dev["token_type_ids"],
                ).last_hidden_state
            ).float(),
            dev["labels"],
        )
        body_parameters = [parameters[i] for i in body]
        meta_gradient = flat(
            torch.autograd.grad(dev_loss, body_parameters, allow_unused=True), body_parameters
        )
        cosines = self.meta.update(
            meta_gradient,
            [flat([gradients[name][i] for i in body], body_parameters) for name in self.terms],
        )
        check_finite(cosines, "META-TARTAN")
        weights = dict(zip(self.terms, self.meta.weights().tolist()))
        self.meta.history.append([weights[name] for name in self.terms])
        update = combine(gradients, weights, len(parameters))
        surrogate = surrogate_loss(parameters, update)
        total = sum(weights[name] * terms[name].detach() for name in self.terms)
        metrics = {"loss": total, "meta_head": head_loss, "dev_meta": dev_loss.detach()}
        metrics.update({name: raw[name].detach() for name in self.terms})
        metrics.update({f"w_{name}": total.new_tensor(weights[name]) for name in self.terms})
        metrics.update(
            {f"cos_{name}": c.to(total.device, total.dtype) for name, c in zip(self.terms, cosines)}
        )
        return StepOutput(surrogate - surrogate.detach() + total, metrics)

    def tokens(self, batch) -> int:
        internal, externals = batch[0], batch[1]
        return internal["input_ids"].numel() + sum(b["input_ids"].numel() for b in externals)

    def flops(self, micro_batches) -> float:
        total = 0.0
        for batch in micro_batches:
            internal, externals = batch[0], batch[1]
            external_tokens = sum(b["input_ids"].numel() for b in externals)
            total += self.counter.step(
                internal["input_ids"].numel(), external_tokens, "lm_internal" in self.terms
            )
            if self.meta is not None:  # the dev batch's forward and backward through the body
                total += self.counter.task_rate * batch[2]["input_ids"].numel()
        return total * self.plan["world"]

    def evaluate(self, model) -> dict[str, float] | None:
        p = self.plan
        if not p.get("eval_every"):
            return None
        return evaluate(
            p["accelerator"],
            model.classifier,
            self.dev_rows,
            p["eval_batch_size"],
            p["collate"],
            p["num_labels"],
        )

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"meta": self.meta.state_dict()} if self.meta is not None else {}
        if self.scales is not None:
            state["loss_scales"] = self.scales.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.meta is not None:
            self.meta.load_state_dict(state.get("meta", {}))
        if self.scales is not None:
            self.scales.load_state_dict(state.get("loss_scales", {}), self.plan["accelerator"].device)


def active_terms(model: TLMModel, rho1: int, rho2: float) -> list[str]:
    """The loss terms a joint step has: the task, and the LM on task texts (ρ2 > 0) and on external texts (ρ1 > 0)."""
    terms = ["task"]
    if model.lm is not None and rho2 > 0:
        terms.append("lm_internal")
    if model.lm is not None and rho1 > 0:
        terms.append("lm_external")
    return terms


class ClassifierTask(Task):
    """Stage 2: the task alone, evaluated on dev after every epoch (the best epoch's weights are kept)."""

    def __init__(
        self, classifier: nn.Module, train_rows, dev_rows, plan: dict[str, Any], counter: FlopCounter
    ):
        self.model, self.train_rows, self.dev_rows = classifier, train_rows, dev_rows
        self.plan, self.counter = plan, counter

    def batches(self, start: int):
        p = self.plan
        return batches_forever(
            self.train_rows, p["batch_size"], p["seed"] + 2, p["collate"], p["rank"], p["world"], start
        )

    def step(self, model, batch) -> StepOutput:
        loss = model(**batch).loss
        return StepOutput(loss, {"loss": loss.detach(), "task": loss.detach()})

    def tokens(self, batch) -> int:
        return batch["input_ids"].numel()

    def flops(self, micro_batches) -> float:
        return (
            sum(self.counter.task_rate * b["input_ids"].numel() for b in micro_batches) * self.plan["world"]
        )

    def evaluate(self, model) -> dict[str, float]:
        p = self.plan
        return evaluate(
            p["accelerator"], model, self.dev_rows, p["eval_batch_size"], p["collate"], p["num_labels"]
        )


def read_loss_log(stage_dir: str | Path) -> list[dict[str, float]]:
    """The logged steps of one stage (OUT/stage1 or OUT/stage2): step, flops, learning_rate and the loss parts."""
    return read_metrics(stage_dir, "train")


def _mean_padded_tokens(batches: Iterator[dict], samples: int = 8) -> float:
    return float(np.mean([next(batches)["input_ids"].numel() for _ in range(samples)]))


@dataclass
class TrainedJoint:
    """A finished run: its results and what produced them (ISS scores candidates with the model)."""

    results: dict[str, Any]
    model: TLMModel
    tokenizer: Any
    config: Any


def run_config(settings: TLMSettings) -> tuple[TLMSettings, PretrainConfig]:
    """The settings with their size resolved (the one `init_from` was built as, tiny without one) and the model
    config the run trains: read here once, so that ISS can check a layer against the model's shape before it
    spends the reference run."""
    lm_objective = settings.objective if settings.objective != TASK_ONLY else "electra"
    overrides = {**settings.overrides, "objective": lm_objective}
    if settings.size is None:
        found = (
            preset_of(settings.init_from)
            if settings.init_from and Path(settings.init_from).is_dir()
            else None
        )
        settings = replace(settings, size=found or "tiny")
    if settings.init_from is not None:  # a path that is no folder is refused by checkpoint_shape
        overrides = checkpoint_shape(
            settings.init_from, {**overrides, "init_from": settings.init_from}, settings.size
        )
    config = build_config(settings.size, settings.config_file, overrides)
    if settings.learning_rate is not None:
        config.learning_rate = settings.learning_rate
    return settings, config


def train_tlm(settings: TLMSettings) -> dict[str, Any]:
    """Both stages end to end; writes OUT/{config.json, tokenizer/, stage1/, stage2/, model/, results.json}.
    `resume` continues the run in OUT, and is refused where OUT holds none."""
    refuse_missing_resume(settings.out, settings.resume)
    if settings.resume:
        finished = finished_results(settings)
        if finished is not None:
            return finished
    return train_joint(settings).results


def finished_results(settings: TLMSettings) -> dict[str, Any] | None:
    """The results of a run that a `resume` finds finished (OUT/results.json readable), once the resume check
    passes (other settings or inputs are still refused); None when it has work left. A finished run without
    checkpoints (none are kept without `save_every`) had trained both stages again from their first step and
    rewritten results.json; now it changes nothing and says so."""
    settings, config = run_config(settings)
    out = Path(settings.out)
    saved = read_json_record(out / "results.json")
    if saved is None:
        return None
    check_resume(out, resume_record(settings), config)
    print(
        f"{out} already finished ({out / 'results.json'}); nothing to do (--overwrite instead of --resume "
        "trains it again).",
        file=sys.stderr,
        flush=True,
    )
    return saved


def train_joint(settings: TLMSettings) -> TrainedJoint:
    """`train_tlm`, keeping the trained model, its tokenizer and config."""
    objectives = (*objective_names(), TASK_ONLY)
    if settings.objective not in objectives:
        raise UserError(f"--objective {settings.objective!r} is not one of {', '.join(objectives)}.")
    if settings.rho1 < 0 or settings.rho2 < 0:
        raise UserError("--rho1 and --rho2 must not be negative.")
    if settings.weighting not in WEIGHTINGS:
        raise UserError(f"--weighting {settings.weighting!r} is not one of {', '.join(WEIGHTINGS)}.")
    if settings.metric not in ("macro_f1", "accuracy"):
        raise UserError(f"--metric {settings.metric!r} is not macro_f1 or accuracy.")
    use_lm = settings.objective != TASK_ONLY
    settings, config = run_config(settings)
    out = Path(settings.out)
    record = resume_record(settings)
    if settings.resume:
        check_resume(out, record, config)
    accelerator = make_accelerator(config.mixed_precision)
    set_seed(settings.seed)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # ---- task data (every input is read before OUT gets a file: a refused run leaves nothing behind) ----
    train_examples = settings.read_split(settings.task_train)
    dev_examples = settings.read_split(settings.task_dev)
    test_examples = settings.read_split(settings.task_test)
    labels = LabelVocab.from_examples(train_examples, settings.task_train)
    train_labels = labels.encode(train_examples, settings.task_train)
    dev_labels = labels.encode(dev_examples, settings.task_dev)
    test_labels = labels.encode(test_examples, settings.task_test)

    # ---- tokenizer: --vocab, else WordPiece trained on the retrieved corpus (or the task texts) ----
    external_corpus = corpus_of(settings.retrieved) if settings.retrieved else None
    if use_lm and settings.rho1 > 0 and external_corpus is None:
        raise UserError("--retrieved is required when rho1 > 0 (pass --rho1 0 for LM on the task data only).")
    vocab_corpus = external_corpus
    # --init-from's own vocabulary when there is one (a differing --vocab is refused)
    vocab = run_vocabulary(config, settings.vocab)
    saved_tokenizer = out / "tokenizer"
    if settings.resume and (saved_tokenizer / "tokenizer.json").is_file():
        tokenizer = load_or_train_tokenizer(
            str(saved_tokenizer), None, config.tokenizer_vocab_size, config.lowercase
        )
    elif vocab is None and vocab_corpus is None:
        with tempfile.TemporaryDirectory() as scratch:
            task_texts = Path(scratch) / "task_texts.txt"
            task_texts.write_text("\n\n".join(e.text for e in train_examples) + "\n")
            tokenizer = load_or_train_tokenizer(
                None, task_texts, config.tokenizer_vocab_size, config.lowercase, text_form=config.text_form
            )
    else:
        tokenizer = load_or_train_tokenizer(
            vocab, vocab_corpus, config.tokenizer_vocab_size, config.lowercase, text_form=config.text_form
        )
    config.vocab_size = len(tokenizer)

    collate = TaskCollator(tokenizer.pad_token_id)
    train_rows = encode_task(train_examples, train_labels, tokenizer, config.max_seq_length)
    dev_rows = encode_task(dev_examples, dev_labels, tokenizer, config.max_seq_length)
    test_rows = encode_task(test_examples, test_labels, tokenizer, config.max_seq_length)

    rank, world = accelerator.process_index, accelerator.num_processes
    # --batch-size is the task batch of one step over all processes (external batches match it), as pretrain's
    batch_size = per_process_batch(settings.batch_size or config.train_batch_size, world)
    ft_batch = per_process_batch(settings.finetune_batch_size, world, "--finetune-batch-size")
    rho1 = settings.rho1 if use_lm else 0
    rho2 = settings.rho2 if use_lm else 0.0
    dataset = None
    external_collate = PretrainingCollator(tokenizer.pad_token_id)
    if rho1 > 0:
        dataset = build_pretraining_dataset(external_corpus, tokenizer, config, cache_dir=settings.cache_dir)
        logger.info("external corpus: %d examples from %s", len(dataset), external_corpus)
    meta = settings.weighting == "meta"
    if meta and world > 1:
        raise UserError("--weighting meta runs on one process; launch it without multi-process Accelerate.")
    out.mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process:
        keep_run_record(out, record, settings.resume)
        config.save(out / "config.json")
        tokenizer.save_pretrained(str(saved_tokenizer))

    # ---- model, FLOPs, schedule ----
    set_seed(settings.seed)  # the same initial encoder for every arm that shares an architecture
    model = build_models(config, tokenizer, labels, settings.objective, settings.init_from, meta_head=meta)
    counter = FlopCounter(config, model)
    steps = settings.steps
    if steps is None and settings.flops_budget:
        probe_int = batches_forever(train_rows, batch_size, settings.seed + 7, collate)
        int_tokens = _mean_padded_tokens(probe_int) * world
        ext_tokens = 0.0
        if rho1 > 0:
            probe_ext = batches_forever(dataset, batch_size, settings.seed + 7, external_collate)
            ext_tokens = _mean_padded_tokens(probe_ext) * world * rho1
        per_step = counter.step(int(int_tokens), int(ext_tokens), rho2 > 0)
        if meta:  # one dev batch per step through the body
            per_step += counter.task_rate * _mean_padded_tokens(
                batches_forever(dev_rows, batch_size, 7, collate)
            )
        steps = max(1, math.ceil(settings.flops_budget / per_step))
        logger.info(
            "FLOP budget %.3g at ~%.3g FLOPs/step: %d stage-1 steps", settings.flops_budget, per_step, steps
        )
    steps = steps or config.max_steps
    plan = dict(
        batch_size=batch_size,
        seed=settings.seed,
        collate=collate,
        external_collate=external_collate,
        rank=rank,
        world=world,
        rho1=rho1,
        rho2=rho2,
        accelerator=accelerator,
        eval_batch_size=settings.eval_batch_size,
        num_labels=len(labels),
        weighting=settings.weighting,
        meta_lr=settings.meta_lr,
        meta_head_steps=settings.meta_head_steps,
        meta_head_lr=settings.meta_head_lr,
        eval_every=settings.eval_every,
        balance_losses=settings.balance_losses,
    )

    # ---- stage 1: joint training ----
    stage1_dir = out / "stage1"
    stage1_args = replace(
        train_args(config, stage1_dir),  # the config's optimizer settings, with TLM's own schedule and stops
        max_steps=steps,
        warmup_steps=min(config.warmup_steps, steps // 10),
        schedule="reference",
        save_every=settings.save_every,
        flops_budget=settings.flops_budget,
        progress=settings.progress,
        description=f"{STAGE1_NAMES[settings.weighting]} ({settings.objective})",
        eval_every=settings.eval_every,
        early_stopping=(
            EarlyStopping(
                settings.metric, "max", settings.patience, evaluate_at_start=settings.init_from is not None
            )
            if settings.eval_every
            else None
        ),
    )
    stage1 = Engine(stage1_args, accelerator)
    finished = _finished_stage(stage1_dir) if settings.resume else None
    final_checkpoint = stage1.latest_checkpoint()
    if finished is not None and final_checkpoint is not None:  # stage 1 ended before the interruption
        load_model(model, str(final_checkpoint / "model.safetensors"), strict=False)
        _restore_best_state(stage1, model, finished)
        stage1_steps, stage1_flops = finished["step"], finished["flops"]
    else:
        resume_from = stage1.resume_checkpoint(settings.resume, "stage 1", finished=finished is not None)
        joint = JointTask(model, train_rows, dataset, plan, counter, dev_rows)
        result = stage1.fit(joint, resume_from)
        stage1_steps, stage1_flops = result.step, result.flops
        if accelerator.is_main_process:
            stage1_best = result.best and {"step": result.best["step"], **result.best["metrics"]}
            write_json_atomically(
                stage1_dir / STAGE1_DONE,
                {
                    "step": stage1_steps,
                    "flops": stage1_flops,
                    "stop": result.stop_reason,
                    "best": stage1_best,
                },
            )
            if joint.meta is not None:
                write_weight_history(joint.meta.history, joint.terms, stage1_dir)

    # ---- stage 2: fine-tune on the task alone, keeping the best dev epoch ----
    classifier = model.classifier
    per_epoch = max(1, len(train_rows) // (ft_batch * world))
    ft_steps = per_epoch * settings.finetune_epochs
    total_flops, best_epoch = stage1_flops, 0
    if not (ft_steps and settings.finetune_epochs > 0):
        stage1_dev = evaluate(
            accelerator, classifier, dev_rows, settings.eval_batch_size, collate, len(labels)
        )
        best_dev = stage1_dev
    else:  # stage 2 evaluates the stage-1 weights first (its epoch 0) and keeps the best epoch
        stage2_args = TrainArgs(
            max_steps=ft_steps,
            learning_rate=settings.finetune_lr,
            warmup_steps=warmup_steps_of(0.1, ft_steps),
            schedule="reference",
            weight_decay=config.weight_decay,
            layer_decay=settings.finetune_layer_decay,
            max_grad_norm=config.max_grad_norm,
            output_dir=out / "stage2",
            log_every=config.log_every,
            save_every=settings.save_every,
            eval_every=per_epoch,
            early_stopping=EarlyStopping(settings.metric, "max", evaluate_at_start=True),
            progress=settings.progress,
            description="TLM stage 2 (task)",
            cpu_dropout=config.cpu_dropout,
        )
        stage2 = Engine(stage2_args, accelerator)
        task2 = ClassifierTask(classifier, train_rows, dev_rows, plan | {"batch_size": ft_batch}, counter)
        result2 = stage2.fit(task2, stage2.resume_checkpoint(settings.resume, "stage 2"))
        total_flops += result2.flops
        best_dev, best_epoch = result2.best["metrics"], result2.best["step"] // per_epoch
        stage1_dev = {k: v for k, v in result2.evaluations[0].items() if k != "step"}
        for evaluation in result2.evaluations[1:]:
            logger.info("stage 2 epoch %d: dev %s", evaluation["step"] // per_epoch, evaluation)
    logger.info("after stage 1: dev %s", stage1_dev)
    test = evaluate(accelerator, classifier, test_rows, settings.eval_batch_size, collate, len(labels))

    results = {
        "objective": settings.objective,
        "weighting": settings.weighting,
        "init_from": settings.init_from,
        "size": settings.size,
        "rho1": rho1,
        "rho2": rho2,
        "seed": settings.seed,
        "stage1_steps": stage1_steps,
        "stage1_flops": stage1_flops,
        "total_flops": total_flops,
        "flops_budget": settings.flops_budget,
        "flop_source": counter.source,
        "best_epoch": best_epoch,
        "stage1_dev": stage1_dev,
        "dev": best_dev,
        "test": test,
        "labels": labels.labels,
    }
    if accelerator.is_main_process:
        classifier.save_pretrained(str(out / "model"), safe_serialization=True)
        save_tokenizer(tokenizer, out / "model", classifier.config)
        write_json_atomically(out / "results.json", results)
    accelerator.end_training()
    logger.info("test (%s): %s", settings.task_test, test)  # ISS's reference run tests on the dev file
    return TrainedJoint(results, model, tokenizer, config)


def resume_record(settings: TLMSettings) -> dict[str, Any]:
    """The settings a resumed run must share with the run it continues (files as absolute paths, so a relative
    spelling from another folder still matches), and what its input files held (`input_digests`)."""
    record = {name: value for name, value in asdict(settings).items() if name not in RESUMABLE_SETTINGS}
    # what tells this output (its classifier in OUT/model) from a model (`electra.export.layout.refuse_run_folder`)
    record["command"] = "tlm train" if settings.weighting == "tlm" else "tartan"
    for name in _PATH_SETTINGS:
        if record.get(name):
            record[name] = str(Path(record[name]).resolve())
    return record | {INPUT_DIGESTS: input_digests(settings)}


_WHOLE_FILES = ("task_train", "task_dev", "task_test", "config_file", "vocab")  # small: hashed whole


def input_digests(settings: TLMSettings) -> dict[str, str]:
    """A digest of each input file's contents: the same path can hold another file by a resume (a task file
    relabelled, a retrieval redone into the same folder), and a run resumed on it mixed two datasets under one
    results.json. Task files, the config and a vocabulary file are hashed whole; the retrieved corpus, which can
    be gigabytes, by `corpus_sample` (each file's name, size and first 64 KiB), as pretraining's resume does."""
    digests = {}
    for name in _WHOLE_FILES:
        path = getattr(settings, name)
        if path and Path(path).is_file():
            digests[name] = file_sha256(path)
    if settings.retrieved and Path(settings.retrieved).exists():
        digests["retrieved"] = corpus_sample(corpus_of(settings.retrieved))
    return digests


def check_resume(out: Path, record: dict[str, Any], config: PretrainConfig) -> None:
    """Refuse (one line, before anything loads) a `resume` under other settings, other input contents or another
    model shape: its checkpoints would load into a model of another shape (a traceback), or be continued, and
    results.json labelled, under settings or data that did not produce them. OUT/config.json, the model's, is
    compared too (it is all a run from before OUT/run.json existed has)."""
    check_run_record(out, record)
    if (out / "config.json").is_file():
        model = asdict(load_saved_config(out / "config.json"))
        ignore = RESUMABLE_CHANGES | {"vocab_size"}  # the vocabulary's size is the saved tokenizer's
        refuse_changed_settings(out / "config.json", model, asdict(config), RESUME_FIX, ignore)


def _restore_best_state(stage1: Engine, model: TLMModel, finished: dict[str, Any]) -> None:
    """After a resume finds stage 1 finished: the weights stage 1 ended with, which are its best dev state when it
    kept one (`--eval-every`), not its last checkpoint's. Without this a run killed after stage 1 (in stage 2, or
    while testing) was tested, or fine-tuned, from the last step's weights, and results.json differed from an
    uninterrupted run's."""
    if not finished.get("best") or stage1.checkpoints_dir is None:
        return
    best = stage1.checkpoints_dir / BEST_WEIGHTS
    if not best.is_file():
        raise UserError(
            f"--resume: {best} is missing, so stage 1's best dev state cannot be restored; start over with "
            "--overwrite."
        )
    load_model(model, str(best), strict=False)


def _finished_stage(stage_dir: Path) -> dict[str, Any] | None:
    path = stage_dir / STAGE1_DONE
    return json.loads(path.read_text()) if path.is_file() else None
