"""The joint model of a TLM or TARTAN run: a classifier on the pretraining model's encoder, the LM objective, and
what a step of it costs in training FLOPs."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import ElectraForSequenceClassification

from electra.core.config import PretrainConfig
from electra.nn.hf_configs import discriminator_hf_config
from electra.objectives import flop_report
from electra.tlm.settings import TASK_ONLY
from electra.tlm.tasks import LabelVocab
from electra.training.continued import load_initial_weights
from electra.training.model import build_pretraining_model

logger = logging.getLogger(__name__)

LOSS_PARTS = ("loss", "task", "lm_internal", "lm_external")


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
    config: PretrainConfig,
    tokenizer: Any,
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


def analytic_flop_rates(config: PretrainConfig) -> tuple[float, float]:
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

    def __init__(self, config: PretrainConfig, model: TLMModel):
        self.task_rate, lm_rate = analytic_flop_rates(config)
        self.lm_rate = lm_rate if model.lm is not None else 0.0

    def step(self, internal_tokens: int, external_tokens: int, lm_on_internal: bool) -> float:
        """The FLOPs of one joint step over these token counts (the LM on the task texts when `lm_on_internal`)."""
        flops = self.task_rate * internal_tokens + self.lm_rate * external_tokens
        if lm_on_internal:
            flops += self.lm_rate * internal_tokens
        return flops
